"""The sweep's outputs and command line (``sweep``): report, result JSON, heat maps, history line.

:func:`main_sweep` checks the grid before anything runs, runs the sweep, then writes (each file whole,
:mod:`tailjob.outputs`) ``<out>/results/<stem>.md`` (the report), ``<stem>.json``
(:func:`tailjob.sim.sweep.result_document`: no wall-clock time), ``<stem>-<workload>.svg`` and
``.png`` (a heat map per class and percentile of :data:`HEAT_METRICS`: colour the verdict, text the
ratio) and a line of ``<out>/tail-latency-sweep.jsonl``; ``<stem>`` is ``<start>-<grid>-sweep``.
"""

from __future__ import annotations

import io
import os
import time
from collections import Counter
from pathlib import Path

from .. import REPO, history, outputs
from .. import fail as _error
from ..metrics import ci_text, format_value
from ..plan import Unavailable
from ..procstat import children_cpu_s
from ..progress import counter
from ..stats import EQUIVALENT, GAIN, INCONCLUSIVE, NO_VERDICT, REGRESSION
from . import costs as _costs
from . import sweep as _sweep
from .grid import OFF, GridError, load_grid
from .measure import median_counters

HISTORY_FILE = "tail-latency-sweep.jsonl"
_OFF_TEXT = ", ".join(f"`{k}={v}`" for k, v in OFF.items())
HEAT_METRICS = ("p50", "p99", "p99.9")
TABLE_METRICS = ("p50", "p99", "p99.9", "rps")
COLOURS = {
    GAIN: "#4daf4a",
    REGRESSION: "#e41a1c",
    EQUIVALENT: "#9ecae1",
    INCONCLUSIVE: "#d9d9d9",
    NO_VERDICT: "#ffffff",
}


def _cell(c) -> str:
    if c is None:
        return "-"
    ratio = "-" if c.ratio is None else f"{c.ratio:.3f}"
    if c.needs_samples is not None:
        return f"{ratio} n/a (needs {c.needs_samples} samples)"
    return f"{ratio} ({ci_text(c)}) " + (f"**{c.verdict}**" if c.verdict in (GAIN, REGRESSION) else c.verdict)


def _classes(result) -> dict[str, list[str]]:
    """Workload (a load point's name: a named workload's, or a traffic's) -> its class names, in the
    grid's order."""
    out: dict[str, dict[str, None]] = {}
    for cr in result.cells:
        out.setdefault(cr.cell.load.name, {}).update(dict.fromkeys(cr.class_comparisons()))
    return {w: list(names) for w, names in out.items()}


def _of(result, workload: str, name: str | None = None) -> list:
    """The cells of ``workload`` (with ``name``: those that have that class), as (cell result, its
    comparisons of class ``name``)."""
    return [
        (cr, cr.class_comparisons().get(name, {}))
        for cr in result.cells
        if cr.cell.load.name == workload and (name is None or name in cr.class_comparisons())
    ]


def _where(cr) -> str:
    """A cell's backend, load point and policy: the first three columns of its table rows."""
    return f"| {cr.cell.backend} | {cr.cell.load.label} | {cr.cell.policy.label} |"


def _counters(cr) -> str:
    ca, cb = (median_counters(cr.leg.measured(k)) for k in ("A", "B"))
    text = (
        f"rounds {ca['rounds']:,.0f} → {cb['rounds']:,.0f}; elevated {cb['tail_elevations']:,.0f} of "
        f"{cb['dispatched']:,.0f}"
    )
    if cb["harvested"] or ca["harvested"]:
        text += f"; harvested {ca['harvested']:,.0f} → {cb['harvested']:,.0f}"
    return text


def _costs_text(result, backend: str) -> list[str]:
    model = result.costs[backend].as_dict()
    return [f"{k} {v:g}" for k, v in model.items() if k != "backend"]


