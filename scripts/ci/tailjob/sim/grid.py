"""The sweep's grid: backends x load points x policies, read from TOML (``--grid default|FILE``).

The file's keys and an example: docs/en/sweep.md, "The sweep" (:data:`DEFAULT_GRID` is the
default's text).  A load point is a named workload with its loop, rate, schedule, connections and
virtual seconds per run, or a user's traffic (``workload = "FILE.toml"``, relative to the grid file,
or its classes inline as ``[load.class.NAME]`` tables, checked by :func:`tailjob.workloads.traffic_of`
as a traffic file is).  A ``[[policy]]`` lists knobs' values (every combination is one policy, arm
B's knobs); arm A has age-based dispatch off (:data:`OFF`) unless ``against`` says otherwise.  A key
or knob the grid does not know, or a value a knob does not accept, is one line naming it and what is
accepted, before anything runs or is written.
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
from ..plan import PlanError
from .job import AbPlan

TAIL, HARVEST = "CWIST_REACTOR_TAIL_US", "CWIST_REACTOR_HARVEST_US"
POLICY_KNOBS = (TAIL, HARVEST)
"""The knobs of age-based dispatch: arm A of a cell has them off (:data:`OFF`) unless ``against`` says."""
OFF = {TAIL: "0", HARVEST: "0"}
MODELLED = ("epoll", "io_uring", "selectors")
MAX_SEEDS = 64
MAX_DURATION_S = 60.0
MAX_CONNECTIONS = 4096
REFUSED_KNOBS = ("CWIST_REACTOR_BACKEND", "CWIST_LATENCY_PROBE", "CWIST_LATENCY_PROBE_FILE")
"""Knobs a policy cannot set: the backend is the grid's ``backends`` axis; the probe has no file here."""

_TOP_KEYS = ("name", "backends", "seeds", "first_seed", "connections", "load", "policy")
_LOAD_KEYS = ("workload", "load", "rate", "schedule", "connections", "duration", "name", "class")
_TRAFFIC_SETS = {"load": "loop", "rate": "rate", "schedule": "schedule", "connections": "connections"}
"""A load point's keys that a traffic's classes set instead (as ``--workload FILE.toml`` refuses the options)."""
_LOAD_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_WORKLOAD_ACCEPTED = (
    f"{', '.join(workloads.WORKLOADS)}, a traffic file FILE.toml (relative to the grid file) "
    "or its classes inline ([load.class.NAME] tables)"
)

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


@dataclass(frozen=True)
class LoadPoint:
    """One load: a named workload with ``load``/``rate``/``schedule`` as the job's options, or a user's
    :class:`~tailjob.workloads.Traffic` (its classes set all three, and ``connections``: their sum);
    ``connections`` and virtual seconds per run.  ``name`` is what the report, heat maps and result
    JSON call the workload: a named workload's name; a traffic's ``name`` key, else its file's name
    (``example.toml``, as ``--workload FILE.toml`` calls it), else ``traffic-N`` for classes inline.
    Load points of one name are one section of the report and one heat map."""

    workload: str | workloads.Traffic
    load: str | None
    rate: str | None
    schedule: str
    connections: int
    duration_s: float
    name: str
    tell: str = ""
    """What tells the load point from another of the same workload, loop, rate and connections in the
    grid (its schedule, its virtual seconds: :func:`_told_apart`); part of its label."""

    @property
    def traffic(self) -> workloads.Traffic | None:
        return self.workload if isinstance(self.workload, workloads.Traffic) else None

    @property
    def label(self) -> str:
        if isinstance(self.workload, workloads.Traffic):
            return f"{self.name} c{self.connections}{self.tell}"
        w = workloads.WORKLOADS[self.workload]
        if self.workload == "uniform" and self.load != "open":
            what = "closed"
        elif self.workload == "uniform":
            what = f"open {self.rate or w.default_rate}"
        elif w.open_classes:
            rate = self.rate or w.default_rate or ""
            what = f"open {rate}" + ("" if rate.endswith("x") else "/s")
        else:
            what = "closed"
        return f"{self.workload} {what} c{self.connections}{self.tell}"

    def plan(self, backend: str, a_env: Mapping[str, str], b_env: Mapping[str, str], seeds, **kw) -> AbPlan:
        """The A/B of this load point on ``backend`` with the arms' knobs ``a_env`` and ``b_env``."""
        env = {"CWIST_REACTOR_BACKEND": backend}
        return AbPlan(
            backend=backend,
            a_env={**env, **a_env},
            b_env={**env, **b_env},
            seeds=seeds,
            workload=self.workload,
            load=self.load,
            rate=self.rate,
            connections=self.connections,
            duration_s=self.duration_s,
            schedule=self.schedule,
            **kw,
        )

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


