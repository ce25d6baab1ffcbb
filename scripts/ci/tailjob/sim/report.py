"""The sim tier's report, result document and plot (its history line: :func:`tailjob.history.history_line`).

The report says first that its figures are **virtual time**, then the code, the seeds and every
leg's cost model with where each constant came from; then per leg the live report's tables
(:func:`tailjob.report.comparison_table`), whole run and per client class, and the reactor's
counters.  :func:`result_document` holds no wall-clock time: the same command twice writes the same
bytes.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from .. import history, stats
from ..history import without_out
from ..loadspec import ClientClass
from ..report import (
    CLASS_LABELS,
    class_line,
    comparison_table,
    format_value,
    partial_lines,
    plural,
    verdict_summary,
)
from ..runner import JobResult, LegResult
from ..workloads import Traffic, label
from .measure import SimMeasure, median_counters

HISTORY_FILE = "tail-latency-sim.jsonl"
SCHEMA = 1
"""The result document's (its history line's: :data:`tailjob.history.LINE_SCHEMA`)."""


def seeds_text(seeds) -> str:
    seeds = list(seeds)
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ", ".join(map(str, seeds))


def seeds(job: JobResult, lr: LegResult | None = None) -> list[int]:
    """The seeds of a leg (of the first without ``lr``): trial ``t`` runs with the job's seed plus ``t``."""
    lr = lr or (job.legs[0] if job.legs else None)
    return [] if lr is None else list(range(job.settings.seed, job.settings.seed + lr.leg.runs))


def _table(job: JobResult, comps: list, labels: dict[str, str]) -> list[str]:
    """The live report's comparison table (:func:`tailjob.report.comparison_table`) of ``comps``."""
    return comparison_table(job.arms, comps, lambda c, arm: "", labels=labels)


def _workload(job: JobResult):
    return job.settings.load.workload if job.settings.load is not None else "uniform"


def _load_line(job: JobResult, lr: LegResult) -> str:
    load, w = job.settings.load, _workload(job)
    classes = lr.spec.classes if lr.spec is not None else (ClientClass("all", lr.leg.connections, "closed"),)
    parts = []
    if lr.capacity:
        parts.append(
            f"capacity (closed loop, c{lr.leg.connections}, arm A, {lr.capacity['virtual_s']:g} virtual s): "
            f"**{lr.capacity['rps']:,.0f} req/s**, "
            + (f"rate {load.rate} of it" if load and load.rate else "the classes' relative rates of it")
        )
    parts += [class_line(asdict(c)) for c in classes]
    what = f"traffic `{w}`" if isinstance(w, Traffic) else f"workload `{w}`"
    return f"Load ({float(lr.leg.duration_s):g} virtual s per run, {what}): " + "; ".join(parts) + "."


def _costs_table(lr: LegResult, measure: SimMeasure) -> list[str]:
    lines = ["| Constant | Arm | Virtual us | Where it came from |", "|---|---|---:|---|"]
    models = {k: measure.costs_for(b or "epoll") for k, b in lr.backends().items()}
    for key in ("A", "B"):
        model = models[key]
        if key == "B" and model == models["A"]:
            break
        src = model.sources()
        for name in model.constants:
            lines.append(
                f"| `{name}` | {'A and B' if key == 'A' and model == models['B'] else key} "
                f"({model.backend}) | {getattr(model, name):g} | {src[name]} |"
            )
    return lines


