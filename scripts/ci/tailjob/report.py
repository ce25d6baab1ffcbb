"""The Markdown report of a job.

Role
----
:func:`render` turns a :class:`tailjob.runner.JobResult` into Markdown:

1. a header saying exactly what ran (wrk command, arms, pinning, schedule,
   statistics, machine, commit);
2. the verdicts, one line per leg;
3. per leg, the table in the seed PR's shape -- arms side by side, medians over
   N runs -- extended with the B/A ratio, its joint 95 % CI, the minimum effect
   and the verdict; p99.99 and p99.999 carry the number of samples behind them;
4. with ``--probe``, per leg the latency probe's figures per arm and worker
   (medians over the runs, :mod:`tailjob.probeleg`);
5. per leg, every run (``runs=True``), with its flags;
6. notes on what the numbers are.

Latencies are printed in ms (recorded in us), CPU per request in us.
"""

from __future__ import annotations

from .probeleg import FIGURES
from .runner import JobResult, LegResult, RunRecord
from .stats import CONFIDENCE, METRICS, MIN_PAIRS, RESAMPLES, Comparison, median

__all__ = ["render", "plural", "verdict_summary", "probe_table", "run_rows", "flag_summary", "machine_line",
           "format_value"]

FLAG_TEXT = {
    "polluted": "polluted (other processes used more CPU than the limit)",
    "socket-errors": "with socket errors",
    "non-2xx": "with non-2xx responses",
}


def plural(n: int, noun: str) -> str:
    """``1 run``, ``8 runs``: a count with its noun (English plural by ``s``)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _ms(us: float | None) -> str:
    """Microseconds as ms with three decimals ("-" for None)."""
    return "-" if us is None else f"{us / 1000:.3f}"


def format_value(key: str, v: float | None) -> str:
    """A metric's value as printed: req/s with thousands separators, CPU us with one decimal, ms."""
    if v is None:
        return "-"
    if key == "rps":
        return f"{v:,.0f}"
    if key == "cpu_us_per_req":
        return f"{v:.1f}"
    return _ms(v)


def _samples(runs: list[RunRecord], key: str) -> str:
    """Median number of samples behind a percentile over ``runs``, as ' (n)'."""
    if key not in ("p99.99", "p99.999"):
        return ""
    p = float(key[1:])
    counts = [q["samples"] for r in runs for q in r.wrk["percentiles"] if q["p"] == p]
    return f" ({median(counts):.0f})" if counts else ""


def verdict_summary(c_list: list[Comparison]) -> str:
    """'neutral on every metric' or 'regression on p99 (+23.0%); gain on Requests/s (+8.1%)'."""
    called = [c for c in c_list if c.verdict in ("gain", "regression")]
    missing = [c for c in c_list if c.verdict == "n/a"]
    parts = []
    for word in ("regression", "gain"):
        hits = [c for c in called if c.verdict == word]
        if hits:
            parts.append(f"**{word}** on " + ", ".join(
                f"{c.metric.label} ({c.ratio - 1:+.1%})" for c in hits))
    if not called and not missing:
        return "neutral on every metric"
    if missing and not called and len(missing) == len(c_list):
        return f"no verdict ({missing[0].reason})"
    rest = len(c_list) - len(called) - len(missing)
    if rest:
        parts.append(f"neutral on {rest} other metric{'s' if rest != 1 else ''}")
    if missing:
        parts.append("n/a on " + ", ".join(c.metric.label for c in missing))
    return "; ".join(parts)


def _ci(c: Comparison) -> str:
    return "-" if c.ci is None else f"{c.ci[0]:.3f}–{c.ci[1]:.3f}"


def _leg_table(job: JobResult, lr: LegResult) -> list[str]:
    a, b = job.arms
    runs_a, runs_b = lr.measured("A"), lr.measured("B")
    n_runs = min(len(runs_a), len(runs_b))
    lines = [f"## {lr.leg.name}: `wrk {lr.leg.wrk_args()}`, medians over {plural(n_runs, 'run')} per arm", "",
             f"| Metric | A: {a.label} | B: {b.label} | B/A | Joint 95% CI | Min. effect | Verdict |",
             "|---|---:|---:|---:|:---:|---:|---|"]
    for c in lr.comparisons:
        key = c.metric.key
        ratio = "-" if c.ratio is None else f"{c.ratio:.3f}"
        lines.append(f"| {c.metric.label} | {format_value(key, c.median_a)}{_samples(runs_a, key)} "
                     f"| {format_value(key, c.median_b)}{_samples(runs_b, key)} | {ratio} | {_ci(c)} "
                     f"| {c.min_effect:.0%} | {c.verdict} |")
    lines += ["", flag_summary(lr)]
    return lines


