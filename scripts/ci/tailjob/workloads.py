"""The job's workloads (``--workload NAME``): each one definition, its client classes and server settings.

Role
----
A workload says which clients load the bench server during a run and how they
are grouped into **classes**, each reported (and compared A/B) on its own.
Only ``uniform`` under closed-loop load is wrk; the others, and ``uniform``
with ``--load open``, run on the job's own load client (:mod:`tailjob.loadgen`).

=============  ==================================================================
``uniform``    ``GET /`` style requests on ``C`` connections (the profile's): wrk
               closed loop (today's, the seed's), or with ``--load open`` one
               open-loop class ``all`` offering ``--rate`` (default ``0.7x``).
``mixed``      ``bulk``: ``C/4`` keep-alive connections pipelining 16 requests per
               write, closed loop, keeping the server busy; ``interactive``: 8
               keep-alive connections sending single requests open loop at a low
               rate (``--rate``, default 200 req/s over the class, so each client
               thinks ~40 ms between requests).  Every request costs
               :data:`MIXED_SERVICE_US` of service time (``CWIST_BENCH_DELAY_US``,
               both arms), so the bulk class saturates the server and a round of
               it (16 bulk connections x 16 requests at c64, ~6 ms) lasts longer
               than the default ``CWIST_REACTOR_TAIL_US`` (3.5 ms): the probe's
               round time shows it.  ``interactive`` is the class that matters.
``slow-route`` open loop at ``--rate`` (default ``0.5x``): ``fast`` (``C``
               connections, ``GET /user/<seq>``) and ``slow`` (``C/16``, at least
               2, ``GET /slow/<seq>``), the slow share being :data:`SLOW_FRACTION`
               of the rate; the server busy-waits :data:`SLOW_US` per slow request
               (``CWIST_BENCH_SLOW_US``, set for both arms).
``think-time`` ``all``: ``4 C`` keep-alive connections, each sending one request,
               then idle for an exponential think time (mean :data:`THINK_MS`);
               most connections are idle between requests, so an event's arm age
               (since it was armed, before the think time) and its ready age
               (since the reactor reaped it) differ.
=============  ==================================================================

A workload is one entry of :data:`WORKLOADS`: its description (``--help``),
whether it has an open-loop class (then ``--rate`` applies, with its
default), the bench server variables it sets for both arms, and its client
classes for a leg's connection count and the resolved rate.

A user's own traffic is a :class:`Traffic`: one :class:`TrafficClass` per
client class (connections, loop, rate or think time, pipelining depth,
schedule, and ``service_us``, the server's busy time per request of the class),
read from a TOML file (``--workload FILE.toml``, :func:`read_traffic`: one table
per class) or from ``--class 'name=bulk connections=16 ...'`` options
(:func:`parse_classes`).  It runs wherever a named workload runs: the live tier
(the load client against the bench server) and ``--tier sim``.  A class's
service cost travels in its requests, ``GET /service/<us>/<seq>``, which the
bench server busy-waits for when ``CWIST_BENCH_SERVICE_ROUTE=1`` (set for both
arms), and which the sim tier charges in virtual time, as ``/slow/``.

The rest is the job's side of the load client: :class:`LoadPlan` (what
``--workload``, ``--load``, ``--rate`` and ``--schedule`` asked for, checked
once by :func:`plan_load`; ``None`` is wrk's closed loop), the **rate** as
requests/s (``2000``) or a fraction of the server's capacity (``0.7x``,
measured per leg by a :data:`CAPACITY_S` s closed-loop wrk run against arm A),
and :class:`LoadRunResult`, a run's output read like
:class:`tailjob.wrk.WrkResult`, with the per-class figures.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import loadgen
from .loadgen import ClientClass, LoadSpec
from .metrics import LATENCY_KEYS, Percentile, RunCounts
from .plan import Leg, PlanError

__all__ = [
    "Workload",
    "WORKLOADS",
    "classes_for",
    "LoadPlan",
    "plan_load",
    "parse_rate",
    "LoadRunResult",
    "CAPACITY_S",
    "CAPACITY_PATH",
    "MIXED_SERVICE_US",
    "SLOW_FRACTION",
    "SLOW_US",
    "THINK_MS",
    "BULK_DEPTH",
    "INTERACTIVE_CONNECTIONS",
    "Traffic",
    "TrafficClass",
    "TrafficError",
    "TRAFFIC_KEYS",
    "read_traffic",
    "traffic_of",
    "parse_classes",
    "workload_of",
    "label",
    "SERVICE_PATH",
    "service_text",
    "resolve",
]

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

#: ``classes(connections, rate_rps, schedule)`` of a workload (rate: None without an open-loop class).
Classes = Callable[[int, "float | None", str], tuple[ClientClass, ...]]


@dataclass(frozen=True)
class Workload:
    """One workload: ``open_classes``: whether it has an open-loop class (then ``--rate`` applies,
    default ``default_rate``); ``server_env``: bench server variables it needs, for both arms;
    ``classes``: its client classes (see :data:`Classes`)."""

    name: str
    description: str
    classes: Classes
    open_classes: bool
    default_rate: str | None = None
    server_env: Mapping[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return dict(self.server_env)


def _rate(rate: float | None) -> float:
    """The rate of an open-loop class: ``classes_for`` gets one for every workload with ``open_classes``."""
    if rate is None:
        raise ValueError("an open-loop class needs a rate (--rate)")
    return rate


def _uniform(connections: int, rate: float | None, schedule: str) -> tuple[ClientClass, ...]:
    if rate is None:
        raise ValueError("uniform without a rate is wrk's closed loop, not the load client")
    return (ClientClass("all", connections, "open", rate=rate, schedule=schedule),)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "uniform",
            "every connection alike (wrk closed loop; one open-loop class with --load open)",
            _uniform,
            open_classes=False,
            default_rate="0.7x",
        ),
        Workload(
            "mixed",
            f"C/4 bulk connections pipelining depth {BULK_DEPTH} (closed loop) + "
            f"{INTERACTIVE_CONNECTIONS} interactive clients (open loop, low rate), "
            f"{MIXED_SERVICE_US} us of service per request",
            lambda c, rate, sched: (
                ClientClass("interactive", INTERACTIVE_CONNECTIONS, "open", rate=_rate(rate), schedule=sched),
                ClientClass("bulk", max(c // 4, 1), "closed", depth=BULK_DEPTH),
            ),
            open_classes=True,
            default_rate="200",
            server_env={"CWIST_BENCH_DELAY_US": str(MIXED_SERVICE_US)},
        ),
        Workload(
            "slow-route",
            f"open loop; {SLOW_FRACTION:.0%} of requests to /slow/ at {SLOW_US} us",
            lambda c, rate, sched: (
                ClientClass("fast", c, "open", rate=_rate(rate) * (1 - SLOW_FRACTION), schedule=sched),
                ClientClass(
                    "slow",
                    max(c // 16, 2),
                    "open",
                    rate=_rate(rate) * SLOW_FRACTION,
                    schedule=sched,
                    path="/slow/",
                ),
            ),
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


# -- a user's own traffic ---------------------------------------------------------------
SERVICE_PATH = "/service/{us}/"
"""The path of a class with a service cost: the bench server busy-waits ``us`` per request
(``CWIST_BENCH_SERVICE_ROUTE=1``); a class without one sends the load client's ``/user/``."""
SERVICE_KNOB = "CWIST_BENCH_SERVICE_ROUTE"
CONNECTIONS_MAX = 4096
DEPTH_MAX = 1024
THINK_MS_MAX = 60_000
SERVICE_US_MAX = 1_000_000
_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")

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
_OPEN_ONLY, _CLOSED_ONLY = ("rate", "schedule"), ("depth", "think_ms")


class TrafficError(PlanError):
    """A traffic description the job cannot run; the message is one line naming the file (or
    ``--class``), the class, the key, the value and what is accepted."""


@dataclass(frozen=True)
class TrafficClass:
    """One class of a :class:`Traffic` as its user described it (``rate`` as given: ``"200"`` or
    ``"0.7x"``; None for a closed-loop class)."""

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
        rate = 0.0
        if self.rate is not None:
            value, relative = parse_rate(self.rate)
            if relative and not capacity_rps:
                raise PlanError(
                    f"rate {self.rate} of class {self.name!r}: the capacity run completed no request"
                )
            rate = value * capacity_rps if relative and capacity_rps else value
        return ClientClass(
            self.name,
            self.connections,
            self.loop,
            rate=rate,
            schedule=self.schedule,
            depth=self.depth,
            think_ms=self.think_ms,
            path=self.path,
        )


@dataclass(frozen=True)
class Traffic:
    """A user's own workload: ``classes`` in the order described, ``source`` the file (or
    ``--class``), ``argv`` the options that describe it again (for a job that runs another)."""

    source: str
    classes: tuple[TrafficClass, ...]
    argv: tuple[str, ...]

    default_rate = None  # as a Workload without --rate: every class says its own

    @property
    def name(self) -> str:
        return Path(self.source).name if self.source != "--class" else "--class"

    def __str__(self) -> str:
        return self.name

    @property
    def connections(self) -> int:
        """The connections of all classes: the leg's connection count."""
        return sum(c.connections for c in self.classes)

    @property
    def open_classes(self) -> bool:
        return any(c.loop == "open" for c in self.classes)

    @property
    def relative(self) -> bool:
        """True when a class's rate is a fraction of the capacity (a capacity run comes first)."""
        return any(c.rate is not None and parse_rate(c.rate)[1] for c in self.classes)

    @property
    def description(self) -> str:
        return "; ".join(_describe(c) for c in self.classes)

    def env(self) -> dict[str, str]:
        """Bench server variables for both arms: the service route when a class has a cost."""
        return {SERVICE_KNOB: "1"} if any(c.service_us for c in self.classes) else {}

    def client_classes(self, capacity_rps: float | None) -> tuple[ClientClass, ...]:
        return tuple(c.client_class(capacity_rps) for c in self.classes)

    def as_dict(self) -> dict:
        return {"source": self.source, "classes": [asdict(c) for c in self.classes]}


