"""The Markdown of a ``peers`` comparison: the report (:func:`render`) and the section of
benchmarks/README.md between :data:`BEGIN` and :data:`END` (:func:`write_readme`, ``--write-readme``).
Latencies in ms (recorded in us), CPU per request in us, ratios server / peer.
"""

from __future__ import annotations

from pathlib import Path

from . import history
from .metrics import PEER_METRICS, metric
from .peers import REFERENCES
from .peersjob import PeersJobResult, PeersLegResult
from .report import flag_summary, format_value, machine_line, partial_note, pinning, plural, run_rows
from .stats import MIN_PAIRS

BEGIN = "<!-- peers-table:begin -->"
END = "<!-- peers-table:end -->"

PARTIAL = (
    "This report holds the runs that finished: a leg cut short has each server's medians over its runs "
    "that finished, and the intervals over the trials both servers of a ratio finished; a leg not reached is not "
    "here. `--write-readme` does not apply: the README's table is of finished comparisons."
)
"""What the report of a comparison stopped early holds (after its ``**Partial: ...**``)."""

_COLUMNS = tuple((k, metric(k).label) for k in PEER_METRICS)
_RATIO_METRICS = (("rps", "Req/s"), ("cpu_us_per_req", "CPU us/req"))


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _interval(row: dict, ref: str) -> str:
    """A ratio's interval; ``n/a (needs 8 pairs)`` with fewer paired trials (the A/B's
    :data:`~tailjob.stats.MIN_PAIRS`), ``-`` for a peer not in this job."""
    if ref not in row:
        return "-"
    v = row[ref]
    return f"{v[0]:.3f}–{v[1]:.3f}" if v else f"n/a (needs {MIN_PAIRS} pairs)"


def _table(job: PeersJobResult, lr: PeersLegResult, heads: list[str], cells) -> list[str]:
    """A table under ``heads`` with a row per server: its label, then ``cells(key)``."""
    labels = {p.key: p.label for p in job.servers}
    return ["| Server | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)] + [
        f"| {labels[key]} | " + " | ".join(cells(key)) + " |" for key in lr.servers
    ]


def leg_tables(job: PeersJobResult, lr: PeersLegResult, *, level: str = "##") -> list[str]:
    """The medians, the ratios and the CPU ratios' intervals of one leg (a row per server, in job order)."""
    # The runs behind the figures shown: a server not run (a leg cut short) shows "-", not 0 runs.
    n = sorted({row["runs"] for row in lr.summary.values() if row["runs"]}) or [0]
    over = plural(n[0], "run") if len(n) == 1 else f"{n[0]}–{n[-1]} runs"
    ratio_cells = [(m, name, ref) for m, name in _RATIO_METRICS for ref in REFERENCES]
    return [
        f"{level} {lr.leg.name}: `wrk {lr.leg.wrk_args()}`, medians over {over} per server",
        "",
        *_table(
            job,
            lr,
            [label for _, label in _COLUMNS],
            lambda key: [format_value(m, lr.summary[key][m]) for m, _ in _COLUMNS],
        ),
        "",
        flag_summary(lr),
        "",
        f"{level}# Ratios, {lr.leg.name}: server / peer, of the medians",
        "",
        *_table(
            job,
            lr,
            [f"{name} ÷ {ref}" for _, name, ref in ratio_cells],
            lambda key: [_ratio(lr.ratios.get(key, {}).get(ref, {}).get(m)) for m, _, ref in ratio_cells],
        ),
        "",
        f"{level}# CPU us/request ratios, {lr.leg.name}: 95% bootstrap interval over the trials",
        "",
        "A trial runs every server once, so the runs pair by trial; the interval is the percentile "
        f"bootstrap of the ratio of medians (`n/a (needs {MIN_PAIRS} pairs)`: fewer paired trials, as for an A/B "
        "verdict; `-`: no such peer).",
        "",
        *_table(
            job,
            lr,
            [f"CPU us/req ÷ {ref}, 95% interval" for ref in REFERENCES],
            lambda key: [_interval(lr.intervals.get(key, {}), ref) for ref in REFERENCES],
        ),
    ]