def _flag_counts(measured) -> dict[str, int]:
    """How many of ``measured`` runs carry each flag that occurs, in :data:`FLAG_TEXT` order."""
    counts = {flag: sum(flag in r.flags for r in measured) for flag in FLAG_TEXT}
    return {flag: n for flag, n in counts.items() if n}


def flag_summary(lr) -> str:
    """'16 measured runs (+1 warm-up, discarded): 1 polluted ...' for a leg (A/B or peers)."""
    measured = lr.measured()
    other = [f"{n} {FLAG_TEXT[f]}" for f, n in _flag_counts(measured).items()]
    return (plural(len(measured), "measured run")
            + (f" (+{len(lr.runs) - len(measured)} warm-up, discarded)" if len(lr.runs) > len(measured) else "")
            + ": " + ("; ".join(other) if other else "none flagged") + ".")


def _flagged_note(lr) -> str:
    """'; 2 of 16 measured runs flagged (1 polluted, ...): ...' for a verdict line, or ''.

    A verdict stays computed over every run (flagged ones included); this puts
    the warning next to it rather than only under the leg's table.
    """
    measured = lr.measured()
    flagged = sum(bool(r.flags) for r in measured)
    if not flagged:
        return ""
    # The flag's text without its explanation in parentheses: the table's summary has that.
    kinds = ", ".join(f"{n} {FLAG_TEXT[f].split(' (')[0]}" for f, n in _flag_counts(measured).items())
    return (f"; {flagged} of {plural(len(measured), 'measured run')} flagged ({kinds}): "
            "a verdict from flagged runs may reflect the machine, not the arms")


def machine_line(pv: dict) -> str:
    """'Machine: CPU, 2 CPUs, Linux .., Python .., wrk ..; commit abc (dirty).' from provenance."""
    commit = pv.get("git_commit", "?")[:12] + (" (dirty)" if pv.get("git_dirty") else "")
    return (f"Machine: {pv.get('cpu_model', '?')}, {pv.get('cpus', '?')} CPUs, Linux {pv.get('kernel', '?')}, "
            f"Python {pv.get('python', '?')}, {pv.get('wrk_version', 'wrk ?')}; commit {commit}.")


def _count(v: float) -> str:
    """A median count or us value: ``4,500`` when whole, ``13.5`` otherwise."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def probe_table(job: JobResult, lr: LegResult) -> list[str]:
    """The latency probe section of one leg: a row per arm and worker, then the arm's ``all`` row."""
    labels = {a.key: f"{a.key}: {a.label}" for a in job.arms}
    n_runs = min(arm["runs"] for arm in lr.probe.values())
    lines = [f"## Latency probe: {lr.leg.name}, medians over {plural(n_runs, 'run')} per arm", "",
             "| Arm | Worker | " + " | ".join(label for _, label in FIGURES) + " |",
             "|---|---|" + "---:|" * len(FIGURES)]
    for key in [a.key for a in job.arms if a.key in lr.probe]:
        for row in lr.probe[key]["rows"]:
            lines.append(f"| {labels[key]} | {row['worker']} | "
                         + " | ".join(_count(row[k]) for k, _ in FIGURES) + " |")
    return lines


