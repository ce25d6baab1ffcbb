"""The percentile-spectrum plot of a job (SVG and PNG), one panel per leg, drawn with Agg (no display).

x: the percentile on a log scale of 1 / (1 - p), so 50, 90, 99, ... 99.999 % are equally spaced and
the tail gets as much room as the body; y: latency in ms, log scale.  Faint: every measured run's
spectrum (tail_latency.lua's 51 points); bold: one curve per arm (``peers``: per server), its runs
pooled (their merged histograms' percentiles, as the report's tail figures) or, without histograms,
their point-wise median.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the backend
from matplotlib.ticker import FuncFormatter

from . import pooled
from .runner import JobResult  # or a peersjob.PeersJobResult: same shape
from .stats import median

COLORS = {"A": "#1f77b4", "B": "#d62728"}
#: Colours of peers servers, in server order (matplotlib's tab10).
PALETTE = ("#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#7f7f7f", "#8c564b")
TICKS = [(1, "0"), (2, "50"), (10, "90"), (100, "99"), (1e3, "99.9"), (1e4, "99.99"), (1e5, "99.999")]


def _mantissa(v: float) -> int:
    return round(v / 10 ** math.floor(math.log10(v))) if v > 0 else 0


def _x(p: float) -> float:
    return 1 / (1 - p / 100)


def arm_curve(runs) -> tuple[str, list[tuple[float, float]]] | None:
    """The bold curve of an arm: ``(what, [(percentile, us), ...])`` at the spectrum's percentiles;
    ``what``: ``pooled over N runs`` when every run has a histogram, else ``median of N runs`` (``1
    run`` for one); None without latencies."""
    runs = [r for r in runs if r.wrk["latency_samples"]]
    if not runs:
        return None
    ps = [p for p, _ in runs[0].wrk["spectrum"]]
    hists = [r.wrk.get("histogram") for r in runs]
    if all(h is not None for h in hists):
        merged = pooled.PooledArms(hists, hists)
        points = [(p, float(merged.point(p)[0])) for p in ps]
        return (f"pooled over {len(runs)} runs" if len(runs) > 1 else "1 run"), points
    points = [(p, float(median([r.wrk["spectrum"][i][1] for r in runs]))) for i, p in enumerate(ps)]
    return (f"median of {len(runs)} runs" if len(runs) > 1 else "1 run"), points


def _line(ax, points, **style) -> None:
    """``[(percentile, us), ...]`` on the panel's axes (x: 1 / (1 - p); y: ms, at least 1 us)."""
    ax.plot([_x(p) for p, _ in points], [max(us, 1) / 1000 for _, us in points], **style)


def _axes(ax, leg) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    # 0.5, 2, 10 rather than 5x10^-1; minor labels only at 2x and 5x a power of ten
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if _mantissa(v) in (2, 5) else ""))
    ax.set_xticks([t for t, _ in TICKS], [label for _, label in TICKS])
    ax.set_xlim(1, 1e5)
    ax.set_xlabel("percentile (%)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"{leg.name}, wrk {leg.wrk_args()}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


def plot_job(job: JobResult, stem: Path) -> list[Path]:
    """Draw the job and save ``<stem>.svg`` and ``<stem>.png``; return both paths."""
    n = max(1, len(job.legs))
    fig, axes = plt.subplots(1, n, figsize=(6.4 * n, 4.6), squeeze=False)
    for ax, lr in zip(axes[0], job.legs):
        for i, arm in enumerate(job.arms):
            color = COLORS.get(arm.key, PALETTE[i % len(PALETTE)])
            runs = lr.measured(arm.key)
            for r in runs:
                if r.wrk["latency_samples"]:
                    _line(ax, r.wrk["spectrum"], color=color, alpha=0.22, linewidth=0.8)
            bold = arm_curve(runs)
            if bold:
                what, points = bold
                name = arm.label if arm.key not in COLORS else arm.heading()
                _line(ax, points, color=color, linewidth=2.2, label=f"{name} ({what})")
        _axes(ax, lr.leg)
    mode = "peers" if job.ab == "peers" else f"--ab {job.ab}"
    fig.suptitle(
        f"wrk latency by percentile: {mode}, profile {job.profile} "
        "(faint: each run; bold: each arm, pooled or median as its label says)",
        fontsize=11,
    )
    fig.tight_layout()
    paths = [stem.with_suffix(".svg"), stem.with_suffix(".png")]
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(paths[0])
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths
