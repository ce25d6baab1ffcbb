"""The main job's answer: ``scripts/tail-latency.sh`` with no options runs the sim tier beside the live job.

The live job on a shared machine mostly ends ``inconclusive``; on its own that tells a newcomer
nothing.  So the job as the README runs it also runs ``--tier sim`` for the same workload and arms,
and ends with one table: per backend and metric, what the sim tier decides (B/A and verdict, in
virtual time), what the live run found, the live run's detectable effect, and the effect it would
have to resolve -- the sim's (|B/A - 1|) where the sim calls a ``gain`` or ``regression``, else the
metric's minimum effect -- with about how many live pairs that would take (the interval's width
falls as one over the square root of the pairs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..plan import AbOptions
from ..stats import GAIN, REGRESSION, Comparison

__all__ = ["Row", "rows", "render", "beside_live", "ANSWER_DURATION_S"]

ANSWER_DURATION_S = 1
"""Virtual seconds per simulated run of the main job's answer."""


@dataclass(frozen=True)
class Row:
    backend: str
    metric: str
    sim_ratio: float | None
    sim_verdict: str
    live_ratio: float | None
    live_verdict: str | None
    live_detectable: float | None
    target: float
    live_pairs_needed: int | None


def rows(sim: dict[str, list[Comparison]], live: dict[str, list[Comparison]]) -> list[Row]:
    """One row per backend of ``sim`` and metric it compared; ``live``: the live legs' comparisons by
    backend (a backend the live job did not run gets no live figures)."""
    out = []
    for backend, comps in sim.items():
        by_key = {c.metric.key: c for c in live.get(backend, [])}
        for s in comps:
            lc = by_key.get(s.metric.key)
            called = s.ratio if s.verdict in (GAIN, REGRESSION) else None  # the ratio of a called verdict
            target = (
                round(abs(called - 1), 6) if called is not None else s.min_effect
            )  # a ratio's 3 digits, not its float noise
            needed = None
            if lc is not None and lc.detectable and target > 0:
                needed = math.ceil(lc.n_pairs * (lc.detectable / target) ** 2)
            out.append(
                Row(
                    backend,
                    s.metric.label,
                    s.ratio,
                    s.verdict,
                    lc.ratio if lc else None,
                    lc.verdict if lc else None,
                    lc.detectable if lc else None,
                    target,
                    needed,
                )
            )
    return out


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.3f}"


def render(table: list[Row]) -> str:
    lines = [
        "The answer: the sim tier (virtual time) beside the live run, same workload and arms",
        "",
        "| Backend | Metric | Sim B/A | Sim verdict | Live B/A | Live verdict | Live detectable "
        "| Effect to resolve | Live pairs for it |",
        "|---|---|---:|---|---:|---|---:|---:|---:|",
    ]
    for r in table:
        det = "-" if r.live_detectable is None else f"±{r.live_detectable:.1%}"
        need = "-" if r.live_pairs_needed is None else f"{r.live_pairs_needed:,}"
        lines.append(
            f"| {r.backend} | {r.metric} | {_ratio(r.sim_ratio)} | {r.sim_verdict} | {_ratio(r.live_ratio)} "
            f"| {r.live_verdict or '-'} | {det} | {r.target:.1%} | {need} |"
        )
    lines += [
        "",
        "Effect to resolve: the sim's |B/A - 1| where it calls a gain or regression, else the "
        "metric's minimum effect; live pairs for it: about how many pairs the live run would need for "
        "its interval to be that narrow at this run's noise.",
    ]
    return "\n".join(lines)


def beside_live(live: AbOptions, live_legs, code: int) -> int:
    """Run the live A/B ``live`` again in virtual time (its files under the same ``--out``), then print
    the answer.  Returns the live job's exit code, or the sim tier's when that failed (2, 3)."""
    from .cli import main_sim

    # One virtual second per run (the live runs' 2 s hold the same rate): the answer stays within about
    # two minutes beside the live job on a 2-core machine.
    sim = replace(live, tier="sim", duration=ANSWER_DURATION_S)
    sim = replace(sim, argv=tuple(sim.command()))
    print("\nThe same A/B in virtual time (--tier sim):\n", flush=True)
    done: dict = {}
    sim_code = main_sim(sim, collect=done)
    if sim_code >= 2:
        return code or sim_code
    live_by = {lr.leg.backend: lr.comparisons for lr in live_legs if lr.leg.backend}
    sim_by = {lr.leg.backend_for("A"): lr.comparisons for lr in done["legs"]}
    print("\n" + render(rows(sim_by, live_by)))
    return code