_PREFIX = re.compile(r"^CWIST_(?:REACTOR_|HTTP_)?")


def _short(name: str) -> str:
    """A knob's name without its ``CWIST_`` prefix and area (``TAIL_US``, ``YIELD_BATCH``)."""
    return _PREFIX.sub("", name)


def env_text(env: Mapping[str, str]) -> str:
    return " ".join(f"{_short(k)}={v}" for k, v in env.items()) or "(defaults)"


@dataclass(frozen=True)
class Policy:
    """Arm B's knobs (``b``) and arm A's (``a``: ``b`` with age-based dispatch off, or ``against``)."""

    b: tuple[tuple[str, str], ...]
    a: tuple[tuple[str, str], ...]
    against: bool = False

    @property
    def label(self) -> str:
        b, a = dict(self.b), dict(self.a)
        shared = {k: v for k, v in b.items() if k not in POLICY_KNOBS}
        own = {k: b[k] for k in POLICY_KNOBS if k in b and (b[k] != "0" or k == TAIL)}
        text = env_text(own) + (" (A/A control)" if self.control else "")
        if shared:
            text += f", both {env_text(shared)}"
        if self.against:
            text += f" vs {env_text({k: v for k, v in a.items() if k in POLICY_KNOBS and a[k] != '0'})}"
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
        return [
            Cell(backend, load, policy)
            for load in self.loads
            for backend in self.backends
            for policy in self.policies
        ]


@dataclass(frozen=True)
class Cell:
    backend: str
    load: LoadPoint
    policy: Policy

    def plan(self, seeds: tuple[int, ...]) -> AbPlan:
        return self.load.plan(
            self.backend, dict(self.policy.a), dict(self.policy.b), seeds, bootstrap_seed=seeds[0]
        )


