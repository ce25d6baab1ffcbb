"""What a run of the load client is and what it reports (shared with the virtual-time tier).

A run is a :class:`LoadSpec`: a duration and one or more client classes (:class:`ClientClass`), each
keep-alive connections driven open loop (``rate`` requests/s on a ``poisson`` or ``constant``
schedule per connection, one request in flight, latency from the intended send time) or closed loop
(``depth`` requests per write, then an optional exponential think time).  Requests whose intended
time falls inside the run are *offered*; answers still owed ``drain_s`` after it are ``timeout``; a
class is ``saturated`` (:func:`saturated`) when its answers inside the run fall over 2 % short of
the requests due inside it (:func:`set_offered_due`).  :func:`report` is the run's document: per
class and merged, counts, offered and achieved rates, latency percentiles (us, HdrHistogram) with
the samples behind each, the client's send lag and a closed loop's turnaround.  The rules and why:
docs/en/workloads.md, "Open-loop load".
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .metrics import PERCENTILES

ERROR_KINDS = ("connect", "read", "write", "status", "timeout", "mismatch")
LOOPS = ("open", "closed")
SCHEDULES = ("poisson", "constant")
SATURATION_SHORTFALL = 0.02
"""An open-loop class whose achieved rate falls more than this short of the offered rate is flagged:
the server did not keep up, so its latencies grow with the run's length rather than describe it."""

US_MAX = 60_000_000
"""The longest latency the histograms hold (microseconds); a longer one is recorded as this."""


class SpecError(ValueError):
    """A load spec the client cannot run; the message is one line."""


@dataclass(frozen=True)
class ClientClass:
    """One class of clients (see the module docstring).  ``rate`` in requests/s over the class."""

    name: str
    connections: int
    loop: str
    rate: float = 0.0
    schedule: str = "poisson"
    depth: int = 1
    think_ms: float = 0.0
    path: str = "/user/"

    def check(self) -> None:
        """Raise :class:`SpecError` naming the field, the value and what is accepted."""

        def bad(field, value, accepted):
            raise SpecError(f"class {self.name!r}: {field}={value!r} is invalid: accepted {accepted}")

        if not self.name or not isinstance(self.name, str):
            bad("name", self.name, "a non-empty name")
        if not isinstance(self.connections, int) or self.connections < 1:
            bad("connections", self.connections, "a positive integer")
        if self.loop not in LOOPS:
            bad("loop", self.loop, " or ".join(LOOPS))
        if self.loop == "open" and not self.rate > 0:
            bad("rate", self.rate, "requests/s above 0 for an open-loop class")
        if self.schedule not in SCHEDULES:
            bad("schedule", self.schedule, " or ".join(SCHEDULES))
        if not isinstance(self.depth, int) or self.depth < 1 or (self.loop == "open" and self.depth != 1):
            bad("depth", self.depth, "a positive integer (1 for an open-loop class)")
        if not self.think_ms >= 0:
            bad("think_ms", self.think_ms, "0 or more milliseconds")
        if not self.path.startswith("/"):
            bad("path", self.path, "a path starting with /, e.g. /user/")


@dataclass(frozen=True)
class LoadSpec:
    """A run: its classes, ``duration_s``, the schedules' ``seed`` and ``drain_s`` (see the module)."""

    classes: tuple[ClientClass, ...]
    duration_s: float
    seed: int = 1
    drain_s: float = 10.0

    def check(self) -> None:
        if not self.classes:
            raise SpecError("classes: a load spec needs at least one client class")
        names = [c.name for c in self.classes]
        for name in names:
            if names.count(name) > 1:
                raise SpecError(f"classes: {name!r} named twice")
        for c in self.classes:
            c.check()
        if not self.duration_s > 0:
            raise SpecError(f"duration_s={self.duration_s!r} is invalid: accepted seconds above 0")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> LoadSpec:
        """Parse and check a spec; :class:`SpecError` (one line) for anything wrong."""
        try:
            raw = json.loads(text)
            classes = tuple(ClientClass(**c) for c in raw.pop("classes"))
            spec = cls(classes=classes, **raw)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SpecError(
                f"spec is not a load spec ({type(e).__name__}: {e}); expected JSON "
                '{"classes": [{"name", "connections", "loop", ...}], "duration_s"}'
            ) from None
        spec.check()
        return spec