def run_rows(lr: LegResult, who: str = "Arm") -> list[str]:
    """Every run of a leg, warm-up first, with its flags; ``who`` heads the arm (or server) column."""
    lines = [f"| Trial.order | {who} | Backend | Req/s | p50 ms | p99 ms | p99.9 ms | p99.99 ms | p99.999 ms "
             "| CPU us/req | Other CPU (cores) | Errors (sock/non-2xx) | Flags |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in lr.runs:
        m, e = r.metrics, r.wrk["errors"]
        sock = e["connect"] + e["read"] + e["write"] + e["timeout"]
        trial = "warm-up" if r.warmup else f"{r.trial + 1}.{r.position + 1}"
        lines.append(f"| {trial} | {r.arm} | {r.backend} | {format_value('rps', m['rps'])} | {_ms(m['p50'])} "
                     f"| {_ms(m['p99'])} | {_ms(m['p99.9'])} | {_ms(m['p99.99'])} | {_ms(m['p99.999'])} "
                     f"| {format_value('cpu_us_per_req', m['cpu_us_per_req'])} | {r.other_cores:.2f} "
                     f"| {sock}/{e['status']} | {', '.join(r.flags) or '-'} |")
    return lines


def render(job: JobResult, *, runs: bool = True) -> str:
    """The Markdown report; ``runs=False`` leaves out the per-run tables."""
    s, pv = job.settings, job.provenance
    a, b = job.arms
    leg0 = job.legs[0].leg if job.legs else None
    pin = (f"pinned with taskset: server on CPU {s.server_cpus}, wrk on CPU {s.wrk_cpus}"
           if s.pinned else "not pinned")
    if s.workers:
        workers = f"--workers {s.workers}"
    else:
        n = job.legs[0].knobs["A"].get("CWIST_WORKERS", 1) if job.legs else 1
        workers = f"CWIST_WORKERS={n}"
    lines = [f"# Tail-latency job: `--ab {job.ab}`, profile `{job.profile}`", ""]
    if leg0:
        lines.append(f"- Workload: `wrk -t{leg0.threads} -c<C> -d{leg0.duration_s}s -s "
                     f"scripts/ci/tail_latency.lua http://{s.host}:<port>/` against `tailreactor-bench` "
                     f"({workers}); the server is restarted for every run"
                     + ("; one warm-up run per leg is discarded." if s.warmup else "; no warm-up run."))
    lines += [
        f"- Arms: **A = {a.label}** `{a.env_text()}`; **B = {b.label}** `{b.env_text()}`. "
        "Ratios are B/A.",
        f"- Schedule: trials of A and B back to back in random order (RMIT, seed {s.seed}); {pin}.",
        f"- Verdict: percentile-bootstrap CI of B/A over the paired trials ({RESAMPLES:,} resamples, "
        f"seed {s.seed}), 95% joint over the {len(METRICS)} metrics (Bonferroni: each interval "
        f"{CONFIDENCE:.2%}); **neutral** when the CI includes 1 or the effect is under the minimum effect; "
        "**gain**/**regression** by direction (more req/s is better, more latency or CPU is worse); "
        f"**n/a** with fewer than {MIN_PAIRS} paired runs.",
        f"- {machine_line(pv)}",
        "", "## Verdicts", ""]
    for lr in job.legs:
        lines.append(f"- {lr.leg.name}: {verdict_summary(lr.comparisons)}{_flagged_note(lr)}")
    for lr in job.legs:
        lines += [""] + _leg_table(job, lr)
    for lr in job.legs:
        if lr.probe:
            lines += [""] + probe_table(job, lr)
    if runs:
        for lr in job.legs:
            lines += ["", f"### Runs: {lr.leg.name}", ""] + run_rows(lr)
    lines += [
        "", "## What the numbers are", "",
        *([f"- Latency probe (`--probe`): every run's server had `CWIST_LATENCY_PROBE=1` and wrote one "
           f"JSON file per worker at its graceful stop, under `{s.probe_dir}`. A row per worker index is "
           "the median over the runs of that worker's figures; `all` is the median of each run's "
           "workers merged (histograms added, counters summed). queue_delay_arm runs from the arm "
           "stamp to the callback, queue_delay_ready from the round that reaped the event; percentiles "
           "in us (HdrHistogram, 3 significant digits); over 5 ms counts the callbacks whose queue "
           "delay exceeded 5 ms; tail_elevations the callbacks age-based dispatch moved ahead."]
          if s.probe_dir else []),
        "- Latencies are wrk's histogram of its own requests. wrk is closed-loop (a connection sends its "
        "next request only after the response), so a stalled server is sent fewer requests and the tail "
        "is under-reported (coordinated omission); wrk 4 adds synthetic samples for slow responses, a "
        "partial correction. Responses slower than wrk's timeout are counted as errors, not latencies.",
        "- (n) after p99.99 and p99.999: samples behind that percentile in the median run; with a "
        "handful of samples the figure is close to the run's maximum.",
        "- Server CPU us/request: utime+stime of the server's process tree from /proc, sampled before "
        "and after the wrk run, divided by the requests wrk completed.",
        f"- Other CPU: machine busy time (/proc/stat user+nice+system+irq+softirq+steal) minus server, wrk and this "
        f"job, in cores averaged over the run; above {s.pollution_limit:.2f} the run is flagged "
        "`polluted` (flagged runs are kept in the statistics). It is a difference of two /proc samples, "
        "so accounting noise can make it slightly negative; it is shown as measured.",
    ]
    return "\n".join(lines) + "\n"