def _toml(text: str, where: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser as a package (pyproject.toml)
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GridError(
            f'--grid {where}: not TOML ({e}); accepted: a grid file as in docs/en/sweep.md, "The sweep"'
        ) from None


def _unknown(keys, accepted: tuple[str, ...], where: str) -> None:
    for k in keys:
        if k not in accepted:
            raise GridError(f"--grid {where}: unknown key {k!r}; accepted: {', '.join(accepted)}")


def _int(value, key: str, lo: int, hi: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise GridError(f"--grid {where}: {key} = {value!r}; accepted an integer from {lo} to {hi}")
    return value


def _knob_value(name: str, value, where: str) -> str:
    if not isinstance(name, str) or not name.startswith("CWIST_"):
        raise GridError(
            f"--grid {where}: {name!r} is not a knob; accepted CWIST_* knobs "
            "(tailreactor.config.KNOBS) and 'against'"
        )
    if name in REFUSED_KNOBS:
        raise GridError(
            f"--grid {where}: {name} cannot be a policy knob (the backend is the grid's "
            "'backends'; the probe has no file in virtual time)"
        )
    try:
        knob = _config.knob(name)
    except KeyError:
        known = ", ".join(k.name for k in _config.KNOBS if k.name not in REFUSED_KNOBS)
        raise GridError(f"--grid {where}: unknown knob {name}; accepted: {known}") from None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise GridError(f"--grid {where}: {name} = {value!r}; accepted {knob.accepted()}")
    text = str(value)
    try:
        knob.parse(text)
    except _config.ConfigError:
        raise GridError(f"--grid {where}: {name} = {value!r}; accepted {knob.accepted()}") from None
    return text


def _duration(raw, at: str) -> float:
    duration = raw.get("duration", 2)
    if (
        isinstance(duration, bool)
        or not isinstance(duration, (int, float))
        or not 0 < duration <= MAX_DURATION_S
    ):
        raise GridError(
            f"--grid {at}: duration = {duration!r}; accepted virtual seconds above 0, "
            f"at most {MAX_DURATION_S:g}"
        )
    return float(duration)


def _traffic_point(raw: dict, i: int, at: str, base: Path) -> LoadPoint:
    """A load point of a user's traffic: ``workload = "FILE.toml"`` (the file ``--workload FILE.toml``
    reads, relative to the grid file) or ``[load.class.NAME]`` tables (a traffic file's tables, each
    header prefixed ``load.class.``), checked by :mod:`tailjob.workloads` as a file is."""
    wl, classes = raw.get("workload"), raw.get("class")
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
            f"--grid {at}: workload = {wl!r} with [load.class.{next(iter(classes))}]: accepted one of them: a workload "
            "(a name or FILE.toml) or its classes inline ([load.class.NAME] tables)"
        )
    try:
        if classes is not None:
            traffic = workloads.traffic_of(classes, where=f"--grid {at}", source="inline")
            default = f"traffic-{i + 1}"
        else:
            assert isinstance(wl, str)  # without classes, _load_point sends a FILE.toml only
            traffic = workloads.read_traffic(base / wl, where=f"--grid {at}: workload = {wl!r}")
            traffic = replace(traffic, source=wl, argv=())  # the file as the grid names it
            default = traffic.name
    except workloads.TrafficError as e:
        raise GridError(str(e)) from None
    name = raw.get("name", default)
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
    duration = _duration(raw, at)
    return LoadPoint(traffic, None, None, "poisson", traffic.connections, duration, name)


def _load_point(raw, i: int, connections: int, where: str) -> LoadPoint:
    at = f"{where} [[load]] {i + 1}"
    if not isinstance(raw, dict):
        raise GridError(f"--grid {at}: not a table; accepted keys: {', '.join(_LOAD_KEYS)}")
    _unknown(raw, _LOAD_KEYS, at)
    wl = raw.get("workload")
    if "class" in raw or (isinstance(wl, str) and wl.endswith(".toml")):
        return _traffic_point(raw, i, at, Path(where).parent)
    if not isinstance(wl, str) or wl not in workloads.WORKLOADS:
        raise GridError(f"--grid {at}: workload = {wl!r}; accepted: {_WORKLOAD_ACCEPTED}")
    if "name" in raw:
        raise GridError(
            f"--grid {at}: name = {raw['name']!r}: applies to a traffic (a FILE.toml or "
            f"[load.class.NAME] tables); a named workload is called {wl}"
        )
    load = raw.get("load")
    if load not in (None, "open", "closed"):
        raise GridError(f"--grid {at}: load = {load!r}; accepted: open, closed (uniform only)")
    rate = raw.get("rate")
    if rate is not None and not isinstance(rate, str):
        rate = str(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else rate
    schedule = raw.get("schedule", "poisson")
    if schedule not in ("poisson", "constant"):
        raise GridError(f"--grid {at}: schedule = {schedule!r}; accepted: poisson, constant")
    duration = _duration(raw, at)
    conns = _int(raw.get("connections", connections), "connections", 1, MAX_CONNECTIONS, at)
    try:
        plan = workloads.plan_load(wl, load, rate, raw.get("schedule"))
    except PlanError as e:
        raise GridError(f"--grid {at}: {e}") from None
    return LoadPoint(wl, load, plan.rate if plan else None, schedule, conns, duration, wl)


def _policies(raw, i: int, where: str) -> list[Policy]:
    at = f"{where} [[policy]] {i + 1}"
    if not isinstance(raw, dict) or not raw:
        raise GridError(f"--grid {at}: not a table of knobs; accepted CWIST_* knobs = [values] and 'against'")
    against_raw = raw.get("against", {})
    if not isinstance(against_raw, dict):
        raise GridError(
            f"--grid {at}: against = {against_raw!r}; accepted a table of knobs, "
            "e.g. {{ CWIST_REACTOR_TAIL_US = 3500 }}"
        )
    against = {k: _knob_value(k, v, at + " against") for k, v in against_raw.items()}
    axes = []
    for name, values in raw.items():
        if name == "against":
            continue
        values = values if isinstance(values, list) else [values]
        if not values:
            raise GridError(f"--grid {at}: {name} = []; accepted a list of one value or more")
        axes.append([(name, _knob_value(name, v, at)) for v in values])
    if not axes:
        raise GridError(f"--grid {at}: no knob; accepted CWIST_* knobs = [values]")
    out = []
    for combo in itertools.product(*axes):
        b = dict(combo)
        a = {**{k: v for k, v in b.items() if k not in POLICY_KNOBS}, **OFF, **against}
        b_full = {**OFF, **b}
        out.append(Policy(tuple(sorted(b_full.items())), tuple(sorted(a.items())), against=bool(against)))
    return out


def parse_grid(text: str, *, where: str = "default") -> Grid:
    """The grid of TOML ``text`` (``where``: the file, for messages); :class:`GridError` if bad."""
    doc = _toml(text, where)
    _unknown(doc, _TOP_KEYS, where)
    name = doc.get("name", Path(where).stem)
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name):
        raise GridError(f"--grid {where}: name = {name!r}; accepted letters, digits, '-' and '_'")
    backends = doc.get("backends", ["epoll", "io_uring"])
    if not isinstance(backends, list) or not backends or any(b not in MODELLED for b in backends):
        raise GridError(f"--grid {where}: backends = {backends!r}; accepted a list of {', '.join(MODELLED)}")
    n = _int(doc.get("seeds", stats.MIN_PAIRS), "seeds", 1, MAX_SEEDS, where)
    first = _int(doc.get("first_seed", 1), "first_seed", 0, 2**31 - 1, where)
    connections = _int(doc.get("connections", 64), "connections", 1, MAX_CONNECTIONS, where)
    raw_loads, raw_policies = doc.get("load", []), doc.get("policy", [])
    if not isinstance(raw_loads, list) or not raw_loads:
        raise GridError(f"--grid {where}: no [[load]]; accepted one [[load]] table or more")
    if not isinstance(raw_policies, list) or not raw_policies:
        raise GridError(f"--grid {where}: no [[policy]]; accepted one [[policy]] table or more")
    loads = tuple(_load_point(r, i, connections, where) for i, r in enumerate(raw_loads))
    _one_workload_per_name(loads, where)
    loads = _told_apart(loads, where)
    policies: list[Policy] = []
    for i, r in enumerate(raw_policies):
        for p in _policies(r, i, where):
            if p not in policies:
                policies.append(p)
    for p in policies:
        for load in loads:
            try:
                _config.load({**load_server_env(load), **dict(p.b)})
            except _config.ConfigError as e:
                raise GridError(f"--grid {where}: policy {p.label} with {load.label}: {e}") from None
    return Grid(
        name, tuple(dict.fromkeys(backends)), loads, tuple(policies), tuple(range(first, first + n)), text
    )


def _one_workload_per_name(loads: tuple[LoadPoint, ...], where: str) -> None:
    """Load points of one name are one report section and heat map: they must be one workload (a
    traffic: the same classes)."""
    first: dict[str, int] = {}
    for i, lp in enumerate(loads):
        j = first.setdefault(lp.name, i)
        other = loads[j]
        same = (
            lp.traffic.classes == other.traffic.classes
            if lp.traffic is not None and other.traffic is not None
            else lp.workload == other.workload
        )
        if not same:
            raise GridError(
                f"--grid {where} [[load]] {i + 1}: name = {lp.name!r}: [[load]] {j + 1}'s traffic has "
                "other classes; accepted a name of its own"
            )


def _told_apart(loads: tuple[LoadPoint, ...], where: str) -> tuple[LoadPoint, ...]:
    """Load points whose labels are alike get what differs among them (``constant``, ``4s``) added, so
    the report's rows and the heat maps' columns tell them apart; the same load point twice is refused."""
    out = list(loads)
    groups: dict[str, list[int]] = {}
    for i, lp in enumerate(loads):
        groups.setdefault(lp.label, []).append(i)
    for group in (g for g in groups.values() if len(g) > 1):
        schedules = {loads[i].schedule for i in group}
        durations = {loads[i].duration_s for i in group}
        for i in group:
            lp = loads[i]
            tell = (f" {lp.schedule}" if len(schedules) > 1 else "") + (
                f" {lp.duration_s:g}s" if len(durations) > 1 else ""
            )
            out[i] = replace(lp, tell=tell)
    seen: dict[str, int] = {}
    for i, lp in enumerate(out):
        j = seen.setdefault(lp.label, i)
        if j != i:
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
    path = Path(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise GridError(
            f"--grid {spec}: cannot read it ({e.__class__.__name__}); accepted 'default' or a TOML grid file"
        ) from None
    return parse_grid(text, where=spec)
