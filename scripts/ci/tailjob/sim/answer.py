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
from ..runner import LegResult
from ..stats import GAIN, REGRESSION, Comparison

__all__ = ["Row", "pair", "rows", "render", "beside_live", "ANSWER_DURATION_S"]

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


WHOLE_RUN = None
"""The scope of a leg's whole run (a class's is its name)."""


def _key(lr: LegResult) -> tuple:
    return lr.leg.connections, lr.leg.backend_for("A"), lr.leg.backend_for("B")


def _tables(lr: LegResult) -> dict[str | None, list[Comparison]]:
    """A leg's comparisons by scope; a single class's table repeats the whole run's: left out."""
    classes: dict = lr.class_comparisons if len(lr.class_comparisons) > 1 else {}
    return {WHOLE_RUN: lr.comparisons, **classes}


def pair(live: list[LegResult], sim: list[LegResult]) -> list[tuple]:
    """One A/B's two tiers side by side: per sim leg, scope (:data:`WHOLE_RUN` or a class) and metric,
    ``(live leg, sim leg, scope, live comparison, sim comparison)``; the live leg is the first of the
    same connections and backends (``auto`` or None matches any), None (and its comparison) if none."""
    left, out = list(live), []
    for s in sim:
        like = (lv for lv in left if all(x in (None, "auto") or x == y for x, y in zip(_key(lv), _key(s))))
        lv = next(like, None)
        live_tables = {} if lv is None else _tables(lv)
        left = [x for x in left if x is not lv]
        for scope, comps in _tables(s).items():
            by_key = {c.metric.key: c for c in live_tables.get(scope, ())}
            out += [(lv, s, scope, by_key.get(c.metric.key), c) for c in comps]
    return out


def rows(pairs: list[tuple]) -> list[Row]:
    """One row per sim leg and metric of its whole run (:func:`pair`'s pairs); a backend the live job
    did not run gets no live figures."""
    out = []
    for _, sim_leg, scope, lc, s in pairs:
        if scope is not WHOLE_RUN:
            continue
        called = s.ratio if s.verdict in (GAIN, REGRESSION) else None  # the ratio of a called verdict
        target = s.min_effect if called is None else round(abs(called - 1), 6)  # 3 digits, not float noise
        needed = None
        if lc is not None and lc.detectable and target > 0:
            needed = math.ceil(lc.n_pairs * (lc.detectable / target) ** 2)
        live: tuple[float | None, str | None, float | None] = (
            (lc.ratio, lc.verdict, lc.detectable) if lc else (None, None, None)
        )
        out.append(
            Row(str(sim_leg.leg.backend_for("A")), s.metric.label, s.ratio, s.verdict, *live, target, needed)
        )
    return out


def ratio_text(r: float | None) -> str:
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
            f"| {r.backend} | {r.metric} | {ratio_text(r.sim_ratio)} | {r.sim_verdict} | {ratio_text(r.live_ratio)} "
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
    print("\n" + render(rows(pair(live_legs, done["legs"]))))
    return code