def intended_times(
    schedule: str,
    *,
    rate: float,
    connections: int,
    index: int,
    rng: random.Random,
    start_ns: int,
    end_ns: int,
) -> Iterator[int]:
    """Intended send times (ns) of connection ``index`` of an open-loop class, in ``[start, end)``.

    Each connection carries ``rate / connections`` requests/s.  ``poisson``:
    exponential gaps drawn from ``rng`` (the class's sends are then a Poisson
    process of ``rate``).  ``constant``: a gap of ``connections / rate``
    seconds, connection ``index`` starting ``index / rate`` seconds in.
    """
    gap_ns = connections / rate * 1e9
    if schedule == "constant":
        t = start_ns + index * 1e9 / rate
        k = 0
        while (at := round(t + k * gap_ns)) < end_ns:
            yield at
            k += 1
        return
    t = float(start_ns)
    while True:
        t += rng.expovariate(1.0) * gap_ns
        if t >= end_ns:
            return
        yield round(t)


def saturated(*, offered: float | None, achieved: float) -> bool:
    """True when ``achieved`` is more than :data:`SATURATION_SHORTFALL` short of ``offered`` (counts or
    rates).  The client compares the answers that arrived inside the run with the requests offered up
    to one median latency (at most a tenth of the run) before its end: the rest could not have been
    answered inside it even by a server that keeps up."""
    return offered is not None and offered > 0 and achieved < offered * (1 - SATURATION_SHORTFALL)


class ClassStats:
    """One class's counters and histograms (latency from intended time; send lag; a closed loop's
    turnaround)."""

    def __init__(self, cls: ClientClass):
        from hdrh.histogram import HdrHistogram

        self.cls = cls
        self.latency = HdrHistogram(1, US_MAX, 3)
        self.lag = HdrHistogram(1, US_MAX, 3)
        self.turnaround = HdrHistogram(1, US_MAX, 3)
        self.offered = self.sent = self.answered = self.in_window = self.offered_due = 0
        self.errors = dict.fromkeys(ERROR_KINDS, 0)
        self.latency_sum_us = 0

    def record(self, us: int, count: int = 1) -> None:
        """Record ``count`` answers of latency ``us`` (clamped to 1..:data:`US_MAX`)."""
        us = min(max(us, 1), US_MAX)
        self.latency.record_value(us, count)
        self.latency_sum_us += us * count


def offered(spec: LoadSpec, cls: ClientClass, start_ns: int, end_ns: int) -> int:
    """Requests the schedules of open-loop class ``cls`` offer from ``start_ns`` to ``end_ns`` (the
    same seeds as its connections: a copy of what they draw)."""
    return sum(
        1
        for i in range(cls.connections)
        for _ in intended_times(
            cls.schedule,
            rate=cls.rate,
            connections=cls.connections,
            index=i,
            rng=random.Random(f"{spec.seed}/{cls.name}/{i}"),
            start_ns=start_ns,
            end_ns=end_ns,
        )
    )


def set_offered(spec: LoadSpec, stats: list[ClassStats], start_ns: int, end_ns: int) -> None:
    """Each open-loop class's requests offered in the run."""
    for st in stats:
        if st.cls.loop == "open":
            st.offered = offered(spec, st.cls, start_ns, end_ns)


