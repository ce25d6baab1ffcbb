"""``calibrate K``: what the verdicts are worth on this machine, measured (docs/en/statistics.md,
"Calibration").

On every leg of the plan, K rounds of three ordinary A/B legs: ``aa`` (identical arms), ``slow10`` and
``slow25`` (B busy-waits ``CWIST_BENCH_DELAY_US`` of about 10 % and 25 % of the server's CPU per
request, from the first A/A leg: :func:`delays_for`).  :func:`summarize` counts per metric the false
calls of the A/A legs, their median detectable effect, and the slowdowns detected (or called the wrong
way); :func:`render_table` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from . import stats
from .plan import AB_PRESETS, Arm, Leg
from .runner import LegResult, Settings, run_job
from .stats import Comparison, median

SLOWDOWNS = {"slow10": 0.10, "slow25": 0.25}
"""Injected slowdowns, as a share of the measured server CPU per request."""
KINDS = ("aa", *SLOWDOWNS)


@dataclass(frozen=True)
class CalibrationLeg:
    """One leg of a calibration: its ``kind`` (:data:`KINDS`), ``round`` (0..K-1), the ``backend``
    (the leg's name), the injected ``delay_us`` (None for A/A) and the leg's comparisons."""

    kind: str
    round: int
    backend: str
    delay_us: int | None
    comparisons: list[Comparison]
    result: LegResult | None = None

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "round": self.round,
            "backend": self.backend,
            "delay_us": self.delay_us,
            "comparisons": [c.as_dict() for c in self.comparisons],
            "leg": self.result.as_dict() if self.result else None,
        }


def delays_for(cpu_us_per_req: float) -> dict[str, int]:
    """``CWIST_BENCH_DELAY_US`` per slowdown for a server spending ``cpu_us_per_req`` per request."""
    if not cpu_us_per_req > 0:
        raise ValueError(f"CPU per request {cpu_us_per_req!r} us: a slowdown needs a positive baseline")
    return {kind: max(1, round(share * cpu_us_per_req)) for kind, share in SLOWDOWNS.items()}


@dataclass
class CalibrationRow:
    """The calibration figures of one metric on one backend (see the module docstring)."""

    backend: str
    metric: stats.Metric
    aa_legs: int = 0
    false_calls: int = 0
    aa_equivalent: int = 0
    aa_inconclusive: int = 0
    median_detectable: float | None = None
    slow_legs: dict = field(default_factory=dict)
    detected: dict = field(default_factory=dict)
    wrong_way: dict = field(default_factory=dict)
    delays: dict = field(default_factory=dict)
    cpu_ratio: dict = field(default_factory=dict)


def summarize(legs: list[CalibrationLeg]) -> list[CalibrationRow]:
    """One :class:`CalibrationRow` per backend and metric, backends in first-seen order."""
    rows = []
    for backend in dict.fromkeys(leg.backend for leg in legs):
        mine = [leg for leg in legs if leg.backend == backend]
        for i, m in enumerate(stats.METRICS):
            row = CalibrationRow(backend, m)
            aa = [leg.comparisons[i] for leg in mine if leg.kind == "aa"]
            row.aa_legs = len(aa)
            row.false_calls = sum(c.verdict in (stats.GAIN, stats.REGRESSION) for c in aa)
            row.aa_equivalent = sum(c.verdict == stats.EQUIVALENT for c in aa)
            row.aa_inconclusive = sum(c.verdict == stats.INCONCLUSIVE for c in aa)
            detectable = [c.detectable for c in aa if c.detectable is not None]
            row.median_detectable = median(detectable) if detectable else None
            for kind in SLOWDOWNS:
                slow = [leg for leg in mine if leg.kind == kind]
                row.slow_legs[kind] = len(slow)
                row.detected[kind] = sum(leg.comparisons[i].verdict == stats.REGRESSION for leg in slow)
                row.wrong_way[kind] = sum(leg.comparisons[i].verdict == stats.GAIN for leg in slow)
                row.delays[kind] = sorted({leg.delay_us for leg in slow if leg.delay_us is not None})
                cpu = [
                    c.ratio
                    for leg in slow
                    for c in leg.comparisons
                    if c.metric.key == "cpu_us_per_req" and c.ratio is not None
                ]
                row.cpu_ratio[kind] = median(cpu) if cpu else None
            rows.append(row)
    return rows


def _of(n: int, k: int) -> str:
    return f"{n}/{k}"


def render_table(legs: list[CalibrationLeg], *, profile: str, k: int, wrk: str) -> str:
    """The calibration as Markdown: what ran, then one row per backend and metric."""
    rows = summarize(legs)
    lines = [
        f"Calibration: K = {k} rounds, profile `{profile}` (`wrk {wrk}`); each round is an A/A leg, "
        "then a leg with about +10% and one with about +25% server CPU per request injected in B.",
        "",
    ]
    for backend in dict.fromkeys(r.backend for r in rows):
        r = next(x for x in rows if x.backend == backend)
        parts = []
        for kind, share in SLOWDOWNS.items():
            delays = ", ".join(f"CWIST_BENCH_DELAY_US={d}" for d in r.delays[kind]) or "not run"
            cpu = r.cpu_ratio[kind]
            parts.append(f"+{share:.0%}: {delays}" + (f" (CPU/request B/A {cpu:.3f}, median)" if cpu else ""))
        lines.append(f"- {backend}: " + "; ".join(parts) + ".")
    lines += [
        "",
        "| Backend | Metric | Min. effect | A/A: false gain/regression | A/A: equivalent "
        "| A/A: median detectable | +10%: detected | +25%: detected |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        det = "-" if r.median_detectable is None else f"±{r.median_detectable:.1%}"
        slow = []
        for kind in SLOWDOWNS:
            cell = _of(r.detected[kind], r.slow_legs[kind])
            if r.wrong_way[kind]:
                cell += f" ({r.wrong_way[kind]} gain)"
            slow.append(cell)
        lines.append(
            f"| {r.backend} | {r.metric.label} | {r.metric.min_effect:.0%} "
            f"| {_of(r.false_calls, r.aa_legs)} | {_of(r.aa_equivalent, r.aa_legs)} | {det} "
            f"| {slow[0]} | {slow[1]} |"
        )
    lines += [
        "",
        "Detected: the slowdown leg called that metric a `regression`; (n gain): called the wrong "
        "way. A/A: every `gain` or `regression` is false; the rest are `equivalent`, `inconclusive` "
        "or `n/a`.",
    ]
    return "\n".join(lines) + "\n"


def _baseline_cpu(lr: LegResult) -> float:
    values = [r.metrics["cpu_us_per_req"] for r in lr.measured() if r.metrics.get("cpu_us_per_req")]
    if not values:
        raise ValueError(f"{lr.leg.name}: the A/A leg measured no CPU per request")
    return median(values)


def run_calibration(
    legs: list[Leg], k: int, settings: Settings, *, ambient: Mapping[str, str], progress=None
) -> list[CalibrationLeg]:
    """Run K rounds over ``legs`` (A/A, +10 %, +25 % per leg and round); see the module docstring.

    Each leg's seed is ``settings.seed + 1000 * round + kind index``, so every
    leg has its own schedule and bootstrap draws.
    """
    out: list[CalibrationLeg] = []
    delays: dict[int, dict[str, int]] = {}
    for rnd in range(k):
        for leg in legs:
            for j, kind in enumerate(KINDS):
                if kind == "aa":
                    arms, delay = AB_PRESETS["aa"], None
                else:
                    delay = delays[leg.index][kind]
                    arms = (
                        Arm("A", "A", {}),
                        Arm("B", f"+{SLOWDOWNS[kind]:.0%} CPU/request", {"CWIST_BENCH_DELAY_US": str(delay)}),
                    )
                s = replace(settings, seed=settings.seed + 1000 * rnd + j)
                [lr] = run_job([leg], arms, s, ambient=ambient, progress=progress)
                if kind == "aa" and leg.index not in delays:
                    delays[leg.index] = delays_for(_baseline_cpu(lr))
                out.append(CalibrationLeg(kind, rnd, leg.name, delay, lr.comparisons, lr))
    return out