def render(job: JobResult, measure: SimMeasure, *, runs: bool = True) -> str:
    """The report of a sim job; ``runs=False`` leaves out each leg's table of runs."""
    a, b = job.arms
    lines = [
        f"# Tail-latency job in virtual time (`--tier sim`): `--ab {job.ab}`, profile `{job.profile}`",
        "",
        *partial_lines(job),
        "**Virtual time.** Every figure below is simulated: the real `tailreactor.Reactor` and bench "
        "connection code on the real backend, a virtual clock moved by the cost model and the injected "
        "knobs (docs/en/sim-tier.md). It is a function of the code, "
        "the knobs, the workload, the seeds and the cost model: the machine's load does not enter it. "
        "It does not model TCP, kernel scheduling, caches, or the client's own CPU; a closed-loop "
        "client's turnaround is the cost model's `client_us` (`wrk_us` for wrk's loop).",
        "",
        f"- Command: `{history.command(job.argv)}`; started {job.started_at}, finished "
        f"{job.finished_at} (wall clock).",
        f"- Code: commit {job.provenance.get('git_commit', 'unknown')}"
        + (" (dirty)" if job.provenance.get("git_dirty") else "")
        + (
            f"; arm A runs `--a-ref {job.a_ref['ref']}`, commit {job.a_ref['commit']}, arm B the working tree"
            if job.a_ref
            else ""
        )
        + ".",
        f"- Arms: A `{a.label}` ({a.env_text()}), B `{b.label}` ({b.env_text()}).",
        f"- Seeds: {seeds_text(seeds(job))}; arm A and arm B of a pair run with the same seed (common random "
        f"numbers: the same client schedules), and the intervals are over seeds (paired bootstrap, "
        f"{stats.FAMILY_CONFIDENCE:.0%} joint over the leg's metrics, {stats.MIN_PAIRS} pairs at least).",
        "",
    ]
    for lr in job.legs:
        lines += _leg(job, lr, measure, runs)
    return "\n".join(lines)


def _leg(job: JobResult, lr: LegResult, measure: SimMeasure, runs: bool) -> list[str]:
    """One leg's section: its load, cost model, tables and verdicts, counters and (``runs``) its runs."""
    by_arm = {k: lr.measured(k) for k in ("A", "B")}
    n = min(len(by_arm["A"]), len(by_arm["B"]))
    lines = [
        f"## {lr.leg.name}: medians over {plural(n, 'seed')} per arm; p99.9 and beyond pooled over "
        "each arm's seeds",
        "",
        _load_line(job, lr),
        "",
        "Cost model:",
        "",
        *_costs_table(lr, measure),
        "",
        "Whole run (all classes together):",
        "",
        *_table(job, lr.comparisons, {"cpu_us_per_req": "Server virtual CPU us/request"}),
    ]
    lines += ["", "Verdicts: " + verdict_summary(lr.comparisons)]
    errors = {k: sum(r.wrk["server"]["errors"] for r in runs_) for k, runs_ in by_arm.items()}
    if any(errors.values()):
        lines.append(f"Client errors (timeouts, mismatches): A {errors['A']}, B {errors['B']}.")
    sat = {k: sum("saturated" in r.flags for r in rs) for k, rs in by_arm.items()}  # a class saturated
    if any(sat.values()):
        lines.append(
            f"Runs with a class `saturated` (answers over 2 % short of the offered load): "
            f"A {sat['A']}, B {sat['B']} of {n}."
        )
    for name, comps in lr.class_comparisons.items():
        first = (lr.measured()[0].classes or {})[name]  # a partial leg's arm A may have none
        lines += [
            "",
            f"### Class `{name}` ({first['loop']} loop, {first['connections']} connections)",
            "",
            *_table(job, comps, CLASS_LABELS),
        ]
        lines += ["", f"`{name}` verdicts: " + verdict_summary(comps)]
    counters = {k: median_counters(rs) for k, rs in by_arm.items() if rs}
    lines += [
        "",
        "Reactor counters, median over the seeds (rounds, callbacks, elevated by age, harvested): "
        + "; ".join(
            f"{k}: {c['rounds']:,.0f}, {c['dispatched']:,.0f}, {c['tail_elevations']:,.0f}, "
            f"{c['harvested']:,.0f}"
            for k, c in counters.items()
        )
        + ".",
    ]
    if runs:
        lines += ["", *_run_rows(by_arm)]
    return lines + [""]


