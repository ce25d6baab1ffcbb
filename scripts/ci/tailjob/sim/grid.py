"""The sweep's grid: backends x load points x policies, read from TOML (``--grid default|FILE``).

Its keys, with an example: docs/en/sweep.md, "The sweep" (:data:`DEFAULT_GRID` is the default's text).
Every key is checked by its row of :data:`_TOP` or :data:`_LOAD` (a ``[[load]]`` table), a knob by
:mod:`tailreactor.config`, a user's traffic (``workload = "FILE.toml"``, relative to the grid file, or
``[load.class.NAME]`` tables) by :mod:`tailjob.workloads`: a bad one is one line naming it and what is
accepted, before anything runs.  A ``[[policy]]`` lists knobs' values; every combination is one policy
(arm B's knobs), so an axis of the sweep is one more knob there.  Arm A holds the knobs of :data:`OFF`
at their values there (age-based dispatch off) unless ``against`` says otherwise.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tailreactor import config as _config

from .. import stats, workloads
from ..plan import SIM_MAX_CONNECTIONS, SIM_MAX_DURATION_S, PlanError

TAIL = "CWIST_REACTOR_TAIL_US"
OFF = {TAIL: "0", "CWIST_REACTOR_HARVEST_US": "0"}
"""The knobs a policy compares, at their values in arm A (unless ``against``); arm B has them there too
unless the policy sets them.  The first is always in a policy's label."""
MODELLED = ("epoll", "io_uring", "selectors")
MAX_SEEDS, MAX_DURATION_S, MAX_CONNECTIONS = (
    64,
    float(SIM_MAX_DURATION_S),
    SIM_MAX_CONNECTIONS,
)  # the sim tier's
REFUSED_KNOBS = ("CWIST_REACTOR_BACKEND", "CWIST_LATENCY_PROBE", "CWIST_LATENCY_PROBE_FILE")
"""Knobs a policy cannot set: the backend is the grid's ``backends`` axis; the probe has no file here."""


def _int_in(lo: int, hi: int) -> tuple:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi, (
        f"accepted an integer from {lo} to {hi}"
    )


