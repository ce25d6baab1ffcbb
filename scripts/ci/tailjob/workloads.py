"""What loads the server in a run (``--workload``): a named workload, or a user's own traffic.

A named workload (:data:`WORKLOADS`) makes its client classes from a leg's connections and
``--rate``; a :class:`Traffic` is one :class:`TrafficClass` per client class, read from a TOML file
(``--workload FILE.toml``, :func:`read_traffic`) or ``--class`` options (:func:`parse_classes`),
checked whole before anything runs.  A class's service cost travels in its requests, ``GET
/service/<us>/<seq>``, which the bench server busy-waits for (``CWIST_BENCH_SERVICE_ROUTE=1``) and
the sim tier charges in virtual time.  :class:`LoadPlan` is the load of every run of a job
(:func:`plan_load` checks ``--workload``, ``--load``, ``--rate`` and ``--schedule`` together; None is
wrk's closed loop).  A rate is requests/s (``2000``) or a fraction of the capacity (``0.7x``,
measured per leg by a :data:`CAPACITY_S` s closed-loop wrk run on arm A).  Why each workload is
sized as it is: docs/en/workloads.md; a user's traffic: docs/en/own-traffic.md.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .loadspec import LOOPS, SCHEDULES, ClientClass, LoadSpec
from .plan import Leg, PlanError

CAPACITY_S = 2
"""Seconds of the closed-loop run that measures capacity for a ``0.7x`` rate."""
CAPACITY_PATH = "/user/"
"""What the capacity run's wrk requests: ``GET /user/<seq>`` (``tail_latency.lua``), the load client's
request (every class's but the 1 % of ``slow-route`` sent to ``/slow/``), not ``GET /``."""
MIXED_SERVICE_US = 20
SLOW_FRACTION = 0.01
SLOW_US = 2000
THINK_MS = 50.0
BULK_DEPTH = 16
INTERACTIVE_CONNECTIONS = 8
SERVICE_PATH = "/service/{us}/"
"""The path of a class with a service cost (``CWIST_BENCH_SERVICE_ROUTE=1``); else ``/user/``."""
SERVICE_KNOB = "CWIST_BENCH_SERVICE_ROUTE"
CONNECTIONS_MAX, DEPTH_MAX, THINK_MS_MAX, SERVICE_US_MAX = 4096, 1024, 60_000, 1_000_000
_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_RATE = re.compile(r"(\d+(?:\.\d+)?)(x?)")
_SERVICE = re.compile(r"/service/(\d+)/")

TRAFFIC_KEYS: dict[str, str] = {
    "connections": f"keep-alive connections of the class, 1 to {CONNECTIONS_MAX} (required)",
    "loop": "open (requests on a schedule) or closed (the next batch when the last is answered) (required)",
    "rate": "open loop: requests/s over the class (200) or a fraction of the measured capacity ('0.7x') "
    "(required for an open-loop class)",
    "schedule": "open loop: poisson (default) or constant gaps",
    "depth": f"closed loop: requests pipelined per write, 1 (default) to {DEPTH_MAX}",
    "think_ms": f"closed loop: mean think time between batches (exponential), 0 (default) to {THINK_MS_MAX} ms",
    "service_us": f"the server's busy time per request of the class, 0 (default) to {SERVICE_US_MAX} us",
}
"""The keys of one class (``--help`` and the docs' table say the same)."""


class TrafficError(PlanError):
    """A traffic the job cannot run; one line naming the file (or ``--class``), class, key, value
    and what is accepted."""


def parse_rate(text: str) -> tuple[float, bool]:
    """``"2000"`` -> (2000.0, False); ``"0.7x"`` -> (0.7, True).  :class:`PlanError` otherwise."""
    m = _RATE.fullmatch(text.strip())
    value = float(m.group(1)) if m else 0.0
    if not m or value <= 0 or (m.group(2) and value > 10):
        raise PlanError(
            f"--rate {text!r}: accepted requests/s above 0 (e.g. 2000) or a fraction of "
            "the measured capacity (e.g. 0.7x, at most 10x)"
        )
    return value, bool(m.group(2))


def _rate_rps(text: str, capacity_rps: float | None, where: str) -> float:
    """A rate as requests/s: a relative one multiplies ``capacity_rps``."""
    value, relative = parse_rate(text)
    if relative and not capacity_rps:
        raise PlanError(f"{where}: the capacity run completed no request")
    return value * capacity_rps if relative and capacity_rps else value


@dataclass(frozen=True)
class TrafficClass:
    """One class as its user described it (``rate`` as given, ``"200"`` or ``"0.7x"``; None closed)."""

    name: str
    connections: int
    loop: str
    rate: str | None = None
    schedule: str = "poisson"
    depth: int = 1
    think_ms: float = 0.0
    service_us: int = 0

    @property
    def path(self) -> str:
        return SERVICE_PATH.format(us=self.service_us) if self.service_us else "/user/"

    def client_class(self, capacity_rps: float | None) -> ClientClass:
        """The load client's class; a relative rate multiplies ``capacity_rps``."""
        where = f"rate {self.rate} of class {self.name!r}"
        rate = 0.0 if self.rate is None else _rate_rps(self.rate, capacity_rps, where)
        keys = {k: v for k, v in asdict(self).items() if k != "service_us"}
        return ClientClass(**{**keys, "rate": rate, "path": self.path})

    def describe(self) -> str:
        if self.loop == "open" and self.rate is not None:
            unit = " of capacity" if parse_rate(self.rate)[1] else " req/s"
            what = f"open loop at {self.rate}{unit}, {self.schedule}"
        else:
            what = f"closed loop, depth {self.depth}" + (
                f", think {self.think_ms:g} ms" if self.think_ms else ""
            )
        cost = f", {self.service_us} us of service per request" if self.service_us else ""
        return f"{self.name}: {self.connections} connections, {what}{cost}"


@dataclass(frozen=True)
class Traffic:
    """A user's workload: ``classes`` in order, ``source`` the file (or ``--class``), ``argv`` the
    options that describe it again (for a job that runs another)."""

    source: str
    classes: tuple[TrafficClass, ...]
    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        return Path(self.source).name  # "--class" for the options, a sweep's "inline"

    def __str__(self) -> str:
        return self.name

    @property
    def connections(self) -> int:
        """The connections of all classes: the leg's connection count."""
        return sum(c.connections for c in self.classes)

    @property
    def relative(self) -> bool:
        """True when a class's rate is a fraction of the capacity (a capacity run comes first)."""
        return any(c.rate is not None and parse_rate(c.rate)[1] for c in self.classes)

    @property
    def description(self) -> str:
        return "; ".join(c.describe() for c in self.classes)

    def env(self) -> dict[str, str]:
        """Bench server variables for both arms: the service route when a class has a cost."""
        return {SERVICE_KNOB: "1"} if any(c.service_us for c in self.classes) else {}

    def client_classes(self, capacity_rps: float | None) -> tuple[ClientClass, ...]:
        return tuple(c.client_class(capacity_rps) for c in self.classes)

    def as_dict(self) -> dict:
        return {"source": self.source, "classes": [asdict(c) for c in self.classes]}


def _show(value: object) -> str:
    """A value as its TOML reads (true, 4, 'four')."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def _number(value: object, lo: float, hi: float, kind: type = int) -> bool:
    return isinstance(value, (kind, int)) and not isinstance(value, bool) and lo <= value <= hi  # type: ignore[operator]


def _rate_text(value: object) -> object:
    """A rate as its text (TOML may give a number), stripped."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value.strip() if isinstance(value, str) else value


def _rate_ok(value: object) -> bool:
    try:
        return isinstance(value, str) and bool(parse_rate(value))
    except PlanError:
        return False


#: key -> (whether a value, as TOML types it, is accepted; what is accepted).
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "connections": (lambda v: _number(v, 1, CONNECTIONS_MAX), f"an integer from 1 to {CONNECTIONS_MAX}"),
    "loop": (lambda v: v in LOOPS, "open or closed"),
    "rate": (_rate_ok, "requests/s above 0 (200) or a fraction of the capacity ('0.7x', at most 10x)"),
    "schedule": (lambda v: v in SCHEDULES, "poisson or constant"),
    "depth": (lambda v: _number(v, 1, DEPTH_MAX), f"an integer from 1 to {DEPTH_MAX}"),
    "think_ms": (lambda v: _number(v, 0, THINK_MS_MAX, float), f"0 to {THINK_MS_MAX} milliseconds"),
    "service_us": (
        lambda v: _number(v, 0, SERVICE_US_MAX),
        f"an integer from 0 to {SERVICE_US_MAX} (microseconds)",
    ),
}