def _run_rows(by_arm: dict) -> list[str]:
    lines = [
        "| Seed | Arm | Offered | Req/s | p50 ms | p99 ms | p99.9 ms | Virtual CPU us/req |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pair in zip(by_arm["A"], by_arm["B"]):
        for r in pair:
            m = r.metrics
            lines.append(
                f"| {r.wrk['seed']} | {r.arm} | {r.wrk['offered']:,} | {m['rps']:,.0f} | "
                + " | ".join(format_value(k, m[k]) for k in ("p50", "p99", "p99.9", "cpu_us_per_req"))
                + " |"
            )
    return lines


def _by_key(comps) -> dict:
    return {c.metric.key: c.as_dict() for c in comps}


def result_document(job: JobResult, measure: SimMeasure, *, load: str | None) -> dict:
    """Everything the job decided, without wall-clock time or output directory (byte-identical when
    rerun); ``load``: ``--load`` as given."""
    w, plan = _workload(job), job.settings.load
    return {
        "schema": SCHEMA,
        "tier": "sim",
        "virtual_time": True,
        "argv": without_out(job.argv),
        "profile": job.profile,
        "ab": job.ab,
        "arms": {a.key: {"label": a.label, "env": dict(a.env), "env_text": a.env_text()} for a in job.arms},
        "seeds": seeds(job),
        "a_ref": job.a_ref,
        "partial": job.partial,
        "provenance": job.provenance,
        "legs": [
            {
                "name": lr.leg.name,
                "backends": lr.backends(),
                "workload": label(w),
                **({"traffic": w.as_dict()} if isinstance(w, Traffic) else {}),
                "load": load,
                "rate": plan.rate if plan else None,
                "schedule": plan.schedule if plan else "poisson",
                "connections": lr.leg.connections,
                "duration_s": float(lr.leg.duration_s),
                "seeds": seeds(job, lr),
                "env": lr.run_env,
                "costs": {
                    k: {**(m := measure.costs_for(b or "epoll")).as_dict(), "sources": m.sources()}
                    for k, b in lr.backends().items()
                },
                "rate_rps": plan.resolve_rate(lr.capacity["rps"] if lr.capacity else None) if plan else None,
                "capacity_rps": lr.capacity["rps"] if lr.capacity else None,
                "comparisons": _by_key(lr.comparisons),
                "classes": {name: _by_key(c) for name, c in lr.class_comparisons.items()},
                "runs": {k: [_run(r) for r in lr.measured(k)] for k in ("A", "B")},
            }
            for lr in job.legs
        ],
    }


def _run(r) -> dict:
    """A run of the document: its arm, seed, offered requests, figures (classes without histograms)."""
    classes = {name: {k: v for k, v in c.items() if k != "histogram"} for name, c in r.classes.items()}
    return {
        "arm": r.arm,
        "seed": r.wrk["seed"],
        "offered": r.wrk["offered"],
        "metrics": r.metrics,
        "classes": classes,
        "server": r.wrk["server"],
    }


def plot(legs: list[LegResult], stem: Path) -> list[Path]:
    """One figure: per leg, B/A with its interval for every metric (whole run and classes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(legs), figsize=(6 * len(legs), 5), squeeze=False)
    for ax, leg in zip(axes[0], legs):
        rows = [("all " + c.metric.key, c) for c in leg.comparisons]
        rows += [
            (f"{name} {c.metric.key}", c) for name, comps in leg.class_comparisons.items() for c in comps
        ]
        rows = [(label, c) for label, c in rows if c.ratio is not None]
        ys = range(len(rows))
        for y, (_label, c) in zip(ys, rows):
            ratio = c.ratio or 1.0  # every row has one
            lo, hi = c.ci or (ratio, ratio)
            colour = {"gain": "tab:green", "regression": "tab:red", "equivalent": "tab:blue"}.get(
                c.verdict, "grey"
            )
            ax.errorbar([ratio], [y], xerr=[[ratio - lo], [hi - ratio]], fmt="o", color=colour, capsize=3)
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(list(ys), [label for label, _ in rows])
        ax.invert_yaxis()
        ax.set_xlabel("B/A (virtual time), joint 95% interval over seeds")
        ax.set_title(leg.leg.name)
    fig.tight_layout()
    paths = []
    for ext in ("svg", "png"):
        path = stem.parent / f"{stem.name}.{ext}"
        fig.savefig(path, metadata={"Date": None} if ext == "svg" else None)
        paths.append(path)
    plt.close(fig)
    return paths
