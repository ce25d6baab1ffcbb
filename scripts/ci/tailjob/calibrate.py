"""``calibrate K``: what the verdicts are worth on this machine, measured (docs/en/statistics.md,
"Calibration").

K rounds, on every leg of the plan, of three A/B legs, each the one trial loop and comparison
(:func:`tailjob.runner.run_trials`: :class:`~tailjob.runner.ABDesign`, :func:`tailjob.runner.decide`) with
preset arms: ``aa`` (identical arms), ``slow10`` and ``slow25`` (B busy-waits ``CWIST_BENCH_DELAY_US``
of about 10 % and 25 % of the server's CPU per request, measured on the leg's first A/A leg:
:func:`delays_for`).  :func:`render_table` counts per metric the A/A legs' false calls and median
detectable effect, and the slowdowns detected (or called the wrong way).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from . import stats
from .plan import AB_PRESETS, Arm, Leg
from .runner import ABDesign, LegResult, Settings, run_trials
from .stats import EQUIVALENT, GAIN, NO_VERDICT, REGRESSION, Comparison, median

SLOWDOWNS = {"slow10": 0.10, "slow25": 0.25}
"""Injected slowdowns, as a share of the measured server CPU per request."""
KINDS = ("aa", *SLOWDOWNS)
PARTIAL = (
    "This table holds the legs that ran: a leg cut short is counted on its trials whose two arms both "
    f"finished, as any leg (fewer than {stats.MIN_PAIRS} pairs: `n/a`); a leg not reached is not here, "
    "so the counts are of fewer rounds than asked."
)
"""What the report of a calibration stopped early holds (after its ``**Partial: ...**``)."""


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

    @property
    def runs(self) -> list:
        return self.result.runs if self.result else []

    def as_dict(self) -> dict:
        head = {k: getattr(self, k) for k in ("kind", "round", "backend", "delay_us")}
        comparisons = [c.as_dict() for c in self.comparisons]
        return {**head, "comparisons": comparisons, "leg": self.result.as_dict() if self.result else None}


def delays_for(cpu_us_per_req: float) -> dict[str, int]:
    """``CWIST_BENCH_DELAY_US`` per slowdown for a server spending ``cpu_us_per_req`` per request."""
    if not cpu_us_per_req > 0:
        raise ValueError(f"CPU per request {cpu_us_per_req!r} us: a slowdown needs a positive baseline")
    return {kind: max(1, round(share * cpu_us_per_req)) for kind, share in SLOWDOWNS.items()}


def _arms(kind: str, delay: int | None) -> tuple[Arm, Arm]:
    if delay is None:
        return AB_PRESETS["aa"]
    return Arm("A", "A", {}), Arm(
        "B", f"+{SLOWDOWNS[kind]:.0%} CPU/request", {"CWIST_BENCH_DELAY_US": str(delay)}
    )


def run_calibration(
    legs: list[Leg], k: int, settings: Settings, *, ambient: Mapping[str, str], progress=None, into=None
) -> list[CalibrationLeg]:
    """Run K rounds over ``legs`` (A/A, +10 %, +25 % per leg and round; see the module docstring).
    Each leg's seed is ``settings.seed + 1000 * round + kind index``: its own schedule and draws.
    ``into``: the caller's list, which gets each leg as it ends, and the leg a failed run or a signal
    stopped, decided on the runs it finished (:func:`tailjob.runner.run_trials`)."""
    out: list[CalibrationLeg] = [] if into is None else into
    delays: dict[int, dict[str, int]] = {}  # per leg of the plan, from its first A/A leg
    for rnd in range(k):
        for leg in legs:
            for j, kind in enumerate(KINDS):
                delay = None if kind == "aa" else delays[leg.index][kind]
                s = replace(settings, seed=settings.seed + 1000 * rnd + j)
                ran: list[LegResult] = []
                try:
                    run_trials(
                        [leg], ABDesign(_arms(kind, delay), s, ambient), s, progress=progress, into=ran
                    )
                finally:
                    if ran and ran[0].runs:
                        out.append(CalibrationLeg(kind, rnd, leg.name, delay, ran[0].comparisons, ran[0]))
                if leg.index not in delays:
                    cpu = [
                        r.metrics["cpu_us_per_req"]
                        for r in ran[0].measured()
                        if r.metrics.get("cpu_us_per_req")
                    ]
                    if not cpu:
                        raise ValueError(f"{leg.name}: the A/A leg measured no CPU per request")
                    delays[leg.index] = delays_for(median(cpu))
    return out


def planned(legs: list[Leg], k: int) -> list[Leg]:
    """The legs :func:`run_calibration` runs, in its order, named by round and kind."""
    return [
        replace(leg, label=f"round {rnd + 1}: {leg.name}, {kind}")
        for rnd in range(k)
        for leg in legs
        for kind in KINDS
    ]


def _row(backend: str, m: stats.Metric, legs: list[CalibrationLeg]) -> str:
    """Metric ``m``'s row: the A/A legs' false calls, equivalents and median detectable effect, then
    per slowdown the legs that called it a regression (and a gain: the wrong way)."""
    verdicts: dict[str, list[str]] = {kind: [] for kind in KINDS}
    detectable = []
    for leg in legs:
        c = next(c for c in leg.comparisons if c.metric.key == m.key)
        verdicts[leg.kind].append(c.verdict)
        if leg.kind == "aa" and c.detectable is not None:
            detectable.append(c.detectable)
    aa = verdicts["aa"]
    cells = [
        f"{sum(v in (GAIN, REGRESSION) for v in aa)}/{len(aa)}",
        f"{aa.count(EQUIVALENT)}/{len(aa)}",
        f"±{median(detectable):.1%}" if detectable else "-",
    ]
    for kind in SLOWDOWNS:
        v = verdicts[kind]
        cells.append(f"{v.count(REGRESSION)}/{len(v)}" + (f" ({v.count(GAIN)} gain)" if GAIN in v else ""))
    return f"| {backend} | {m.label} | {m.min_effect:.0%} | " + " | ".join(cells) + " |"


def render_table(legs: list[CalibrationLeg], *, profile: str, k: int, wrk: str) -> str:
    """The calibration as Markdown: what ran, then one row per backend and metric."""
    lines = [
        f"Calibration: K = {k} rounds, profile `{profile}` (`wrk {wrk}`); each round is an A/A leg, "
        "then a leg with about +10% and one with about +25% server CPU per request injected in B.",
        "",
    ]
    by_backend = {
        b: [leg for leg in legs if leg.backend == b] for b in dict.fromkeys(leg.backend for leg in legs)
    }
    for backend, mine in by_backend.items():
        parts = []
        for kind, share in SLOWDOWNS.items():
            slow = [leg for leg in mine if leg.kind == kind]
            delays = sorted({leg.delay_us for leg in slow if leg.delay_us is not None})
            cpu = [
                c.ratio
                for leg in slow
                for c in leg.comparisons
                if c.metric.key == "cpu_us_per_req" and c.ratio is not None
            ]
            parts.append(
                f"+{share:.0%}: "
                + (", ".join(f"CWIST_BENCH_DELAY_US={d}" for d in delays) or "not run")
                + (f" (CPU/request B/A {median(cpu):.3f}, median)" if cpu else "")
            )
        lines.append(f"- {backend}: " + "; ".join(parts) + ".")
    every = [c for leg in legs for c in leg.comparisons]
    if every and all(c.verdict == NO_VERDICT for c in every):  # e.g. --runs below stats.MIN_PAIRS
        pairs = min(c.n_pairs for c in every)
        why = (
            f" ({pairs} paired runs per leg; a verdict needs {stats.MIN_PAIRS}: --runs "
            f"{stats.MIN_PAIRS} or more)"
            if pairs < stats.MIN_PAIRS
            else ""
        )
        lines += [
            "",
            f"No verdict was possible: every leg's verdicts are n/a{why}, so the counts below say nothing.",
        ]
    lines += [
        "",
        "| Backend | Metric | Min. effect | A/A: false gain/regression | A/A: equivalent "
        "| A/A: median detectable | +10%: detected | +25%: detected |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *(_row(backend, m, mine) for backend, mine in by_backend.items() for m in stats.METRICS),
        "",
        "Detected: the slowdown leg called that metric a `regression`; (n gain): called the wrong "
        "way. A/A: every `gain` or `regression` is false; the rest are `equivalent`, `inconclusive` "
        "or `n/a`.",
    ]
    return "\n".join(lines) + "\n"