def _check_class(where: str, name: str, table: Mapping[str, Any]) -> TrafficClass:
    """One class from its keys (typed as TOML types them); :class:`TrafficError` naming the key."""

    def bad(key: str, what: str) -> TrafficError:
        shown = f"{key} = {_show(table[key])}" if key in table else f"{key} missing"
        return TrafficError(f"{where}: class {name!r}: {shown}: {what}")

    for key in table:
        if key not in TRAFFIC_KEYS:
            raise bad(key, f"unknown key; accepted {', '.join(TRAFFIC_KEYS)}")
    t = {**table, "rate": _rate_text(table["rate"])} if "rate" in table else dict(table)
    for key in TRAFFIC_KEYS:  # every value given is checked before what is missing is named
        ok, accepted = _RULES[key]
        if key in t and not ok(t[key]):
            raise bad(key, f"accepted {accepted}")
    for key in ("connections", "loop"):
        if key not in table:
            raise bad(key, f"required; {key}: {TRAFFIC_KEYS[key]}")
    loop = t["loop"]
    for other in ("depth", "think_ms") if loop == "open" else ("rate", "schedule"):
        if other in t:
            raise bad(other, f"applies to {'a closed' if loop == 'open' else 'an open'}-loop class only")
    if loop == "open" and "rate" not in t:
        raise bad("rate", "an open-loop class needs one: requests/s (200) or a fraction of capacity ('0.7x')")
    return TrafficClass(name, **{**t, "think_ms": float(t.get("think_ms", 0))})


