"""The sim tier's outputs: the Markdown report, the result document, the history line, the plot.

The report says first that its figures are **virtual time**, then the code
(commit), the seeds (arm A and arm B of a pair share one), and every leg's
cost model with where each constant came from; then, per leg, the table of
the whole run and one per client class, in the live report's shape (medians
per arm over the seeds, B/A, joint interval, minimum effect, detectable
effect, pairs needed, verdict).  :func:`result_document` holds no wall-clock
time, so the same command twice writes the same document byte for byte; the
report and the history line carry when the job ran.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from .. import history, stats
from ..history import without_out
from ..outputs import dumps, write_atomic
from ..report import (
    CLASS_LABELS,
    class_line,
    comparison_table,
    format_value,
    gate_tables,
    plural,
    verdict_summary,
)
from ..workloads import Traffic, label

HISTORY_FILE = "tail-latency-sim.jsonl"
SCHEMA = 1
"""The result document's (its history line's: :data:`tailjob.history.LINE_SCHEMA`)."""


def seeds_text(seeds) -> str:
    seeds = list(seeds)
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ", ".join(map(str, seeds))


def leg_name(leg) -> str:
    p = leg.plan
    a, b = p.backend_for("A"), p.backend_for("B")
    who = a if a == b else f"{a} (A) vs {b} (B)"
    return f"{who}, c{p.connections}"


def _table(job: dict, comps: dict, labels: dict[str, str]) -> list[str]:
    """The live report's comparison table (:func:`tailjob.report.comparison_table`) of ``comps``."""
    arms = [SimpleNamespace(label=job["arms"][k]["label"]) for k in ("A", "B")]
    return comparison_table(arms, list(comps.values()), lambda c, arm: "", labels=labels)


def _load_line(leg) -> str:
    p = leg.plan
    from .job import load_spec

    spec = load_spec(p, p.seeds[0], leg.rate_rps, leg.capacity_rps)
    parts = []
    if leg.capacity_rps:
        parts.append(
            f"capacity (closed loop, c{p.connections}, arm A, 0.5 virtual s): "
            f"**{leg.capacity_rps:,.0f} req/s**, "
            + (f"rate {p.rate} of it" if p.rate else "the classes' relative rates of it")
        )
    parts += [class_line(asdict(c)) for c in spec.classes]
    what = f"traffic `{p.workload}`" if isinstance(p.workload, Traffic) else f"workload `{p.workload}`"
    return f"Load ({p.duration_s:g} virtual s per run, {what}): " + "; ".join(parts) + "."


def _costs_table(leg) -> list[str]:
    lines = ["| Constant | Arm | Virtual us | Where it came from |", "|---|---|---:|---|"]
    for key in ("A", "B"):
        model = leg.plan.costs_for(key)
        if key == "B" and model == leg.plan.costs_for("A"):
            break
        src = model.sources()
        for name in model.constants:
            lines.append(
                f"| `{name}` | {'A and B' if key == 'A' and model == leg.plan.costs_for('B') else key} "
                f"({model.backend}) | {getattr(model, name):g} | {src[name]} |"
            )
    return lines