def render(result, *, argv: list[str], provenance: dict, timing: dict) -> str:
    g = result.grid
    commit = provenance.get("git_commit", "unknown") + (" (dirty)" if provenance.get("git_dirty") else "")
    lines = [
        f"# Sweep in virtual time (`{history.command(['sweep'])}`): grid `{g.name}`",
        "",
        "**Virtual time.** Every figure is simulated (docs/en/sim-tier.md): "
        "a function of the code, the knobs, the workload, the seeds and the cost model, not of the machine's "
        "load. The same command at the same commit gives the same verdicts.",
        "",
        f"- Command: `{history.command(argv)}`.",
        f"- Code: commit {commit}.",
        f"- Cells: {len(result.cells)} ({len(g.backends)} backends x {len(g.loads)} load points x "
        f"{len(g.policies)} policies); {result.runs:,} distinct runs, {result.simulated_requests:,} "
        f"simulated requests.",
        f"- Seeds: {g.seeds[0]}-{g.seeds[-1]} per arm; arm A and arm B of a pair share the seed (common "
        "random numbers); intervals are paired bootstrap over the seeds, joint 95 % over a table's metrics.",
        f"- Arm A of a cell: arm B's knobs with age-based dispatch off ({_OFF_TEXT}), unless the policy "
        'says `vs ...` (its `against`). Knobs after "both" are set in both arms. A policy equal to its '
        "arm A is an A/A control.",
        "- A rate like `0.7x` is a fraction of one capacity per backend and load point (closed loop, "
        "0.5 virtual s, policy off at the other knobs' defaults), so every cell of a load point offers the "
        "same load.",
        f"- Wall time {timing['wall_s']:.0f} s, worker CPU {timing['cpu_s']:.0f} s, {result.workers} "
        f"workers ({timing['engine']}), started {timing['started_at']}; load average {timing['load_before']:.1f} at the "
        f"start, {timing['load_after']:.1f} at the end, on {os.cpu_count()} CPUs. Wall time is not "
        "a figure of the sweep; the verdicts do not depend on it.",
        "",
        "The grid:",
        "",
        "```toml",
        g.source.rstrip(),
        "```",
        "",
        "Capacities (req/s, closed loop): "
        + (
            "; ".join(f"{b} {lp.label} {v:,.0f}" for (b, lp), v in result.capacities.items() if v)
            or "none measured (no rate is a fraction of the capacity)"
        )
        + ".",
        "",
        "Cost model (virtual us; sources in the JSON and costs.py): "
        + "; ".join(f"{b}: " + ", ".join(_costs_text(result, b)) for b in g.backends)
        + (f"; `{result.sim_cost}` set with --sim-cost, in every cell" if result.sim_cost else "")
        + ".",
        "",
    ]
    lines += _summary(result)
    for workload, names in _classes(result).items():
        lines += _workload(result, workload, names)
    return "\n".join(lines)