def _describe(c: TrafficClass) -> str:
    what = (
        f"open loop at {c.rate}" + (" of capacity" if parse_rate(c.rate)[1] else " req/s") + f", {c.schedule}"
        if c.loop == "open" and c.rate is not None
        else f"closed loop, depth {c.depth}" + (f", think {c.think_ms:g} ms" if c.think_ms else "")
    )
    cost = f", {c.service_us} us of service per request" if c.service_us else ""
    return f"{c.name}: {c.connections} connections, {what}{cost}"


def _show(value: object) -> str:
    """A value as its TOML reads (true, 4, 'four')."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def _int(value: object, lo: int, hi: int) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi else None


def _check_class(where: str, name: str, table: Mapping[str, object]) -> TrafficClass:
    """One class from its keys (typed as TOML types them); :class:`TrafficError` naming the key."""

    def bad(key: str, what: str) -> TrafficError:
        shown = f"{key} = {_show(table[key])}" if key in table else f"{key} missing"
        return TrafficError(f"{where}: class {name!r}: {shown}: {what}")

    for key in table:
        if key not in TRAFFIC_KEYS:
            raise bad(key, f"unknown key; accepted {', '.join(TRAFFIC_KEYS)}")
    for key in ("connections", "loop"):
        if key not in table:
            raise bad(key, f"required; {key}: {TRAFFIC_KEYS[key]}")
    connections = _int(table["connections"], 1, CONNECTIONS_MAX)
    if connections is None:
        raise bad("connections", f"accepted an integer from 1 to {CONNECTIONS_MAX}")
    loop = table["loop"]
    if loop not in loadgen.LOOPS:
        raise bad("loop", "accepted open or closed")
    for key in _CLOSED_ONLY if loop == "open" else _OPEN_ONLY:
        if key in table:
            raise bad(key, f"applies to {'a closed' if loop == 'open' else 'an open'}-loop class only")
    rate: str | None = None
    if loop == "open":
        if "rate" not in table:
            raise bad(
                "rate", "an open-loop class needs one: requests/s (200) or a fraction of capacity ('0.7x')"
            )
        raw = table["rate"]
        text = str(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else raw
        if not isinstance(text, str) or not _RATE.fullmatch(text.strip()) or not _rate_ok(text):
            raise bad(
                "rate",
                "accepted requests/s above 0 (200) or a fraction of the capacity ('0.7x', at most 10x)",
            )
        rate = text.strip()
    schedule = table.get("schedule", "poisson")
    if schedule not in loadgen.SCHEDULES:
        raise bad("schedule", "accepted poisson or constant")
    depth = _int(table.get("depth", 1), 1, DEPTH_MAX)
    if depth is None:
        raise bad("depth", f"accepted an integer from 1 to {DEPTH_MAX}")
    think = table.get("think_ms", 0)
    if isinstance(think, bool) or not isinstance(think, (int, float)) or not 0 <= think <= THINK_MS_MAX:
        raise bad("think_ms", f"accepted 0 to {THINK_MS_MAX} milliseconds")
    service = _int(table.get("service_us", 0), 0, SERVICE_US_MAX)
    if service is None:
        raise bad("service_us", f"accepted an integer from 0 to {SERVICE_US_MAX} (microseconds)")
    return TrafficClass(name, connections, str(loop), rate, str(schedule), depth, float(think), service)


def _rate_ok(text: str) -> bool:
    try:
        parse_rate(text)
    except PlanError:
        return False
    return True


def _traffic(where: str, source: str, tables: Sequence[tuple[str, object]], argv: tuple[str, ...]) -> Traffic:
    if not tables:
        raise TrafficError(f"{where}: no class: accepted one table per class, e.g. [bulk] connections = 16")
    classes, names = [], set()
    for name, table in tables:
        if not isinstance(table, dict):
            raise TrafficError(
                f"{where}: {name} = {_show(table)}: not a class; accepted one table per class "
                "([name] then its keys)"
            )
        if not _NAME.fullmatch(name):
            raise TrafficError(
                f"{where}: class {name!r}: accepted a name of letters, digits, - and _ (1 to 32)"
            )
        if name in names:
            raise TrafficError(f"{where}: class {name!r}: named twice")
        names.add(name)
        classes.append(_check_class(where, name, table))
    return Traffic(source, tuple(classes), argv)


def read_traffic(path: str | Path, *, where: str | None = None) -> Traffic:
    """The traffic of a TOML file, one table per class (see the module docstring); checked whole.
    ``where`` starts every error's line (default ``--workload PATH``; a sweep's grid names its load point)."""
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


def traffic_of(tables: Mapping[str, object], *, where: str, source: str) -> Traffic:
    """The traffic of ``tables`` (class name -> its keys, as a file's tables), checked as a file's:
    a sweep's inline classes (``[load.class.NAME]``); ``where`` starts every error's line."""
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
            table[key] = value if key in ("name", "loop", "schedule", "rate") else _typed(value)
        name = table.pop("name", None)
        if not isinstance(name, str):
            raise TrafficError(f"{where}: name missing: required (the class's name, e.g. name=bulk)")
        if any(c.name == name for c in classes):
            raise TrafficError(f"{where}: class {name!r}: named twice")
        classes.append(_traffic(where, "--class", [(name, table)], ()).classes[0])
    argv = tuple(arg for text in texts for arg in ("--class", text))
    return Traffic("--class", tuple(classes), argv)


_ACCEPTED = f"{', '.join(WORKLOADS)} or a traffic file FILE.toml"


def workload_of(text: str) -> str | Traffic:
    """``--workload``'s value: a workload's name, or the traffic of a ``.toml`` file."""
    if text in WORKLOADS:
        return text
    if text.endswith(".toml"):
        return read_traffic(text)
    raise TrafficError(f"--workload {text}: accepted {_ACCEPTED}")


_SERVICE = re.compile(r"/service/(\d+)/")


def service_text(cls: ClientClass | Mapping) -> str:
    """`` (20 us of service each)`` for a class whose requests name a service cost, else ``""``."""
    path = cls["path"] if isinstance(cls, Mapping) else cls.path
    m = _SERVICE.fullmatch(path)
    return f" ({int(m.group(1))} us of service each)" if m else ""


def _sets(traffic: Traffic, what: str) -> str:
    return f"the traffic ({traffic.name}) sets each class's {what}"


def label(workload: str | Traffic) -> str:
    """What a report calls a workload: its name, or the traffic file's name."""
    return str(workload)


def resolve(workload: str | Traffic) -> Workload | Traffic:
    """The definition behind ``--workload``: the named :class:`Workload`, or the traffic itself."""
    return workload if isinstance(workload, Traffic) else WORKLOADS[workload]


def classes_for(
    workload: str, *, connections: int, rate_rps: float | None, schedule: str = "poisson"
) -> tuple[ClientClass, ...]:
    """The client classes of ``workload`` for a leg of ``connections`` (see the module table).

    ``rate_rps`` is the resolved ``--rate`` (None for workloads without an open-loop class);
    uniform with a rate is the open-loop ``all`` class.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"workload {workload!r}: accepted {', '.join(WORKLOADS)}")
    return WORKLOADS[workload].classes(connections, rate_rps, schedule)


_RATE = re.compile(r"(\d+(?:\.\d+)?)(x?)")


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


@dataclass(frozen=True)
class LoadPlan:
    """The load of every run of a job (``rate``: as given, e.g. ``0.7x``; None without open classes
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
        if self.rate is None:
            return None
        value, relative = parse_rate(self.rate)
        if not relative:
            return value
        if not capacity_rps:
            raise PlanError(f"--rate {self.rate}: the capacity run completed no request")
        return value * capacity_rps

    def spec(self, leg: Leg, *, capacity_rps: float | None, seed: int) -> LoadSpec:
        """The client's spec for ``leg`` (one spec per leg: every run of the leg offers the same load)."""
        if isinstance(self.workload, Traffic):
            classes = self.workload.client_classes(capacity_rps)
        else:
            classes = classes_for(
                self.workload,
                connections=leg.connections,
                rate_rps=self.resolve_rate(capacity_rps),
                schedule=self.schedule,
            )
        spec = LoadSpec(
            classes=classes,
            duration_s=float(leg.duration_s),
            seed=seed,
        )
        spec.check()
        return spec

    def describe(self) -> str:
        if isinstance(self.workload, Traffic):
            return f"traffic `{self.workload.name}` ({self.workload.description})"
        w = WORKLOADS[self.workload]
        rate = f", rate {self.rate}" + (" of capacity" if self.relative else " req/s") if self.rate else ""
        sched = f", {self.schedule} schedule" if self.rate else ""
        return f"workload `{self.workload}` ({w.description}){rate}{sched}"


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
                raise PlanError(f"{name} {given}: {_sets(workload, what)}; leave out {name}")
        return LoadPlan(workload=workload, rate=None)
    if workload not in WORKLOADS:
        raise PlanError(f"--workload {workload!r}: accepted {', '.join(WORKLOADS)}")
    w = WORKLOADS[workload]
    if workload == "uniform":
        if load in (None, "closed"):
            for given, name in ((rate, "--rate"), (schedule, "--schedule")):
                if given is not None:
                    raise PlanError(f"{name} needs open-loop load: add --load open")
            return None
        rate = rate or w.default_rate
    else:
        if load is not None:
            raise PlanError(
                f"--load {load}: workload {workload} sets its own load (see --help); leave out --load"
            )
        if not w.open_classes:
            for given, name in ((rate, "--rate"), (schedule, "--schedule")):
                if given is not None:
                    raise PlanError(f"{name}: workload {workload} has no open-loop class")
        else:
            rate = rate or w.default_rate
    if rate is not None:
        parse_rate(rate)
    return LoadPlan(workload=workload, rate=rate, schedule=schedule or "poisson")


class LoadRunResult(RunCounts):
    """One run of the load client, answering like :class:`tailjob.wrk.WrkResult` for the job.

    ``requests``: answers inside the run's window, all classes; ``rps`` their
    rate; percentiles of all classes merged.  The wrk-style ``errors`` map the
    client's ``timeout`` (owed answers missing at the end) and ``mismatch``
    (a body that is not its request's echo) to wrk's ``timeout`` and ``read``.
    """

    @classmethod
    def parse(cls, stdout: str) -> LoadRunResult:
        """The result of the last ``TAILREACTOR_LOAD`` line of the client's output."""
        return cls(loadgen.parse_output(stdout))

    def __init__(self, doc: dict):
        self.doc = doc
        merged = doc["all"]
        self.requests = merged["answered_in_window"]
        self.duration_us = merged["duration_us"]
        self.latency_samples = merged["latency"]["count"]
        e = merged["errors"]
        self.errors = {
            "connect": e["connect"],
            "read": e["read"] + e["mismatch"],
            "write": e["write"],
            "status": e["status"],
            "timeout": e["timeout"],
        }

    @property
    def generator_busy(self) -> float:
        """The busiest client process's CPU over its run, as a share of one core."""
        return max((p["busy"] for p in self.doc.get("processes", [])), default=0.0)

    @property
    def saturated(self) -> bool:
        return any(c["saturated"] for c in self.doc["classes"].values())

    def percentile(self, p: float) -> Percentile:
        for q in self.doc["all"]["latency"]["percentiles"]:
            if q["p"] == p:
                return Percentile(q["p"], q["us"], q["samples"])
        raise KeyError(f"percentile {p} not recorded")

    def class_metrics(self) -> dict[str, dict]:
        """Per class: the compared metrics (``rps`` = achieved) and what the report shows beside them."""
        out = {}
        for name, c in self.doc["classes"].items():
            pct = {q["p"]: q for q in c["latency"]["percentiles"]}
            lag = {q["p"]: q["us"] for q in c["lag"]["percentiles"]}
            turn = {q["p"]: q["us"] for q in c.get("turnaround", {}).get("percentiles", [])}
            m = {
                "rps": c["achieved_rps"],
                "offered_rps": c["offered_rps"],
                "loop": c["loop"],
                "connections": c["connections"],
                "answered": c["answered"],
                "saturated": c["saturated"],
                "errors": c["errors"],
                "lag_p50": lag[50],
                "lag_p99": lag[99],
                "turnaround_p50": turn.get(50),
                "turnaround_p99": turn.get(99),
                "histogram": c["latency"].get("histogram"),
            }
            for key, p in LATENCY_KEYS.items():
                m[key] = pct[p]["us"]
                m[f"{key}_samples"] = pct[p]["samples"]
            out[name] = m
        return out

    def as_dict(self) -> dict:
        """The run's record (``RunRecord.wrk``): wrk's keys where they mean the same, plus ``classes``."""
        merged = self.doc["all"]
        return {
            "tool": "tailjob.loadgen",
            "requests": self.requests,
            "duration_us": self.duration_us,
            "rps": self.rps,
            "latency_samples": self.latency_samples,
            "latency_us": {k: merged["latency"][k] for k in ("min", "max", "mean")},
            "percentiles": merged["latency"]["percentiles"],
            "spectrum": merged["latency"].get("spectrum", []),
            "errors": self.errors,
            "histogram": merged["latency"].get("histogram"),
            "classes": self.doc["classes"],
        }
