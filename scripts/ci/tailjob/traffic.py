"""A user's own traffic (docs/en/own-traffic.md, "Your own traffic"): client classes, checked once.

A :class:`Traffic` is one :class:`TrafficClass` per client class, read from a TOML file
(``--workload FILE.toml``) or from ``--class 'name=bulk connections=16 ...'`` options
(:func:`parse_classes`).  A class's service cost travels in its requests, ``GET
/service/<us>/<seq>`` (:data:`SERVICE_PATH`), which the bench server busy-waits for when
``CWIST_BENCH_SERVICE_ROUTE=1`` and the sim tier charges in virtual time.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from . import loadgen
from .loadgen import ClientClass
from .plan import PlanError

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


_SERVICE = re.compile(r"/service/(\d+)/")


def service_text(cls: ClientClass | Mapping) -> str:
    """`` (20 us of service each)`` for a class whose requests name a service cost, else ``""``."""
    path = cls["path"] if isinstance(cls, Mapping) else cls.path
    m = _SERVICE.fullmatch(path)
    return f" ({int(m.group(1))} us of service each)" if m else ""