def _workload(result, workload: str, names: list[str]) -> list[str]:
    """A workload's section: a table of the cells per class, then the server's CPU per cell."""
    lp = next(lp for lp in result.grid.loads if lp.name == workload)
    lines = [f"## `{workload}`", ""]
    if lp.traffic is not None:  # what a traffic load point is: its file, or inline, and its classes
        source = lp.traffic.source
        i = result.grid.loads.index(lp) + 1
        where = (
            f"the classes inline in [[load]] {i}" if source == "inline" else f"the traffic file `{source}`"
        )
        lines += [f"A user's traffic, {where}: {lp.traffic.description}.", ""]
    for name in names:
        lines += [
            f"### `{workload}`, class `{name}`",
            "",
            "| Backend | Load | Policy (B) | p50 B/A | p99 B/A | p99.9 B/A | Achieved req/s B/A "
            "| Counters A → B (medians) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for cr, comps in _of(result, workload, name):
            figures = " | ".join(_cell(comps.get(k)) for k in TABLE_METRICS)
            lines.append(f"{_where(cr)} {figures} | {_counters(cr)} |")
        lines.append("")
    lines += [
        f"Whole run of `{workload}`: server virtual CPU per request B/A per cell:",
        "",
        "| Backend | Load | Policy (B) | CPU us/request A | B/A |",
        "|---|---|---|---:|---|",
    ]
    for cr, _ in _of(result, workload):
        c = cr.comparisons["cpu_us_per_req"]
        lines.append(f"{_where(cr)} {format_value('cpu_us_per_req', c.median_a)} | {_cell(c)} |")
    return [*lines, ""]


def _summary(result) -> list[str]:
    lines = [
        "## Verdicts",
        "",
        "Per workload, class and percentile, the cells counted per verdict (the A/A control cells included).",
        "",
        "| Workload | Class | Metric | gain | regression | equivalent | inconclusive | n/a |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for workload, names in _classes(result).items():
        for name in names:
            for key in TABLE_METRICS:
                n = Counter(comps[key].verdict for _, comps in _of(result, workload, name))
                counts = " | ".join(
                    str(n[v]) for v in (GAIN, REGRESSION, EQUIVALENT, INCONCLUSIVE, NO_VERDICT)
                )
                lines.append(f"| `{workload}` | `{name}` | {key} | {counts} |")
    lines += ["", "Every `gain` and `regression` of a latency percentile or a class's achieved rate:", ""]
    hits = [
        f"- {cr.cell.backend}, {cr.cell.load.label}, {cr.cell.policy.label}: `{name}` {key} {_cell(c)}"
        for cr in result.cells
        for name, comps in cr.class_comparisons().items()
        for key in TABLE_METRICS
        if (c := comps[key]).verdict in (GAIN, REGRESSION)
    ]
    return [*lines, *(hits or ["- none"]), ""]


def history_line(result, *, argv, provenance, timing, result_file: str) -> dict:
    """One line of ``tail-latency-sweep.jsonl`` (:func:`tailjob.history.line`): every cell's verdicts per
    class."""
    return history.line(
        "sweep",
        "sim",
        {**timing, "argv": argv, "provenance": provenance},
        result=result_file,
        wall_s=round(timing["wall_s"], 1),
        load_average=[timing["load_before"], timing["load_after"]],
        engine=timing["engine"],
        grid=result.grid.name,
        sim_cost=result.sim_cost,
        cells=[
            {
                "backend": cr.cell.backend,
                "load": cr.cell.load.label,
                "policy": cr.cell.policy.label,
                "classes": {
                    n: history.verdicts(c for k, c in comps.items() if k in TABLE_METRICS)
                    for n, comps in cr.class_comparisons().items()
                },
            }
            for cr in result.cells
        ],
        regression=any(
            c.verdict == REGRESSION
            for cr in result.cells
            for comps in cr.class_comparisons().values()
            for c in comps.values()
        ),
    )


def heat_maps(result) -> dict[str, dict[str, bytes]]:
    """Per workload, its figure as ``{"svg": bytes, "png": bytes}``: a row of heat maps per class,
    one per percentile of :data:`HEAT_METRICS`; y the policies, x the backend and load point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    out: dict[str, dict[str, bytes]] = {}
    for workload, names in _classes(result).items():
        cells = [cr for cr, _ in _of(result, workload)]
        cols = list(dict.fromkeys((cr.cell.backend, cr.cell.load.label) for cr in cells))
        rows = list(dict.fromkeys(cr.cell.policy.label for cr in cells))
        at = {(cr.cell.policy.label, (cr.cell.backend, cr.cell.load.label)): cr for cr in cells}
        width = max(3.0, 0.9 * len(cols) + 0.5)
        fig, axes = plt.subplots(
            len(names),
            len(HEAT_METRICS),
            squeeze=False,
            figsize=(len(HEAT_METRICS) * width + 3, 0.45 * len(rows) * len(names) + 2.2),
        )
        for i, name in enumerate(names):
            for j, key in enumerate(HEAT_METRICS):
                _heat_map(axes[i][j], plt, at, rows, cols, workload, name, key, first=j == 0)
        verdicts = (GAIN, REGRESSION, EQUIVALENT, INCONCLUSIVE, NO_VERDICT)
        handles = [Patch(facecolor=COLOURS[v], edgecolor="grey", label=v) for v in verdicts]
        fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=7, frameon=False)
        fig.suptitle(f"Sweep `{result.grid.name}`, {workload}: B/A per cell (virtual time)", fontsize=10)
        fig.tight_layout(rect=(0, 0.04, 1, 0.97))
        out[workload] = {}
        for ext in ("svg", "png"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, metadata={"Date": None} if ext == "svg" else None)
            out[workload][ext] = buf.getvalue()
        plt.close(fig)
    return out


def _heat_map(ax, plt, at, rows, cols, workload: str, name: str, key: str, *, first: bool) -> None:
    """One class's heat map of metric ``key``: a cell per (policy, backend and load point)."""
    for y, row in enumerate(rows):
        for x, col in enumerate(cols):
            cr = at.get((row, col))
            c = cr.class_comparisons().get(name, {}).get(key) if cr else None
            verdict = NO_VERDICT if c is None or c.needs_samples is not None else c.verdict
            ax.add_patch(plt.Rectangle((x, y), 1, 1, color=COLOURS[verdict], ec="white"))
            text = "-" if c is None or c.ratio is None else f"{c.ratio:.2f}"
            if c is not None and c.needs_samples is not None:
                text += "\nn/a"
            ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    xlabels = [f"{b}\n{lab.removeprefix(workload + ' ')}" for b, lab in cols]
    ax.set_xticks([x + 0.5 for x in range(len(cols))], xlabels, fontsize=6, rotation=90)
    ax.set_yticks([y + 0.5 for y in range(len(rows))], rows if first else [""] * len(rows), fontsize=7)
    ax.set_title(f"{name} {key} B/A", fontsize=9)


def _runnable_grid(name: str):
    """The grid ``name``, or :class:`GridError` (one line) if it lists a backend this machine refuses."""
    grid = load_grid(name)
    if "io_uring" in grid.backends:
        from tailreactor.backends import io_uring_refused

        if (refused := io_uring_refused()) is not None:
            raise GridError(
                f"--grid {name}: backends lists io_uring, unavailable here ({refused}); "
                "accepted: a grid without it"
            )
    return grid


def main_sweep(
    grid_name: str | None,
    dask: str | None,
    *,
    out: Path,
    argv: list[str],
    sim_cost: str | None = None,
) -> int:
    """``sweep``: the grid ``grid_name`` (None: ``default``) on local worker processes, or on Dask
    (``dask``: ``local`` or a scheduler's address), with ``--sim-cost`` ``sim_cost``, its files under
    ``out``.  Exit 0 done, 2 a bad grid or --sim-cost (nothing written), 3 a run failed."""
    engine = "dask" if dask else "local"
    try:
        grid = _runnable_grid(grid_name or "default")
        started = history.now()
        load_before, t0, cpu0 = os.getloadavg()[0], time.monotonic(), children_cpu_s()
        progress = counter(f"sweep {grid.name}", lines=10)
        result = _sweep.run_sweep(
            grid,
            engine=engine,
            dask_address=dask or "local",
            progress=progress,
            sim_cost=sim_cost,
        )
    except (GridError, _costs.CostError) as e:
        return _error(str(e), 2)
    except Unavailable as e:  # what the sweep needs is missing here (--dask's extra)
        return _error(str(e), 3)
    except (OSError, RuntimeError, ValueError) as e:
        return _error(f"a simulated run failed: {e}", 3)
    timing = {
        "started_at": started,
        "finished_at": history.now(),
        "wall_s": time.monotonic() - t0,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "cpu_s": children_cpu_s() - cpu0,
        "engine": "Dask" if engine == "dask" else "local processes",
    }
    provenance = history.sim_provenance(REPO)
    stem = history.stem(started, grid.name, "sweep")
    md = render(result, argv=argv, provenance=provenance, timing=timing)
    files: dict[str, bytes | str] = {
        ".json": outputs.dumps(_sweep.result_document(result, argv=argv, provenance=provenance)),
        ".md": md,
    }
    files |= {f"-{w}.{ext}": data for w, im in heat_maps(result).items() for ext, data in im.items()}
    paths = outputs.write_files(out / "results", stem, files)
    line = history_line(
        result, argv=argv, provenance=provenance, timing=timing, result_file=f"results/{stem}.json"
    )
    history.show(md, paths, history.append_history(line, out, name=HISTORY_FILE))
    return 0
