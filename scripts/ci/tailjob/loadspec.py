"""What a run of the load client is and what it reports (shared with the virtual-time tier).

A run is a :class:`LoadSpec`: a duration and client classes (:class:`ClientClass`), each keep-alive
connections driven open loop (``rate`` requests/s, ``poisson`` or ``constant``, one request in
flight, latency from the intended send time) or closed loop (``depth`` requests per write, then an
optional think time).  :func:`report` is the run's document, per class and merged;
:class:`LoadRunResult` reads it for the job.  The rules and why: docs/en/workloads.md, "Open-loop load".
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .metrics import LATENCY_KEYS, PERCENTILES, Percentile, RunCounts

ERROR_KINDS = ("connect", "read", "write", "status", "timeout", "mismatch")
LOOPS = ("open", "closed")
SCHEDULES = ("poisson", "constant")
SATURATION_SHORTFALL = 0.02
"""An open-loop class answered more than this short of the load due is flagged: the server did not
keep up, so its latencies grow with the run's length rather than describe it."""
US_MAX = 60_000_000
"""The longest latency the histograms hold (microseconds); a longer one is recorded as this."""
HISTOGRAMS = ("latency", "lag", "turnaround")
OUTPUT_PREFIX = "TAILREACTOR_LOAD "


class SpecError(ValueError):
    """A load spec the client cannot run; the message is one line."""


class LoadOutputError(ValueError):
    """The client's output has no readable ``TAILREACTOR_LOAD`` line."""


@dataclass(frozen=True)
class ClientClass:
    """One class of clients (see the module docstring); ``rate`` in requests/s over the class."""

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

        def bad(field, accepted):
            value = getattr(self, field)
            raise SpecError(f"class {self.name!r}: {field}={value!r} is invalid: accepted {accepted}")

        if not self.name or not isinstance(self.name, str):
            bad("name", "a non-empty name")
        if not isinstance(self.connections, int) or self.connections < 1:
            bad("connections", "a positive integer")
        if self.loop not in LOOPS:
            bad("loop", " or ".join(LOOPS))
        if self.loop == "open" and not self.rate > 0:
            bad("rate", "requests/s above 0 for an open-loop class")
        if self.schedule not in SCHEDULES:
            bad("schedule", " or ".join(SCHEDULES))
        if not isinstance(self.depth, int) or self.depth < 1 or (self.loop == "open" and self.depth != 1):
            bad("depth", "a positive integer (1 for an open-loop class)")
        if not self.think_ms >= 0:
            bad("think_ms", "0 or more milliseconds")
        if not self.path.startswith("/"):
            bad("path", "a path starting with /, e.g. /user/")


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
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise SpecError(f"classes: {twice!r} named twice")
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
            spec = cls(classes=tuple(ClientClass(**c) for c in raw.pop("classes")), **raw)
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

    Each connection carries ``rate / connections`` requests/s: ``poisson``, exponential gaps drawn
    from ``rng`` (the class's sends are a Poisson process of ``rate``); ``constant``, a gap of
    ``connections / rate`` s, connection ``index`` starting ``index / rate`` s in."""
    gap_ns = connections / rate * 1e9
    if schedule == "constant":
        t, k = start_ns + index * 1e9 / rate, 0
        while (at := round(t + k * gap_ns)) < end_ns:
            yield at
            k += 1
        return
    t = float(start_ns)
    while (t := t + rng.expovariate(1.0) * gap_ns) < end_ns:
        yield round(t)


def saturated(*, offered: float | None, achieved: float) -> bool:
    """True when ``achieved`` is more than :data:`SATURATION_SHORTFALL` short of ``offered``."""
    return offered is not None and offered > 0 and achieved < offered * (1 - SATURATION_SHORTFALL)


def histogram():
    """An empty latency histogram on the job's one grid (us, 1 to :data:`US_MAX`, 3 significant
    digits): the load client's, wrk's and the pooled ones, so that any two merge exactly."""
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(1, US_MAX, 3)


def _clamped(us: int) -> int:
    return min(max(us, 1), US_MAX)


class ClassStats:
    """One class's counters and histograms: latency from the intended time, send lag, a closed
    loop's turnaround."""

    COUNTERS = ("offered", "offered_due", "sent", "answered", "in_window", "latency_sum_us")

    def __init__(self, cls: ClientClass):
        self.cls = cls
        self.latency, self.lag, self.turnaround = histogram(), histogram(), histogram()
        self.offered = self.sent = self.answered = self.in_window = self.offered_due = 0
        self.errors = dict.fromkeys(ERROR_KINDS, 0)
        self.latency_sum_us = 0

    def record(self, us: int, count: int = 1) -> None:
        """Record ``count`` answers of latency ``us`` (clamped to 1..:data:`US_MAX`)."""
        us = _clamped(us)
        self.latency.record_value(us, count)
        self.latency_sum_us += us * count