def _traffic(where: str, source: str, tables: Sequence[tuple[str, object]], argv: tuple[str, ...]) -> Traffic:
    if not tables:
        raise TrafficError(f"{where}: no class: accepted one table per class, e.g. [bulk] connections = 16")
    classes: list[TrafficClass] = []
    for name, table in tables:
        _add_class(where, name, table, classes)
    return Traffic(source, tuple(classes), argv)


def _add_class(where: str, name: str, table: object, classes: list[TrafficClass]) -> None:
    """Check class ``name`` (its name, a name not yet in ``classes``, its keys) and append it."""
    if not isinstance(table, dict):
        raise TrafficError(
            f"{where}: {name} = {_show(table)}: not a class; accepted one table per class ([name] then its keys)"
        )
    if not _NAME.fullmatch(name):
        raise TrafficError(f"{where}: class {name!r}: accepted a name of letters, digits, - and _ (1 to 32)")
    if any(c.name == name for c in classes):
        raise TrafficError(f"{where}: class {name!r}: named twice")
    classes.append(_check_class(where, name, table))


def traffic_of(tables: Mapping[str, object], *, where: str, source: str) -> Traffic:
    """The traffic of ``tables`` (class name -> its keys), checked as a file's (a sweep's inline
    classes); ``where`` starts every error's line."""
    return _traffic(where, source, list(tables.items()), ())