def render(job: dict, legs, *, runs: bool = True) -> str:
    """The report of a sim job (``job``: the document's header fields; ``legs``: LegResults)."""
    a, b = job["arms"]["A"], job["arms"]["B"]
    lines = [
        f"# Tail-latency job in virtual time (`--tier sim`): `--ab {job['ab']}`, profile `{job['profile']}`",
        "",
        "**Virtual time.** Every figure below is simulated: the real `tailreactor.Reactor` and bench "
        "connection code on the real backend, a virtual clock moved by the cost model and the injected "
        "knobs (docs/en/sim-tier.md). It is a function of the code, "
        "the knobs, the workload, the seeds and the cost model: the machine's load does not enter it. "
        "It does not model TCP, kernel scheduling, caches, or the client's own CPU; a closed-loop "
        "client's turnaround is the cost model's `client_us` (`wrk_us` for wrk's loop).",
        "",
        f"- Command: `scripts/tail-latency.sh {' '.join(job['argv'])}`"
        + (
            f"; started {job['started_at']}, finished {job['finished_at']} (wall clock)"
            if job.get("started_at")
            else ""
        )
        + ".",
        f"- Code: commit {job['provenance'].get('git_commit', 'unknown')}"
        + (" (dirty)" if job["provenance"].get("git_dirty") else "")
        + (
            f"; arm A runs `--a-ref {job['a_ref']['ref']}`, commit {job['a_ref']['commit']}, arm B the working "
            "tree"
            if job.get("a_ref")
            else ""
        )
        + ".",
        f"- Arms: A `{a['label']}` ({a['env_text']}), B `{b['label']}` ({b['env_text']}).",
        f"- Seeds: {seeds_text(job['seeds'])}; arm A and arm B of a pair run with the same seed (common random "
        f"numbers: the same client schedules), and the intervals are over seeds (paired bootstrap, "
        f"{stats.FAMILY_CONFIDENCE:.0%} joint over the leg's metrics, {stats.MIN_PAIRS} pairs at least).",
        "",
    ]
    for leg in legs:
        lines += _leg(job, leg, runs)
    return "\n".join(lines)


def _leg(job: dict, leg, runs: bool) -> list[str]:
    """One leg's section: its load, cost model, tables and verdicts, counters and (``runs``) its runs."""
    n = min(len(leg.runs["A"]), len(leg.runs["B"]))
    lines = [
        f"## {leg_name(leg)}: medians over {plural(n, 'seed')} per arm; p99.9 and beyond pooled over "
        "each arm's seeds",
        "",
        _load_line(leg),
        "",
        "Cost model:",
        "",
        *_costs_table(leg),
        "",
        "Whole run (all classes together):",
        "",
        *_table(job, leg.comparisons, {"cpu_us_per_req": "Server virtual CPU us/request"}),
    ]
    lines += ["", "Verdicts: " + verdict_summary(list(leg.comparisons.values()))]
    errors = {k: sum(r.server["errors"] for r in leg.runs[k]) for k in ("A", "B")}
    if any(errors.values()):
        lines.append(f"Client errors (timeouts, mismatches): A {errors['A']}, B {errors['B']}.")
    sat = {k: sum(any(c["saturated"] for c in r.classes.values()) for r in leg.runs[k]) for k in ("A", "B")}
    if any(sat.values()):
        lines.append(
            f"Runs with a class `saturated` (answers over 2 % short of the offered load): "
            f"A {sat['A']}, B {sat['B']} of {n}."
        )
    for name, comps in leg.class_comparisons.items():
        first = leg.runs["A"][0].classes[name]
        lines += [
            "",
            f"### Class `{name}` ({first['loop']} loop, {first['connections']} connections)",
            "",
            *_table(job, comps, CLASS_LABELS),
        ]
        lines += ["", f"`{name}` verdicts: " + verdict_summary(list(comps.values()))]
    counters = {k: _median_counters(leg.runs[k]) for k in ("A", "B")}
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
        lines += ["", *_run_rows(leg)]
    return lines + [""]