def _times(spec: LoadSpec, cls: ClientClass, index: int, start_ns: int, end_ns: int, rng=None):
    """The intended times of connection ``index`` of open-loop class ``cls`` (its seed's draws)."""
    rng = rng or random.Random(f"{spec.seed}/{cls.name}/{index}")
    return intended_times(
        cls.schedule,
        rate=cls.rate,
        connections=cls.connections,
        index=index,
        rng=rng,
        start_ns=start_ns,
        end_ns=end_ns,
    )


def offered(spec: LoadSpec, cls: ClientClass, start_ns: int, end_ns: int) -> int:
    return sum(1 for i in range(cls.connections) for _ in _times(spec, cls, i, start_ns, end_ns))


def set_offered(spec: LoadSpec, stats: list[ClassStats], start_ns: int, end_ns: int) -> None:
    for st in stats:
        if st.cls.loop == "open":
            st.offered = offered(spec, st.cls, start_ns, end_ns)


def set_offered_due(spec: LoadSpec, stats: list[ClassStats], start_ns: int, end_ns: int) -> None:
    """What saturation compares the answers inside the run with: the requests offered up to a median
    latency before its end (one sent later is not due inside the run even from a server that keeps
    up), at most a tenth of the run before it (a saturated server's median grows with the run)."""
    for st in stats:
        if st.cls.loop == "open" and st.latency.get_total_count():
            margin_ns = min(st.latency.get_value_at_percentile(50) * 1000, (end_ns - start_ns) // 10)
            st.offered_due = offered(spec, st.cls, start_ns, end_ns - margin_ns)


def encode(h) -> str:
    """HdrHistogram's standard compressed base64 form (what the result JSON keeps)."""
    blob = h.encode()
    return blob.decode("ascii") if isinstance(blob, bytes) else blob


def _summary(h, sum_us: int | None = None, *, spectrum: bool = False, histogram: bool = False) -> dict:
    """Count, min/max/mean and :data:`PERCENTILES` (each with the samples at or beyond its rank);
    ``spectrum``: (percentile, us) from p0 to p99.999 in steps of 0.1 "nines", for plots;
    ``histogram``: the whole histogram encoded, for pooling runs (:mod:`tailjob.pooled`)."""
    n = h.get_total_count()
    out: dict[str, Any] = {
        "count": n,
        "min": h.get_min_value() if n else None,
        "max": h.get_max_value() if n else None,
        "mean": (sum_us / n if sum_us is not None else h.get_mean_value()) if n else None,
        "percentiles": [
            {
                "p": p,
                "us": h.get_value_at_percentile(p) if n else None,
                "samples": max(n - math.floor(p / 100 * n + 1) + 1, 0) if n else 0,
            }
            for p in PERCENTILES
        ],
    }
    if histogram:
        out["histogram"] = encode(h)
    if spectrum:
        points = [100 * (1 - 10 ** (-k / 10)) for k in range(51)]
        out["spectrum"] = [[p, h.get_value_at_percentile(p)] for p in points] if n else []
    return out


def _class_report(sts: list[ClassStats], duration_s: float, name: str, loop: str) -> dict:
    merged = {k: histogram() for k in HISTOGRAMS}
    for st in sts:
        for k, h in merged.items():
            h.add(getattr(st, k))
    total = {k: sum(getattr(st, k) for st in sts) for k in ClassStats.COUNTERS}
    out: dict[str, Any] = {
        "name": name,
        "loop": loop,
        "connections": sum(st.cls.connections for st in sts),
        "offered": total["offered"],
        "sent": total["sent"],
        "answered": total["answered"],
        "answered_in_window": total["in_window"],
        "duration_us": round(duration_s * 1e6),
        "offered_rps": total["offered"] / duration_s if loop == "open" else None,
        "achieved_rps": total["in_window"] / duration_s,
        "errors": {k: sum(st.errors[k] for st in sts) for k in ERROR_KINDS},
        "latency": _summary(
            merged["latency"], total["latency_sum_us"], spectrum=name == "all", histogram=True
        ),
        "lag": _summary(merged["lag"]),
        "turnaround": _summary(merged["turnaround"]),
        "offered_due": total["offered_due"],
    }
    out["saturated"] = loop == "open" and saturated(
        offered=out["offered_due"], achieved=out["answered_in_window"]
    )
    return out


def report(stats: list[ClassStats], duration_s: float) -> dict:
    """The output document: per class, and all classes merged (``all``; open if every class is)."""
    classes = {st.cls.name: _class_report([st], duration_s, st.cls.name, st.cls.loop) for st in stats}
    loops = {st.cls.loop for st in stats}
    merged = _class_report(stats, duration_s, "all", loops.pop() if len(loops) == 1 else "mixed")
    if merged["loop"] != "open":  # saturated when an open class of it is
        merged["saturated"] = any(c["saturated"] for c in classes.values())
    return {"classes": classes, "all": merged}


def _part(st: ClassStats) -> dict:
    """A class's raw figures, for merging the classes of several processes (histograms encoded)."""
    return {
        "class": asdict(st.cls),
        "errors": st.errors,
        **{k: getattr(st, k) for k in ClassStats.COUNTERS},
        **{k: encode(getattr(st, k)) for k in HISTOGRAMS},
    }


def merge(docs: list[dict], spec: LoadSpec) -> dict:
    """One document from the documents of the processes of one run (one process per class)."""
    from hdrh.histogram import HdrHistogram

    by_name = {}
    for part in (part for d in docs for part in d["parts"]):
        st = ClassStats(ClientClass(**part["class"]))
        st.errors = dict(part["errors"])
        for k in ClassStats.COUNTERS:
            setattr(st, k, part[k])
        for k in HISTOGRAMS:
            getattr(st, k).add(HdrHistogram.decode(part[k]))
        by_name[st.cls.name] = st
    doc = report([by_name[c.name] for c in spec.classes], spec.duration_s)
    doc["processes"] = [p for d in docs for p in d["processes"]]
    return doc


class LoadRunResult(RunCounts):
    """One run of the load client, answering like :class:`tailjob.wrk.WrkResult` for the job.

    ``requests``: answers inside the run's window, all classes; percentiles of all classes merged.
    ``errors`` map the client's ``timeout`` (owed answers missing at the end) and ``mismatch`` (a
    body that is not its request's echo) to wrk's ``timeout`` and ``read``."""

    @classmethod
    def parse(cls, stdout: str) -> LoadRunResult:
        return cls(parse_output(stdout))

    def __init__(self, doc: dict):
        self.doc, merged = doc, doc["all"]
        self.requests, self.duration_us = merged["answered_in_window"], merged["duration_us"]
        self.latency_samples = merged["latency"]["count"]
        e = merged["errors"]
        kinds = ("connect", "read", "write", "status", "timeout")
        self.errors = {k: e[k] + (e["mismatch"] if k == "read" else 0) for k in kinds}

    @property
    def generator_busy(self) -> float:
        """The busiest client process's CPU over its run, as a share of one core."""
        return max((p["busy"] for p in self.doc.get("processes", [])), default=0.0)

    @property
    def saturated(self) -> bool:
        return any(c["saturated"] for c in self.doc["classes"].values())

    def percentile(self, p: float) -> Percentile:
        q = next((q for q in self.doc["all"]["latency"]["percentiles"] if q["p"] == p), None)
        if q is None:
            raise KeyError(f"percentile {p} not recorded")
        return Percentile(**q)

    def class_metrics(self) -> dict[str, dict]:
        """Per class: the compared metrics (``rps`` = achieved) and what the report shows beside them."""
        out = {}
        for name, c in self.doc["classes"].items():
            pct = {q["p"]: q for q in c["latency"]["percentiles"]}
            lag = {q["p"]: q["us"] for q in c["lag"]["percentiles"]}
            turn = {q["p"]: q["us"] for q in c.get("turnaround", {}).get("percentiles", [])}
            out[name] = {
                "rps": c["achieved_rps"],
                **{
                    k: c[k] for k in ("offered_rps", "loop", "connections", "answered", "saturated", "errors")
                },
                "lag_p50": lag[50],
                "lag_p99": lag[99],
                "turnaround_p50": turn.get(50),
                "turnaround_p99": turn.get(99),
                "histogram": c["latency"].get("histogram"),
                **{k: pct[p]["us"] for k, p in LATENCY_KEYS.items()},
                **{f"{k}_samples": pct[p]["samples"] for k, p in LATENCY_KEYS.items()},
            }
        return out

    def as_dict(self) -> dict:
        """The run's record (``RunRecord.wrk``): wrk's keys where they mean the same, plus ``classes``."""
        lat = self.doc["all"]["latency"]
        return {
            "tool": "tailjob.loadgen",
            "requests": self.requests,
            "duration_us": self.duration_us,
            "rps": self.rps,
            "latency_samples": self.latency_samples,
            "latency_us": {k: lat[k] for k in ("min", "max", "mean")},
            "percentiles": lat["percentiles"],
            "spectrum": lat.get("spectrum", []),
            "errors": self.errors,
            "histogram": lat.get("histogram"),
            "classes": self.doc["classes"],
        }


def parse_output(text: str) -> dict:
    """The document of the last ``TAILREACTOR_LOAD`` line; :class:`LoadOutputError` if none is readable."""
    lines = [ln for ln in text.splitlines() if ln.startswith(OUTPUT_PREFIX)]
    if not lines:
        raise LoadOutputError("no TAILREACTOR_LOAD line in the load client's output")
    try:
        return json.loads(lines[-1][len(OUTPUT_PREFIX) :])
    except json.JSONDecodeError as e:
        raise LoadOutputError(f"TAILREACTOR_LOAD line is not valid JSON ({e})") from None