def _setup(job: PeersJobResult) -> list[str]:
    s = job.settings
    leg0 = job.legs[0].leg if job.legs else None
    lines = []
    if leg0:
        lines.append(
            f"- Workload: `wrk -t{leg0.threads} -c<C> -d{leg0.duration_s}s -s scripts/ci/tail_latency.lua "
            f"http://{s.host}:<port>/`: keep-alive `GET /`, answered by every server with 200 and an "
            "empty body; every server is restarted for every run"
            + ("; one warm-up run per leg is discarded." if s.warmup else "; no warm-up run.")
        )
    lines.append(
        "- Servers, one process each: " + "; ".join(f"**{p.label}** {p.describe}" for p in job.servers) + "."
    )
    if job.ceiling_note:
        lines.append(f"- {job.ceiling_note}")
    lines += [
        f"- Schedule: each trial runs every server once, in an order drawn at random (seed {s.seed}); "
        f"{pinning(s, 'not pinned (--no-pin)')}.",
        f"- {machine_line(job.provenance)}",
    ]
    return lines


def render(job: PeersJobResult, *, runs: bool = True) -> str:
    """The Markdown report; ``runs=False`` leaves out the per-run tables."""
    lines = [
        f"# Peers comparison: profile `{job.profile}`",
        "",
        *partial_note(job.partial, PARTIAL),
        *_setup(job),
    ]
    for lr in job.legs:
        lines += [""] + leg_tables(job, lr)
    if runs:
        for lr in job.legs:
            lines += ["", f"## Runs: {lr.leg.name}", ""] + run_rows(lr.runs, who="Server")
    lines += [
        "",
        "## What the numbers are",
        "",
        "- Latencies are wrk's histogram of its own requests (closed loop: a stalled server is sent fewer "
        "requests, so the tail is under-reported; see docs/en/statistics.md).",
        "- Server CPU us/request: utime+stime of the server's process tree from /proc over the wrk run, "
        "divided by the requests wrk completed. It separates servers once wrk saturates the machine.",
        "- Ratios: a server's median divided by the peer's median, over runs interleaved in the same "
        "minutes; CPU us/req below 1 means the server spends less CPU per request than that peer, "
        "Req/s above 1 that it served more. No verdict is given; the CPU ratios have a 95% bootstrap "
        "interval over the trials (runs paired by trial).",
        "- nginx is the ceiling: compiled C, one worker, the answer from memory; it adds `Server` and "
        "`Date` headers the other servers do not send.",
    ]
    return "\n".join(lines) + "\n"


def readme_section(job: PeersJobResult, *, result_file: str) -> str:
    """The README block, markers included."""
    s = job.settings
    pin = f"server pinned to CPU {s.server_cpus}, wrk to CPU {s.wrk_cpus}" if s.pinned else "not pinned"
    lines = [
        BEGIN,
        "## Latest peers comparison",
        "",
        f"Written by `{history.command(job.argv)}` (`--write-readme`); do not edit by hand. "
        f"Started {job.started_at}; {pin}; {machine_line(job.provenance)} "
        f"Whole job: `{result_file}` (and the `.md` report beside it).",
        "",
    ]
    if job.ceiling_note:
        lines += [job.ceiling_note, ""]
    for lr in job.legs:
        lines += leg_tables(job, lr, level="###") + [""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_readme(job: PeersJobResult, path: Path, *, result_file: str) -> Path:
    """Replace the section between the markers in ``path`` (append it if absent; create the file)."""
    section = readme_section(job, result_file=result_file)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1].removeprefix("\n")
    else:
        text = (text.removesuffix("\n") + "\n\n" if text else "") + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