def set_offered_due(spec: LoadSpec, stats: list[ClassStats], start_ns: int, end_ns: int) -> None:
    """What the saturation check compares the answers inside the run with: the requests offered up to
    a median latency before its end (one sent later is not due inside the run even from a server that
    keeps up), at most a tenth of the run before it (a saturated server's median latency grows with
    the run, and would excuse it)."""
    for st in stats:
        if st.cls.loop == "open" and st.latency.get_total_count():
            margin_ns = min(st.latency.get_value_at_percentile(50) * 1000, (end_ns - start_ns) // 10)
            st.offered_due = offered(spec, st.cls, start_ns, end_ns - margin_ns)


_COUNTERS = ("offered", "offered_due", "sent", "answered", "in_window", "latency_sum_us")


def _part(st: ClassStats) -> dict:
    """A class's raw figures, for merging the classes of several processes (histograms encoded)."""
    return {
        "class": asdict(st.cls),
        **{k: getattr(st, k) for k in _COUNTERS},
        "errors": st.errors,
        "latency": st.latency.encode().decode(),
        "lag": st.lag.encode().decode(),
        "turnaround": st.turnaround.encode().decode(),
    }


def _stats_of(part: dict) -> ClassStats:
    from hdrh.histogram import HdrHistogram

    st = ClassStats(ClientClass(**part["class"]))
    for k in _COUNTERS:
        setattr(st, k, part[k])
    st.errors = dict(part["errors"])
    st.latency.add(HdrHistogram.decode(part["latency"]))
    st.lag.add(HdrHistogram.decode(part["lag"]))
    st.turnaround.add(HdrHistogram.decode(part["turnaround"]))
    return st


def merge(docs: list[dict], spec: LoadSpec) -> dict:
    """One document from the documents of the processes of one run (one process per class)."""
    stats = [_stats_of(part) for d in docs for part in d["parts"]]
    order = [c.name for c in spec.classes]
    stats.sort(key=lambda st: order.index(st.cls.name))
    doc = report(stats, spec.duration_s)
    doc["processes"] = [p for d in docs for p in d["processes"]]
    return doc


def _histogram_summary(
    h, total_sum_us: int | None = None, *, spectrum: bool = False, histogram: bool = False
) -> dict:
    """Count, min/max/mean and :data:`PERCENTILES` (each with the samples at or beyond its rank);
    ``spectrum``: also (percentile, us) from p0 to p99.999 in steps of 0.1 "nines", for plots."""
    n = h.get_total_count()
    pct = []
    for p in PERCENTILES:
        rank = math.floor(p / 100 * n + 1)
        pct.append(
            {
                "p": p,
                "us": h.get_value_at_percentile(p) if n else None,
                "samples": max(n - rank + 1, 0) if n else 0,
            }
        )
    out = {
        "count": n,
        "min": h.get_min_value() if n else None,
        "max": h.get_max_value() if n else None,
        "mean": (total_sum_us / n if total_sum_us is not None else h.get_mean_value()) if n else None,
        "percentiles": pct,
    }
    if histogram:  # the whole histogram, for pooling runs (tailjob.pooled: same range and precision)
        blob = h.encode()
        out["histogram"] = blob.decode("ascii") if isinstance(blob, bytes) else blob
    if spectrum:
        points = [100 * (1 - 10 ** (-k / 10)) for k in range(51)]
        out["spectrum"] = [[p, h.get_value_at_percentile(p)] for p in points] if n else []
    return out


def _class_report(sts: list[ClassStats], duration_s: float, name: str, loop: str) -> dict:
    from hdrh.histogram import HdrHistogram

    lat, lag, turn = (HdrHistogram(1, US_MAX, 3) for _ in range(3))
    for st in sts:
        lat.add(st.latency)
        lag.add(st.lag)
        turn.add(st.turnaround)
    offered = sum(st.offered for st in sts)
    achieved = sum(st.in_window for st in sts) / duration_s
    out: dict[str, Any] = {
        "name": name,
        "loop": loop,
        "connections": sum(st.cls.connections for st in sts),
        "offered": offered,
        "sent": sum(st.sent for st in sts),
        "answered": sum(st.answered for st in sts),
        "answered_in_window": sum(st.in_window for st in sts),
        "duration_us": round(duration_s * 1e6),
        "offered_rps": offered / duration_s if loop == "open" else None,
        "achieved_rps": achieved,
        "errors": {k: sum(st.errors[k] for st in sts) for k in ERROR_KINDS},
        "latency": _histogram_summary(
            lat, sum(st.latency_sum_us for st in sts), spectrum=name == "all", histogram=True
        ),
        "lag": _histogram_summary(lag),
        "turnaround": _histogram_summary(turn),
    }
    out["offered_due"] = sum(st.offered_due for st in sts)
    out["saturated"] = loop == "open" and saturated(
        offered=out["offered_due"], achieved=out["answered_in_window"]
    )
    return out


def report(stats: list[ClassStats], duration_s: float) -> dict:
    """The output document: per class, and all classes merged (``all``; open if every class is)."""
    classes = {st.cls.name: _class_report([st], duration_s, st.cls.name, st.cls.loop) for st in stats}
    loops = {st.cls.loop for st in stats}
    merged = _class_report(stats, duration_s, "all", loops.pop() if len(loops) == 1 else "mixed")
    if merged["loop"] != "open":
        merged["offered_rps"] = None
        merged["saturated"] = any(c["saturated"] for c in classes.values())
    return {"classes": classes, "all": merged}