def _typed(value: str) -> object:
    """A ``--class`` value typed as TOML would type it: an integer, a number, or the text."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def parse_classes(texts: Sequence[str]) -> Traffic:
    """The traffic of ``--class 'name=N K=V ...'`` options (the same keys as a file's table)."""
    classes: list[TrafficClass] = []
    for text in texts:
        where = f"--class {text!r}"
        table: dict[str, object] = {}
        for token in shlex.split(text):
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise TrafficError(
                    f"{where}: {token!r} is not K=V; accepted name=N and {', '.join(TRAFFIC_KEYS)}"
                )
            if key in table:  # else the later value would win unsaid
                raise TrafficError(f"{where}: {key} set twice")
            table[key] = value if key in ("name", "loop", "schedule", "rate") else _typed(value)
        name = table.pop("name", None)
        unknown = next((k for k in table if k not in TRAFFIC_KEYS), None)
        if not isinstance(name, str) and unknown is not None:  # 'interactive=8': a key, not the name
            raise TrafficError(
                f"{where}: {unknown} = {_show(table[unknown])}: unknown key; accepted name=NAME (the "
                f"class's name, e.g. name=bulk) and {', '.join(TRAFFIC_KEYS)}"
            )
        if not isinstance(name, str):
            raise TrafficError(f"{where}: name missing: required (the class's name, e.g. name=bulk)")
        _add_class(where, name, table, classes)
    return Traffic("--class", tuple(classes), tuple(arg for text in texts for arg in ("--class", text)))


def service_text(cls: ClientClass | Mapping) -> str:
    """`` (20 us of service each)`` for a class whose requests name a service cost, else ``""``."""
    m = _SERVICE.fullmatch(cls["path"] if isinstance(cls, Mapping) else cls.path)
    return f" ({int(m.group(1))} us of service each)" if m else ""


@dataclass(frozen=True)
class Workload:
    """A named workload: ``classes(connections, rate_rps, schedule)`` (rate None without an open-loop
    class); ``open_classes``: ``--rate`` applies (default ``default_rate``); ``server_env``: bench
    server variables it needs, for both arms."""

    name: str
    description: str
    classes: Callable[[int, float | None, str], tuple[ClientClass, ...]]
    open_classes: bool
    default_rate: str | None = None
    server_env: Mapping[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return dict(self.server_env)


def _rate(rate: float | None) -> float:
    if rate is None:
        raise ValueError("an open-loop class needs a rate (--rate)")
    return rate


def _mixed(c: int, rate: float | None, sched: str) -> tuple[ClientClass, ...]:
    return (
        ClientClass("interactive", INTERACTIVE_CONNECTIONS, "open", rate=_rate(rate), schedule=sched),
        ClientClass("bulk", max(c // 4, 1), "closed", depth=BULK_DEPTH),
    )


def _slow_route(c: int, rate: float | None, sched: str) -> tuple[ClientClass, ...]:
    fast, slow = _rate(rate) * (1 - SLOW_FRACTION), _rate(rate) * SLOW_FRACTION
    return (
        ClientClass("fast", c, "open", rate=fast, schedule=sched),
        ClientClass("slow", max(c // 16, 2), "open", rate=slow, schedule=sched, path="/slow/"),
    )


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "uniform",
            "every connection alike (wrk closed loop; one open-loop class with --load open)",
            lambda c, rate, sched: (ClientClass("all", c, "open", rate=_rate(rate), schedule=sched),),
            open_classes=False,
            default_rate="0.7x",
        ),
        Workload(
            "mixed",
            f"C/4 bulk connections pipelining depth {BULK_DEPTH} (closed loop) + "
            f"{INTERACTIVE_CONNECTIONS} interactive clients (open loop, low rate), "
            f"{MIXED_SERVICE_US} us of service per request",
            _mixed,
            open_classes=True,
            default_rate="200",
            server_env={"CWIST_BENCH_DELAY_US": str(MIXED_SERVICE_US)},
        ),
        Workload(
            "slow-route",
            f"open loop; {SLOW_FRACTION:.0%} of requests to /slow/ at {SLOW_US} us",
            _slow_route,
            open_classes=True,
            default_rate="0.5x",
            server_env={"CWIST_BENCH_SLOW_US": str(SLOW_US)},
        ),
        Workload(
            "think-time",
            f"4C keep-alive connections, think time {THINK_MS:g} ms mean between requests (closed loop)",
            lambda c, rate, sched: (ClientClass("all", 4 * c, "closed", think_ms=THINK_MS),),
            open_classes=False,
        ),
    )
}
_ACCEPTED = f"{', '.join(WORKLOADS)} or a traffic file FILE.toml"


def read_traffic(path: str | Path, *, where: str | None = None) -> Traffic:
    """The traffic of a TOML file, one table per class, checked whole; ``where`` starts every
    error's line (default ``--workload PATH``)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser as a package (pyproject.toml)
        import tomli as tomllib
    where = where or f"--workload {path}"
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TrafficError(f"{where}: no such file ({Path(path).absolute()}); accepted {_ACCEPTED}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TrafficError(f"{where}: cannot read it ({e.__class__.__name__}: {e})") from None
    except tomllib.TOMLDecodeError as e:
        raise TrafficError(f"{where}: not TOML ({e}); accepted one table per class") from None
    return _traffic(where, str(path), list(raw.items()), ("--workload", str(path)))


def workload_of(text: str) -> str | Traffic:
    """``--workload``'s value: a workload's name, or the traffic of a ``.toml`` file."""
    if text in WORKLOADS:
        return text
    if text.endswith(".toml"):
        return read_traffic(text)
    raise TrafficError(f"--workload {text}: accepted {_ACCEPTED}")


def label(workload: str | Traffic) -> str:
    """What a report calls a workload: its name, or the traffic file's name."""
    return str(workload)


def resolve(workload: str | Traffic) -> Workload | Traffic:
    """The definition behind ``--workload``: the named :class:`Workload`, or the traffic itself."""
    return workload if isinstance(workload, Traffic) else WORKLOADS[workload]


def classes_for(
    workload: str, *, connections: int, rate_rps: float | None, schedule: str = "poisson"
) -> tuple[ClientClass, ...]:
    """The client classes of named ``workload`` for a leg of ``connections`` at ``rate_rps``."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload {workload!r}: accepted {', '.join(WORKLOADS)}")
    return WORKLOADS[workload].classes(connections, rate_rps, schedule)


@dataclass(frozen=True)
class LoadPlan:
    """The load of every run of a job (``rate`` as given, e.g. ``0.7x``; None without open classes
    and for a :class:`Traffic`, whose classes give their own)."""

    workload: str | Traffic
    rate: str | None
    schedule: str = "poisson"

    @property
    def relative(self) -> bool:
        if isinstance(self.workload, Traffic):
            return self.workload.relative
        return self.rate is not None and parse_rate(self.rate)[1]

    def server_env(self) -> dict[str, str]:
        """Variables the workload sets for the server of both arms."""
        return resolve(self.workload).env()

    def resolve_rate(self, capacity_rps: float | None) -> float | None:
        return None if self.rate is None else _rate_rps(self.rate, capacity_rps, f"--rate {self.rate}")

    def spec(self, leg: Leg, *, capacity_rps: float | None, seed: int) -> LoadSpec:
        """The client's spec for ``leg``: every run of the leg offers the same load."""
        if isinstance(self.workload, Traffic):
            classes = self.workload.client_classes(capacity_rps)
        else:
            rate_rps = self.resolve_rate(capacity_rps)
            classes = classes_for(
                self.workload, connections=leg.connections, rate_rps=rate_rps, schedule=self.schedule
            )
        spec = LoadSpec(classes=classes, duration_s=float(leg.duration_s), seed=seed)
        spec.check()
        return spec

    def describe(self) -> str:
        if isinstance(self.workload, Traffic):
            return f"traffic `{self.workload.name}` ({self.workload.description})"
        if not self.rate:
            return f"workload `{self.workload}` ({WORKLOADS[self.workload].description})"
        unit = " of capacity" if self.relative else " req/s"
        return (
            f"workload `{self.workload}` ({WORKLOADS[self.workload].description}), rate {self.rate}{unit}"
            f", {self.schedule} schedule"
        )


def plan_load(
    workload: str | Traffic, load: str | None, rate: str | None, schedule: str | None
) -> LoadPlan | None:
    """Check the load options together; None for today's job (uniform under wrk)."""
    if isinstance(workload, Traffic):
        for given, name, what in (
            (load, "--load", "loop"),
            (rate, "--rate", "rate"),
            (schedule, "--schedule", "schedule"),
        ):
            if given is not None:
                raise PlanError(
                    f"{name} {given}: the traffic ({workload.name}) sets each class's {what}; leave out {name}"
                )
        return LoadPlan(workload=workload, rate=None)
    if workload not in WORKLOADS:
        raise PlanError(f"--workload {workload!r}: accepted {', '.join(WORKLOADS)}")
    w = WORKLOADS[workload]
    open_option = next(
        (name for v, name in ((rate, "--rate"), (schedule, "--schedule")) if v is not None), None
    )
    if workload == "uniform" and load in (None, "closed"):
        if open_option:
            raise PlanError(f"{open_option} needs open-loop load: add --load open")
        return None
    if workload != "uniform" and load is not None:
        raise PlanError(
            f"--load {load}: workload {workload} sets its own load (see --help); leave out --load"
        )
    if workload != "uniform" and not w.open_classes:
        if open_option:
            raise PlanError(f"{open_option}: workload {workload} has no open-loop class")
    else:
        rate = rate or w.default_rate
    if rate is not None:
        parse_rate(rate)
    return LoadPlan(workload=workload, rate=rate, schedule=schedule or "poisson")