def _seconds(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= MAX_DURATION_S


def _name(v) -> bool:
    return isinstance(v, str) and bool(v) and all(c.isalnum() or c in "-_" for c in v)


def _backends(v) -> bool:
    return isinstance(v, list) and bool(v) and all(b in MODELLED for b in v)


# key -> (default, check (None: where the value is used), what is accepted); checked in this order
_TOP: dict[str, tuple] = {
    "name": (None, _name, "accepted letters, digits, '-' and '_'"),
    "backends": (["epoll", "io_uring"], _backends, f"accepted a list of {', '.join(MODELLED)}"),
    "seeds": (stats.MIN_PAIRS, *_int_in(1, MAX_SEEDS)),
    "first_seed": (1, *_int_in(0, 2**31 - 1)),
    "connections": (64, *_int_in(1, MAX_CONNECTIONS)),
    "load": ([], None, ""),
    "policy": ([], None, ""),
}
_LOAD: dict[str, tuple] = {
    "workload": (None, None, ""),
    "load": (None, lambda v: v in (None, "open", "closed"), "accepted: open, closed (uniform only)"),
    "rate": (None, None, ""),
    "schedule": ("poisson", lambda v: v in ("poisson", "constant"), "accepted: poisson, constant"),
    "connections": (None, *_int_in(1, MAX_CONNECTIONS)),
    "duration": (2, _seconds, f"accepted virtual seconds above 0, at most {MAX_DURATION_S:g}"),
    "name": (None, None, ""),
    "class": (None, None, ""),
}
_TRAFFIC_SETS = {"load": "loop", "rate": "rate", "schedule": "schedule", "connections": "connections"}
"""A load point's keys that a traffic's classes set instead (as ``--workload FILE.toml`` refuses the options)."""
_LOAD_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")

DEFAULT_GRID = """\
# The default grid of scripts/tail-latency.sh sweep (docs/en/sweep.md, "The sweep").
name = "default"
backends = ["epoll", "io_uring"]
seeds = 8
first_seed = 1
connections = 64

[[load]]    # the seed's workload: wrk's closed loop, every connection alike
workload = "uniform"
duration = 0.5

[[load]]    # the same connections, open loop at 0.7 of the capacity
workload = "uniform"
load = "open"
rate = "0.7x"
duration = 0.5

[[load]]    # bulk pipelining (closed loop) and 8 interactive clients (open loop, 200 req/s)
workload = "mixed"
rate = "200"
duration = 4

[[load]]    # 1 % of the requests 2 ms long (open loop, half the capacity)
workload = "slow-route"
rate = "0.5x"
duration = 1

[[load]]    # 4C connections, mostly idle between requests (closed loop, 50 ms think)
workload = "think-time"
duration = 1

[[policy]]  # the threshold alone; 0 is arm A itself (an A/A control), 3600000 the seed's "off"
CWIST_REACTOR_TAIL_US = [0, 1000, 3500, 3600000]

[[policy]]  # harvesting alone, and with the default threshold
CWIST_REACTOR_TAIL_US = [0, 3500]
CWIST_REACTOR_HARVEST_US = [1000]

[[policy]]  # harvesting's own share: arm A has the threshold on
against = { CWIST_REACTOR_TAIL_US = 3500 }
CWIST_REACTOR_TAIL_US = [3500]
CWIST_REACTOR_HARVEST_US = [1000]

[[policy]]  # the late bypass where it can act: a pass yields after 4 of its 16 requests (both arms)
CWIST_REACTOR_TAIL_US = [3500]
CWIST_HTTP_YIELD_BATCH = [4]
"""


class GridError(ValueError):
    """A grid the sweep cannot run; the message is one line naming the key and what is accepted."""


def _read(raw: Mapping, spec: dict[str, tuple], at: str, **defaults) -> dict:
    """``raw``'s keys checked by ``spec``'s rows, missing ones at their defaults (``defaults`` first)."""
    for key in raw:
        if key not in spec:
            raise GridError(f"--grid {at}: unknown key {key!r}; accepted: {', '.join(spec)}")
    values = {}
    for key, (default, ok, accepted) in spec.items():
        values[key] = value = raw.get(key, defaults.get(key, default))
        if ok is not None and not ok(value):
            raise GridError(f"--grid {at}: {key} = {value!r}; {accepted}")
    return values


@dataclass(frozen=True)
class LoadPoint:
    """One load: a named workload with ``load``/``rate``/``schedule`` as the job's options, or a user's
    :class:`~tailjob.workloads.Traffic` (its classes set all three, and ``connections``: their sum).
    ``name`` is what the report, heat maps and result JSON call the workload: a named workload's name;
    a traffic's ``name`` key, else its file's name, else ``traffic-N`` for classes inline.  Load
    points of one name are one section of the report and one heat map."""

    workload: str | workloads.Traffic
    load: str | None
    rate: str | None
    schedule: str
    connections: int
    duration_s: float
    name: str
    tell: str = ""
    """What tells the load point from another alike in the grid (:func:`_told_apart`); in its label."""
    load_plan: workloads.LoadPlan | None = None
    """The load as the job plans it (:func:`tailjob.workloads.plan_load`; None: wrk's closed loop)."""

    @property
    def traffic(self) -> workloads.Traffic | None:
        return self.workload if isinstance(self.workload, workloads.Traffic) else None

    @property
    def label(self) -> str:
        if isinstance(self.workload, workloads.Traffic):
            return f"{self.name} c{self.connections}{self.tell}"
        w = workloads.WORKLOADS[self.workload]
        rate = self.rate or w.default_rate or ""
        if self.workload == "uniform":
            what = f"open {rate}" if self.load == "open" else "closed"
        else:
            what = (f"open {rate}" + ("" if rate.endswith("x") else "/s")) if w.open_classes else "closed"
        return f"{self.workload} {what} c{self.connections}{self.tell}"

    def as_dict(self) -> dict:
        """The load point in the result JSON; a traffic's under ``traffic``: its ``source`` (the file
        as the grid names it, or ``inline``) and its classes, so the document says what ran."""
        traffic = {"traffic": self.traffic.as_dict()} if self.traffic is not None else {}
        return {
            "workload": self.name,
            **traffic,
            "load": self.load,
            "rate": self.rate,
            "schedule": None if self.traffic is not None else self.schedule,  # a traffic's: per class
            "connections": self.connections,
            "duration_s": self.duration_s,
            "label": self.label,
        }


def env_text(env: Mapping[str, str]) -> str:
    """Knobs as ``TAIL_US=3500 YIELD_BATCH=4``: their names without ``CWIST_`` and area."""
    return (
        " ".join(f"{re.sub(r'^CWIST_(?:REACTOR_|HTTP_)?', '', k)}={v}" for k, v in env.items())
        or "(defaults)"
    )


@dataclass(frozen=True)
class Policy:
    """Arm B's knobs (``b``) and arm A's (``a``: ``b`` with :data:`OFF`, then ``against``).  Its label:
    arm B's knobs of :data:`OFF` and those arm A does not share, the shared ones after "both", and
    with ``against`` arm A's own after "vs"."""

    b: tuple[tuple[str, str], ...]
    a: tuple[tuple[str, str], ...]
    against: bool = False

    @property
    def label(self) -> str:
        b, a = dict(self.b), dict(self.a)
        shared = {k: v for k, v in b.items() if k not in OFF and a.get(k) == v}
        own = {k: b[k] for k in OFF if k in b and (b[k] != OFF[k] or k == TAIL)}
        own |= {k: v for k, v in b.items() if k not in OFF and k not in shared}
        text = env_text(own) + (" (A/A control)" if self.control else "")
        if shared:
            text += f", both {env_text(shared)}"
        if self.against:
            vs = {k: a[k] for k in OFF if k in a and a[k] != OFF[k]}
            vs |= {k: v for k, v in a.items() if k not in OFF and b.get(k) != v}
            text += f" vs {env_text(vs)}"
        return text

    @property
    def control(self) -> bool:
        """Arm B is arm A: an A/A cell."""
        return dict(self.a) == dict(self.b)

    def as_dict(self) -> dict:
        return {"label": self.label, "a": dict(self.a), "b": dict(self.b), "control": self.control}


@dataclass(frozen=True)
class Grid:
    name: str
    backends: tuple[str, ...]
    loads: tuple[LoadPoint, ...]
    policies: tuple[Policy, ...]
    seeds: tuple[int, ...]
    source: str
    """The grid's TOML text, as given (the report prints it)."""

    def cells(self) -> list[Cell]:
        return [Cell(b, lp, p) for lp in self.loads for b in self.backends for p in self.policies]


@dataclass(frozen=True)
class Cell:
    backend: str
    load: LoadPoint
    policy: Policy


def _knob_value(name: str, value, at: str) -> str:
    if name in REFUSED_KNOBS:
        raise GridError(
            f"--grid {at}: {name} cannot be a policy knob (the backend is the grid's "
            "'backends'; the probe has no file in virtual time)"
        )
    try:
        knob = _config.knob(name)
    except KeyError:
        known = ", ".join(k.name for k in _config.KNOBS if k.name not in REFUSED_KNOBS)
        raise GridError(f"--grid {at}: unknown knob {name}; accepted: {known} and 'against'") from None
    try:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError(name)
        knob.parse(str(value))
    except (TypeError, _config.ConfigError):
        raise GridError(f"--grid {at}: {name} = {value!r}; accepted {knob.accepted()}") from None
    return str(value)


def _traffic_point(raw: dict, v: dict, i: int, at: str, base: Path) -> LoadPoint:
    """A load point of a user's traffic: ``workload = "FILE.toml"`` (relative to the grid file) or
    ``[load.class.NAME]`` tables (a traffic file's tables, each header prefixed ``load.class.``)."""
    wl, classes = v["workload"], v["class"]
    if classes is not None and not isinstance(classes, dict):
        raise GridError(
            f"--grid {at}: class = {classes!r}; accepted tables [load.class.NAME], one per client "
            "class, each with a traffic file's keys"
        )
    for cname, table in (classes or {}).items():
        if not isinstance(table, dict):
            raise GridError(
                f"--grid {at}: class.{cname} = {table!r}: not a class; accepted a table "
                f"[load.class.{cname}] of a traffic file's keys"
            )
    if classes == {}:
        raise GridError(f"--grid {at}: class = {{}}: no class; accepted one table [load.class.NAME] or more")
    if classes is not None and wl is not None:
        raise GridError(
            f"--grid {at}: workload = {wl!r} with [load.class.{next(iter(classes))}]: accepted one of them: "
            "a workload (a name or FILE.toml) or its classes inline ([load.class.NAME] tables)"
        )
    try:
        if classes is not None:
            traffic = workloads.traffic_of(classes, where=f"--grid {at}", source="inline")
        else:
            traffic = workloads.read_traffic(base / wl, where=f"--grid {at}: workload = {wl!r}")
            traffic = replace(traffic, source=wl, argv=())  # the file as the grid names it
    except workloads.TrafficError as e:
        raise GridError(str(e)) from None
    name = raw.get("name", f"traffic-{i + 1}" if classes is not None else traffic.name)
    if not isinstance(name, str) or not _LOAD_NAME.fullmatch(name):
        raise GridError(
            f"--grid {at}: name = {name!r}: accepted letters, digits, '-', '_' and '.' (1 to 64), "
            'e.g. name = "checkout"'
        )
    if name in workloads.WORKLOADS:
        raise GridError(f"--grid {at}: name = {name!r}: the name of a workload; accepted a name of its own")
    for key, what in _TRAFFIC_SETS.items():
        if key in raw:
            raise GridError(
                f"--grid {at}: {key} = {raw[key]!r}: the traffic ({name}) sets each class's {what}; "
                f"leave out {key}"
            )
    duration = float(v["duration"])
    plan = workloads.LoadPlan(traffic, None)
    return LoadPoint(traffic, None, None, "poisson", traffic.connections, duration, name, load_plan=plan)


def _load_point(raw, i: int, connections: int, where: str) -> LoadPoint:
    at = f"{where} [[load]] {i + 1}"
    if not isinstance(raw, dict):
        raise GridError(f"--grid {at}: not a table; accepted keys: {', '.join(_LOAD)}")
    v = _read(raw, _LOAD, at, connections=connections)
    wl = v["workload"]
    if v["class"] is not None or (isinstance(wl, str) and wl.endswith(".toml")):
        return _traffic_point(raw, v, i, at, Path(where).parent)
    if not isinstance(wl, str) or wl not in workloads.WORKLOADS:
        raise GridError(
            f"--grid {at}: workload = {wl!r}; accepted: {', '.join(workloads.WORKLOADS)}, a traffic file "
            "FILE.toml (relative to the grid file) or its classes inline ([load.class.NAME] tables)"
        )
    if v["name"] is not None:
        raise GridError(
            f"--grid {at}: name = {v['name']!r}: applies to a traffic (a FILE.toml or "
            f"[load.class.NAME] tables); a named workload is called {wl}"
        )
    rate = v["rate"]
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        rate = str(rate)
    try:
        plan = workloads.plan_load(wl, v["load"], rate, raw.get("schedule"))
    except PlanError as e:
        raise GridError(f"--grid {at}: {e}") from None
    rate = plan.rate if plan else None
    duration = float(v["duration"])
    return LoadPoint(wl, v["load"], rate, v["schedule"], v["connections"], duration, wl, load_plan=plan)


def _policies(raw, i: int, where: str) -> list[Policy]:
    """The policies of one ``[[policy]]``: every combination of its knobs' values."""
    at = f"{where} [[policy]] {i + 1}"
    if not isinstance(raw, dict) or not raw:
        raise GridError(f"--grid {at}: not a table of knobs; accepted CWIST_* knobs = [values] and 'against'")
    against = raw.get("against", {})
    if not isinstance(against, dict):
        raise GridError(
            f"--grid {at}: against = {against!r}; accepted a table of knobs, e.g. {{ {TAIL} = 3500 }}"
        )
    against = {k: _knob_value(k, v, at + " against") for k, v in against.items()}
    axes = []
    for name, values in raw.items():
        if name != "against":
            values = values if isinstance(values, list) else [values]
            if not values:
                raise GridError(f"--grid {at}: {name} = []; accepted a list of one value or more")
            axes.append([(name, _knob_value(name, v, at)) for v in values])
    if not axes:
        raise GridError(f"--grid {at}: no knob; accepted CWIST_* knobs = [values]")
    out = []
    for combo in itertools.product(*axes):
        b = dict(combo)
        a = {**{k: v for k, v in b.items() if k not in OFF}, **OFF, **against}
        out.append(Policy(tuple(sorted({**OFF, **b}.items())), tuple(sorted(a.items())), bool(against)))
    return out


def parse_grid(text: str, *, where: str = "default") -> Grid:
    """The grid of TOML ``text`` (``where``: the file, for messages); :class:`GridError` if bad."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser as a package (pyproject.toml)
        import tomli as tomllib
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GridError(
            f'--grid {where}: not TOML ({e}); accepted: a grid file as in docs/en/sweep.md, "The sweep"'
        ) from None
    v = _read(doc, _TOP, where, name=Path(where).stem)
    for key in ("load", "policy"):
        if not isinstance(v[key], list) or not v[key]:
            raise GridError(f"--grid {where}: no [[{key}]]; accepted one [[{key}]] table or more")
    loads = _told_apart(
        tuple(_load_point(r, i, v["connections"], where) for i, r in enumerate(v["load"])), where
    )
    policies = list(dict.fromkeys(p for i, r in enumerate(v["policy"]) for p in _policies(r, i, where)))
    for p in policies:
        for load in loads:
            try:
                _config.load({**load_server_env(load), **dict(p.b)})
            except _config.ConfigError as e:
                raise GridError(f"--grid {where}: policy {p.label} with {load.label}: {e}") from None
    seeds = tuple(range(v["first_seed"], v["first_seed"] + v["seeds"]))
    return Grid(v["name"], tuple(dict.fromkeys(v["backends"])), loads, tuple(policies), seeds, text)


def _told_apart(loads: tuple[LoadPoint, ...], where: str) -> tuple[LoadPoint, ...]:
    """Load points of one name must be one workload (a traffic: the same classes): one report section
    and heat map.  Those whose labels are alike get what differs among them (``constant``, ``4s``)
    added, so the report's rows and the heat maps' columns tell them apart; the same one twice is refused."""
    first: dict[str, int] = {}
    for i, lp in enumerate(loads):
        other = loads[j := first.setdefault(lp.name, i)]
        if (lp.traffic.classes if lp.traffic else lp.workload) != (
            other.traffic.classes if other.traffic else other.workload
        ):
            raise GridError(
                f"--grid {where} [[load]] {i + 1}: name = {lp.name!r}: [[load]] {j + 1}'s traffic has "
                "other classes; accepted a name of its own"
            )
    groups: dict[str, list[LoadPoint]] = {}
    for lp in loads:
        groups.setdefault(lp.label, []).append(lp)
    out = []
    for lp in loads:
        group = groups[lp.label]
        tell = (f" {lp.schedule}" if len({x.schedule for x in group}) > 1 else "") + (
            f" {lp.duration_s:g}s" if len({x.duration_s for x in group}) > 1 else ""
        )
        out.append(replace(lp, tell=tell))
    seen: dict[str, int] = {}
    for i, lp in enumerate(out):
        if (j := seen.setdefault(lp.label, i)) != i:
            raise GridError(
                f"--grid {where} [[load]] {i + 1}: the load point of [[load]] {j + 1} again ({lp.label}); "
                "accepted load points that differ (workload, load, rate, schedule, connections or duration)"
            )
    return tuple(out)


def load_server_env(load: LoadPoint) -> dict[str, str]:
    return workloads.resolve(load.workload).env()


def load_grid(spec: str) -> Grid:
    """``--grid default`` or ``--grid FILE``; :class:`GridError` (one line) if it cannot be run."""
    if spec == "default":
        return parse_grid(DEFAULT_GRID, where="default")
    accepted = "accepted 'default' or a TOML grid file"
    try:
        text = Path(spec).read_text(encoding="utf-8")
    except FileNotFoundError:  # the path as the user's directory makes it, as --workload FILE says it
        raise GridError(f"--grid {spec}: no such file ({Path(spec).absolute()}); {accepted}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise GridError(f"--grid {spec}: cannot read it ({e.__class__.__name__}); {accepted}") from None
    return parse_grid(text, where=spec)