def _run_rows(leg) -> list[str]:
    lines = [
        "| Seed | Arm | Offered | Req/s | p50 ms | p99 ms | p99.9 ms | Virtual CPU us/req |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for ra, rb in zip(leg.runs["A"], leg.runs["B"]):
        for r in (ra, rb):
            m = r.metrics
            lines.append(
                f"| {r.seed} | {r.arm} | {r.offered:,} | {m['rps']:,.0f} | "
                f"{format_value('p50', m['p50'])} | {format_value('p99', m['p99'])} | "
                f"{format_value('p99.9', m['p99.9'])} | "
                f"{format_value('cpu_us_per_req', m['cpu_us_per_req'])} |"
            )
    return lines


def _median_counters(runs) -> dict:
    keys = ("rounds", "dispatched", "tail_elevations", "harvested")
    return {k: stats.median([r.server["counters"][k] for r in runs]) for k in keys}


def _comparisons_dict(comps) -> dict:
    return {key: c.as_dict() for key, c in comps.items()}


def result_document(job: dict, legs) -> dict:
    """Everything the job decided, without wall-clock time or output directory (byte-identical when
    rerun)."""
    out = {
        "schema": SCHEMA,
        "tier": "sim",
        "virtual_time": True,
        **{k: v for k, v in job.items() if k not in ("started_at", "finished_at")},
        "legs": [],
    }
    out["argv"] = without_out(job["argv"])
    for leg in legs:
        p = leg.plan
        out["legs"].append(
            {
                "name": leg_name(leg),
                "backends": {"A": p.backend_for("A"), "B": p.backend_for("B")},
                "workload": label(p.workload),
                **({"traffic": p.workload.as_dict()} if isinstance(p.workload, Traffic) else {}),
                "load": p.load,
                "rate": p.rate,
                "schedule": p.schedule,
                "connections": p.connections,
                "duration_s": p.duration_s,
                "seeds": list(p.seeds),
                "env": {"A": p.arm_env("A"), "B": p.arm_env("B")},
                "costs": {
                    k: {**p.costs_for(k).as_dict(), "sources": p.costs_for(k).sources()} for k in ("A", "B")
                },
                "rate_rps": leg.rate_rps,
                "capacity_rps": leg.capacity_rps,
                "comparisons": _comparisons_dict(leg.comparisons),
                "classes": {name: _comparisons_dict(c) for name, c in leg.class_comparisons.items()},
                "runs": {k: [r.as_dict() for r in leg.runs[k]] for k in ("A", "B")},
            }
        )
    return out


def history_line(job: dict, legs, *, result_file: str) -> dict:
    """One line of ``tail-latency-sim.jsonl`` (:func:`tailjob.history.line`): every verdict, per class too."""
    return history.line(
        "ab",
        "sim",
        job,
        result=result_file,
        profile=job["profile"],
        ab=job["ab"],
        arms=job["arms"],
        seeds=job["seeds"],
        legs=[
            {
                "name": leg_name(leg),
                "workload": label(leg.plan.workload),
                **history.verdicts(leg.comparisons.values()),
                "classes": {n: history.verdicts(c.values()) for n, c in leg.class_comparisons.items()},
            }
            for leg in legs
        ],
        regression=bool(gate(legs)[0]),
    )


def gate(legs) -> tuple[int, list[str]]:
    """``--gate``'s code and lines, as the live job's (:func:`tailjob.report.gate_tables`)."""
    tables = [
        (where, list(comps.values()))
        for leg in legs
        for where, comps in (
            (leg_name(leg), leg.comparisons),
            *((f"{leg_name(leg)}, class {n}", cs) for n, cs in leg.class_comparisons.items()),
        )
    ]
    return gate_tables(tables, tier=" in virtual time")


def plot(legs, stem: Path) -> list[Path]:
    """One figure: per leg, B/A with its interval for every metric (whole run and classes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(legs), figsize=(6 * len(legs), 5), squeeze=False)
    for ax, leg in zip(axes[0], legs):
        rows = [("all " + c.metric.key, c) for c in leg.comparisons.values()]
        rows += [
            (f"{name} {c.metric.key}", c)
            for name, comps in leg.class_comparisons.items()
            for c in comps.values()
        ]
        rows = [(label, c) for label, c in rows if c.ratio is not None]
        ys = range(len(rows))
        for y, (_label, c) in zip(ys, rows):
            lo, hi = c.ci if c.ci else (c.ratio, c.ratio)
            colour = {"gain": "tab:green", "regression": "tab:red", "equivalent": "tab:blue"}.get(
                c.verdict, "grey"
            )
            ax.errorbar(
                [c.ratio], [y], xerr=[[c.ratio - lo], [hi - c.ratio]], fmt="o", color=colour, capsize=3
            )
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(list(ys), [label for label, _ in rows])
        ax.invert_yaxis()
        ax.set_xlabel("B/A (virtual time), joint 95% interval over seeds")
        ax.set_title(leg_name(leg))
    fig.tight_layout()
    paths = []
    for ext in ("svg", "png"):
        path = stem.parent / f"{stem.name}.{ext}"
        fig.savefig(path, metadata={"Date": None} if ext == "svg" else None)
        paths.append(path)
    plt.close(fig)
    return paths


def write_json(doc: dict, path: Path) -> Path:
    return write_atomic(path, dumps(doc))
