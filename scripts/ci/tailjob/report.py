"""The Markdown report of a job (:func:`render`, from a :class:`tailjob.runner.JobResult`).

What ran (the header), the verdicts one line per leg, per leg the table in the seed PR's shape (arms
side by side, medians over the runs) with B/A, its joint interval, the minimum and detectable
effects, the pairs needed and the verdict; with the load client the capacity, the load offered and a
table per client class with its checks; with ``--probe`` the probe's figures per worker; every run
(``runs=True``); notes on what the numbers are.  Latencies in ms (recorded in us), CPU in us.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import history
from .metrics import LATENCY_KEYS, POOLED_KEYS, ci_text, format_value, metric, ms
from .plan import PROFILES
from .probeleg import FIGURES
from .runner import JobResult, LegResult, RunRecord
from .stats import (
    CONFIDENCE,
    GAIN,
    INCONCLUSIVE,
    METRICS,
    MIN_PAIRS,
    NO_VERDICT,
    REGRESSION,
    RESAMPLES,
    Comparison,
    count_verdicts,
    median,
    verdict_cell,
)
from .workloads import CAPACITY_PATH, CAPACITY_S, service_text

FLAG_TEXT = {
    "polluted": "polluted (other processes used more CPU than the limit)",
    "socket-errors": "with socket errors",
    "non-2xx": "with non-2xx responses",
    "saturated": "saturated (an open-loop class's answers fell over 2% short of the requests due in the run)",
    "generator-bound": "generator-bound (the load generator was busy, the server was not)",
    "no-keep-alive": "no-keep-alive (the server closed the connection after its answer: the runs measured reconnects)",
    "server-stop-timeout": "server-stop-timeout (the server did not stop on SIGTERM and was killed)",
}


def _and(words: list[str]) -> str:
    """``a, b and c``."""
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else "".join(words)


def plural(n: int, noun: str) -> str:
    """``1 run``, ``8 runs``: a count with its noun (English plural by ``s``)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _samples(c: Comparison, arm: str, counts) -> str:
    """The samples behind a tail figure, as ' (n)' ("" for none): a pooled figure's merged histogram's,
    else the median of ``counts()`` (the runs' counts of the arm)."""
    if c.estimator == "pooled":
        n = c.samples_a if arm == "A" else c.samples_b
        return "" if n is None else f" ({n:,})"
    found = counts() if c.metric.key in POOLED_KEYS else None
    return f" ({median(found):.0f})" if found else ""


def _run_counts(c: Comparison, runs: list[RunRecord]) -> list[int]:
    return [q["samples"] for r in runs for q in r.wrk["percentiles"] if q["p"] == c.metric.percentile]


def _item(c: Comparison) -> str:
    if c.verdict in (GAIN, REGRESSION) and c.ratio is not None:  # a verdict has its ratio
        return f"{c.metric.label} ({c.ratio - 1:+.1%})"
    if c.verdict == INCONCLUSIVE:
        return f"{c.metric.label} (detectable ±{c.detectable:.0%})"
    return c.metric.label


def verdict_summary(c_list: list[Comparison]) -> str:
    """One leg's metrics counted per verdict, worst first:
    '**regression** on 1: p99 ms (+25.0%); **inconclusive** on 2: ...; equivalent on 3: ...'.

    ``regression`` and ``inconclusive`` are bold: the first fails ``--gate``,
    the second means this run could not tell an effect from none.
    """
    if c_list and all(c.verdict == NO_VERDICT for c in c_list):
        return f"no verdict ({c_list[0].reason})"
    parts = []
    for word, n in count_verdicts(c.verdict for c in c_list).items():
        shown = f"**{word}**" if word in (REGRESSION, INCONCLUSIVE) else word
        parts.append(f"{shown} on {n}: " + ", ".join(_item(c) for c in c_list if c.verdict == word))
    return "; ".join(parts)


def _compared(lr: LegResult) -> list[tuple[str, list[Comparison]]]:
    """A leg's comparisons as ``(where, comparisons)``: the whole run's, then each client class's."""
    return [
        (lr.leg.name, lr.comparisons),
        *((f"{lr.leg.name}, class {name}", cs) for name, cs in lr.class_comparisons.items()),
    ]


def gate(job: JobResult, *, tier: str = "") -> tuple[int, list[str]]:
    """``--gate``'s exit code and its lines (:func:`gate_tables`) of a job's legs."""
    return gate_tables([t for lr in job.legs for t in _compared(lr)], tier=tier)


def gate_tables(tables: list[tuple[str, list[Comparison]]], *, tier: str = "") -> tuple[int, list[str]]:
    """``--gate``'s exit code and its lines, of either tier: 1 on any ``regression`` in ``tables``
    (``(where, comparisons)``: a leg's whole run, then each client class), else 0; ``tier``: what
    the lines add to their first word (`` in virtual time``).

    ``inconclusive`` never fails the gate -- it is not evidence of a
    regression -- but it is not a pass either, so it gets a line of its own
    naming each metric and its detectable effect.
    """
    lines = []
    for word in (REGRESSION, INCONCLUSIVE):
        hits = [c for _, cs in tables for c in cs if c.verdict == word]
        if not hits:
            continue
        named = "; ".join(
            f"{where}: " + ", ".join(_item(c) for c in cs if c.verdict == word)
            for where, cs in tables
            if any(c.verdict == word for c in cs)
        )
        if word == REGRESSION:
            lines.append(f"REGRESSION{tier}: {plural(len(hits), 'metric')} ({named}).")
        else:
            lines.append(
                f"INCONCLUSIVE{tier}: {plural(len(hits), 'metric')} ({named}): this run cannot tell an "
                "effect of the minimum size from none -- not a pass; more pairs (see 'Pairs needed') "
                "or a quieter machine."
            )
    return (1 if any(c.verdict == REGRESSION for _, cs in tables for c in cs) else 0), lines


def runs_line(job: JobResult, lr: LegResult) -> str | None:
    """For the seed PR's profiles: 'Runs: the seed PR used 3 runs on epoll; a verdict needs 8; ...'."""
    profile = PROFILES.get(job.profile)
    if profile is None or not profile.seed_pr_runs or lr.leg.backend is None:
        return None
    used = profile.seed_pr_runs.get(lr.leg.backend, profile.seed_pr_runs.get("*"))
    if used is None:
        return None
    needed = [c.pairs_needed for c in lr.comparisons if c.pairs_needed is not None]
    text = (
        f"Runs: the seed PR used {plural(used, 'run')} on {lr.leg.backend}; a verdict needs {MIN_PAIRS}; "
        f"this leg ran {plural(min(len(lr.measured('A')), len(lr.measured('B'))), 'pair')}"
    )
    if needed:
        text += (
            f", and at its noise every metric would reach its minimum effect with about {max(needed)} pairs"
        )
    return text + "."


CLASS_LABELS = {"rps": "Achieved req/s"}
"""Row labels of a client class's table other than the metric's own (its rate is what it achieved)."""


def comparison_table(
    arms, comps: list[Comparison], samples, *, labels: dict[str, str] | None = None
) -> list[str]:
    """The table of a leg's (or a class's) comparisons: per metric the arms' figures (with
    ``samples(c, arm)`` after them), B/A, the interval, the minimum and detectable effects, pairs
    needed and the verdict (bold when it is ``regression`` or ``inconclusive``).  ``labels``: a
    metric's row label other than its own, by key."""
    a, b = arms
    lines = [
        f"| Metric | {a.heading()} | {b.heading()} | B/A | Joint 95% CI | Min. effect | Detectable "
        "| Pairs needed | Verdict |",
        "|---|---:|---:|---:|:---:|---:|---:|---:|---|",
    ]
    for c in comps:
        key = c.metric.key
        label = (labels or {}).get(key, c.metric.label)
        ratio = "-" if c.ratio is None else f"{c.ratio:.3f}"
        detectable = "-" if c.detectable is None else f"±{c.detectable:.1%}"
        needed = "-" if c.pairs_needed is None else str(c.pairs_needed)
        verdict = verdict_cell(c)
        lines.append(
            f"| {label} | {format_value(key, c.median_a)}{samples(c, 'A')} "
            f"| {format_value(key, c.median_b)}{samples(c, 'B')} | {ratio} | {ci_text(c)} "
            f"| {c.min_effect:.0%} | {detectable} | {needed} | {verdict} |"
        )
    return lines


def _leg_table(job: JobResult, lr: LegResult) -> list[str]:
    runs_a, runs_b = lr.measured("A"), lr.measured("B")
    n_runs = min(len(runs_a), len(runs_b))
    pooled = [c.metric.label for c in lr.comparisons if c.estimator == "pooled"]
    how = f"; {', '.join(pooled)} pooled over each arm's runs" if pooled else ""
    what = (
        f"the load client, {lr.leg.duration_s} s per run, all classes together"
        if lr.load_spec
        else f"`wrk {lr.leg.wrk_args()}`"
    )
    lines = [
        f"## {lr.leg.name}: {what}, medians over {plural(n_runs, 'run')} per arm{how}",
        "",
        *comparison_table(
            job.arms,
            lr.comparisons,
            lambda c, arm: _samples(c, arm, lambda: _run_counts(c, lr.measured(arm))),
        ),
    ]
    lines += ["", flag_summary(lr)]
    seed = runs_line(job, lr)
    if seed:
        lines += ["", seed]
    if lr.load_spec:
        lines += [""] + class_tables(job, lr)
    return lines


def _flag_counts(measured) -> dict[str, int]:
    """How many of ``measured`` runs carry each flag that occurs: those of :data:`FLAG_TEXT` in its
    order, then any other (``server-exit-N``) in the order first seen."""
    seen = dict.fromkeys([*FLAG_TEXT, *(f for r in measured for f in r.flags)])
    counts = {flag: sum(flag in r.flags for r in measured) for flag in seen}
    return {flag: n for flag, n in counts.items() if n}


def flag_summary(lr) -> str:
    """'16 measured runs (+1 warm-up, discarded): 1 polluted ...' for a leg (A/B or peers)."""
    measured = lr.measured()
    other = [f"{n} {FLAG_TEXT.get(f, f)}" for f, n in _flag_counts(measured).items()]
    return (
        plural(len(measured), "measured run")
        + (f" (+{len(lr.runs) - len(measured)} warm-up, discarded)" if len(lr.runs) > len(measured) else "")
        + ": "
        + ("; ".join(other) if other else "none flagged")
        + "."
    )


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
    kinds = ", ".join(f"{n} {FLAG_TEXT.get(f, f).split(' (')[0]}" for f, n in _flag_counts(measured).items())
    return (
        f"; {flagged} of {plural(len(measured), 'measured run')} flagged ({kinds}): "
        "a verdict from flagged runs may reflect the machine, not the arms"
    )


def pinning(s, unpinned: str = "not pinned") -> str:
    """How a job's runs were pinned (:class:`tailjob.measure.Settings` ``s``), for its report."""
    return (
        f"pinned with taskset: server on CPU {s.server_cpus}, wrk on CPU {s.wrk_cpus}"
        if s.pinned
        else unpinned
    )


def machine_line(pv: dict) -> str:
    """'Machine: CPU, 2 CPUs, Linux .., Python .., wrk ..; commit abc (dirty).' from provenance."""
    commit = pv.get("git_commit", "?")[:12] + (" (dirty)" if pv.get("git_dirty") else "")
    return (
        f"Machine: {pv.get('cpu_model', '?')}, {pv.get('cpus', '?')} CPUs, Linux {pv.get('kernel', '?')}, "
        f"Python {pv.get('python', '?')}, {pv.get('wrk_version', 'wrk ?')}; commit {commit}."
    )


def _count(v: float) -> str:
    """A median count or us value: ``4,500`` when whole, ``13.5`` otherwise."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def probe_table(job: JobResult, lr: LegResult) -> list[str]:
    """The latency probe section of one leg: a row per arm and worker, then the arm's ``all`` row."""
    assert lr.probe is not None, "a leg measured with --probe"
    labels = {a.key: a.heading() for a in job.arms}
    n_runs = min(arm["runs"] for arm in lr.probe.values())
    lines = [
        f"## Latency probe: {lr.leg.name}, medians over {plural(n_runs, 'run')} per arm",
        "",
        "| Arm | Worker | " + " | ".join(label for _, label in FIGURES) + " |",
        "|---|---|" + "---:|" * len(FIGURES),
    ]
    for key in [a.key for a in job.arms if a.key in lr.probe]:
        for row in lr.probe[key]["rows"]:
            lines.append(
                f"| {labels[key]} | {row['worker']} | "
                + " | ".join(_count(row[k]) for k, _ in FIGURES)
                + " |"
            )
    return lines


_RUN_COLUMNS = (
    ("rps", "Req/s"),
    *((k, metric(k).label) for k in LATENCY_KEYS),
    ("cpu_us_per_req", "CPU us/req"),
)


def run_rows(runs: Sequence[RunRecord], who: str = "Arm") -> list[str]:
    """Every run of a leg (``runs``), warm-up first, with its flags; ``who`` heads the arm (or server) column."""
    lines = [
        f"| Trial.order | {who} | Backend | "
        + " | ".join(label for _, label in _RUN_COLUMNS)
        + " | Other CPU (cores) | Errors (sock/non-2xx) | Flags |",
        "|---|---|---|" + "---:|" * (len(_RUN_COLUMNS) + 2) + "---|",
    ]
    for r in runs:
        m, e = r.metrics, r.wrk["errors"]
        sock = e["connect"] + e["read"] + e["write"] + e["timeout"]
        trial = "warm-up" if r.warmup else f"{r.trial + 1}.{r.position + 1}"
        lines.append(
            f"| {trial} | {r.arm} | {r.backend} | "
            + " | ".join(format_value(k, m.get(k)) for k, _ in _RUN_COLUMNS)
            + f" | {r.other_cores:.2f} | {sock}/{e['status']} | {', '.join(r.flags) or '-'} |"
        )
    return lines


def _server_text(job: JobResult) -> str:
    """What the runs measured: the bench server and its workers, or the arms' server command(s)."""
    s = job.settings
    if s.commands is None:
        n = job.legs[0].knobs["A"].get("CWIST_WORKERS", 1) if job.legs else 1
        return f"`tailreactor-bench` ({f'--workers {s.workers}' if s.workers else f'CWIST_WORKERS={n}'})"
    a, b = s.commands["A"], s.commands["B"]
    return f"the server command `{a}`" if a == b else f"the server commands `{a}` (A) and `{b}` (B)"


def render(job: JobResult, *, runs: bool = True) -> str:
    """The Markdown report; ``runs=False`` leaves out the per-run tables."""
    lines = [*_header(job), "", "## Verdicts", ""]
    for lr in job.legs:
        lines.append(
            f"- {lr.leg.name}"
            + (", all classes" if lr.class_comparisons else "")
            + f": {verdict_summary(lr.comparisons)}{_flagged_note(lr)}"
        )
        for name, comps in lr.class_comparisons.items():
            lines.append(f"  - class `{name}`: {verdict_summary(comps)}")
    for lr in job.legs:
        lines += [""] + _leg_table(job, lr)
    for lr in job.legs:
        if lr.probe:
            lines += [""] + probe_table(job, lr)
    if runs:
        for lr in job.legs:
            lines += ["", f"### Runs: {lr.leg.name}", ""] + run_rows(lr.runs)
    return "\n".join([*lines, "", "## What the numbers are", "", *_notes(job.settings)]) + "\n"


def partial_lines(job: JobResult) -> list[str]:
    """A report's first lines when its job stopped before its last run (either tier): what it holds."""
    return partial_note(
        job.partial,
        "This report holds the runs that finished; a leg cut short is compared on its trials whose two "
        f"arms both finished, and has a verdict only where those pairs suffice ({MIN_PAIRS} at least, and "
        "an interval that decides), as any leg; a leg not reached is not here. `--gate` does not apply: "
        "the job did not finish (its exit code says why).",
    )


def partial_note(partial: str | None, holds: str) -> list[str]:
    """The lines that open the report of a job stopped early (``partial``: why, after how many runs),
    saying what it ``holds``; none for a job that finished."""
    return [f"**Partial: {partial}.** {holds}", ""] if partial else []


def _header(job: JobResult) -> list[str]:
    """What ran: the workload, the arms, the code, the schedule, the verdict rule, the machine."""
    s, pv = job.settings, job.provenance
    a, b = job.arms
    leg0 = job.legs[0].leg if job.legs else None
    server = _server_text(job)
    warmup = "; one warm-up run per leg is discarded." if s.warmup else "; no warm-up run."
    lines = [f"# Tail-latency job: `--ab {job.ab}`, profile `{job.profile}`", "", *partial_lines(job)]
    if leg0 and s.load is not None:
        lines.append(
            f"- Workload: {s.load.describe()}, on the job's load client against {server}, "
            f"{leg0.duration_s} s per run; the server is restarted for every run" + warmup
        )
    elif leg0:
        lines.append(
            f"- Workload: `wrk -t{leg0.threads} -c<C> -d{leg0.duration_s}s -s "
            f"scripts/ci/tailjob/tail_latency.lua http://{s.host}:<port>/` against {server}; "
            "the server is restarted for every run" + warmup
        )
    lines.append(
        f"- Arms: **{a.heading(' = ')}** `{a.env_text()}`; **{b.heading(' = ')}** `{b.env_text()}`. Ratios are B/A."
    )
    if job.a_ref:
        lines.append(
            f"- Code: arm A runs `--a-ref {job.a_ref['ref']}`, commit {job.a_ref['commit']}, arm B the "
            "working tree (each server said which tailreactor it imported: `code` in the result JSON's runs)."
        )
    return lines + [
        f"- Command: `{history.command(job.argv)}`; started {job.started_at}, finished {job.finished_at}.",
        f"- Schedule: trials of A and B back to back in random order (RMIT, seed {s.seed}); {pinning(s)}.",
        f"- Verdict: percentile-bootstrap CI of B/A over the paired trials ({RESAMPLES:,} resamples, "
        f"seed {s.seed}), 95% joint over the {len(METRICS)} metrics (Bonferroni: each interval "
        f"{CONFIDENCE:.2%}). **gain**/**regression** when the CI excludes 1 and the effect is at least the "
        "minimum effect, by direction (more req/s is better, more latency or CPU is worse); **equivalent** "
        "when the whole CI lies within ±the minimum effect; **inconclusive** otherwise (this run cannot "
        f"tell an effect of the minimum size from none); **n/a** with fewer than {MIN_PAIRS} paired runs. "
        "Detectable: the CI's half-width; pairs needed: about how many paired runs would bring it to the "
        "minimum effect (width falls as 1/sqrt(pairs)).",
        f"- {machine_line(pv)}",
    ]


def _notes(s) -> list[str]:
    """The report's last section: what the numbers are, for these settings."""
    lines = []
    if s.probe_dir:
        lines.append(
            f"- Latency probe (`--probe`): every run's server had `CWIST_LATENCY_PROBE=1` and wrote one "
            f"JSON file per worker at its graceful stop, under `{s.probe_dir}`. A row per worker index is "
            "the median over the runs of that worker's figures; `all` is the median of each run's "
            "workers merged (histograms added, counters summed). queue_delay_arm runs from the arm "
            "stamp to the callback, queue_delay_ready from the round that reaped the event; percentiles "
            "in us (HdrHistogram, 3 significant digits); over 5 ms counts the callbacks whose queue "
            "delay exceeded 5 ms; tail_elevations the callbacks age-based dispatch moved ahead."
        )
    if s.load is not None:
        lines += CLASS_NOTES
    else:
        lines.append(
            "- Latencies are wrk's histogram of its own requests. wrk is closed-loop (a connection sends its "
            "next request only after the response), so a stalled server is sent fewer requests and the tail "
            "is under-reported (coordinated omission); wrk 4 adds synthetic samples for slow responses, a "
            "partial correction. Responses slower than wrk's timeout are counted as errors, not latencies."
        )
    return lines + [
        f"- {_and(list(POOLED_KEYS))} are each arm's runs pooled: the runs' latency histograms merged "
        "(HdrHistogram, exact), the percentile read from the merged one; (n) is the samples at or beyond "
        "its rank. The interval still resamples whole trials (a resample merges the drawn trials' "
        "histograms). Without histograms (wrk lacking LuaJIT's ffi) they are medians of the runs, and "
        "(n) is the median run's count.",
        "- Server CPU us/request: utime+stime of the server's process tree from /proc, sampled before "
        "and after the wrk run, divided by the requests wrk completed.",
        f"- Other CPU: machine busy time (/proc/stat user+nice+system+irq+softirq+steal) minus server, wrk and this "
        f"job, in cores averaged over the run; above {s.pollution_limit:.2f} the run is flagged "
        "`polluted` (flagged runs are kept in the statistics). It is a difference of two /proc samples, "
        "so accounting noise can make it slightly negative; it is shown as measured.",
    ]


def load_line(lr) -> str:
    """'Load: ... Capacity (closed loop, wrk ..., arm A): N req/s.' for a leg run on the load client."""
    parts = []
    if lr.capacity:
        parts.append(
            f"capacity measured first, closed loop `wrk -t{lr.leg.threads} -c{lr.leg.connections} "
            f"-d{CAPACITY_S}s`, `GET {CAPACITY_PATH}<seq>`, "
            f"on arm {lr.capacity['arm']}: **{lr.capacity['rps']:,.0f} req/s**"
            + (f" (flagged {', '.join(lr.capacity['flags'])})" if lr.capacity["flags"] else "")
        )
    parts += [class_line(c) for c in lr.load_spec["classes"]]
    return "Load (tailjob.loadgen, " + f"{lr.load_spec['duration_s']:g} s per run): " + "; ".join(parts) + "."


def class_line(c: dict) -> str:
    """What a client class (as a dict of :class:`tailjob.loadgen.ClientClass`) sends."""
    what = (
        f"open loop, {c['schedule']}, {c['rate']:,.0f} req/s offered"
        if c["loop"] == "open"
        else f"closed loop, depth {c['depth']}" + (f", think {c['think_ms']:g} ms" if c["think_ms"] else "")
    )
    return f"`{c['name']}`: {c['connections']} connections, {what}, `GET {c['path']}<seq>`{service_text(c)}"


def class_tables(job, lr) -> list[str]:
    """Per client class: what it is, its comparison table, and its checks."""
    lines: list[str] = [load_line(lr)]
    for c in lr.load_spec["classes"]:
        name = c["name"]
        comps = lr.class_comparisons.get(name, [])
        figs = {
            arm: [r.classes[name] for r in lr.measured(arm) if r.classes and name in r.classes]
            for arm in ("A", "B")
        }
        n = min(len(figs["A"]), len(figs["B"]))
        pooled = any(x.estimator == "pooled" for x in comps)

        def samples(cmp, arm, figs=figs) -> str:
            return _samples(cmp, arm, lambda: [f[f"{cmp.metric.key}_samples"] for f in figs[arm]])

        lines += [
            "",
            f"### Class `{name}` ({c['loop']} loop): medians over {n} runs per arm"
            + ("; p99.9 and beyond pooled over each arm's runs" if pooled else ""),
            "",
            *comparison_table(job.arms, comps, samples, labels=CLASS_LABELS),
            "",
            _checks(c, figs),
        ]
    return lines


def _med(fs: list[dict], key: str) -> float:
    """The median of the runs' figure ``key`` where they have one (0 where none has)."""
    return median([f[key] for f in fs if f.get(key) is not None] or [0])


def _checks(c: dict, figs: dict) -> str:
    out = []
    for arm, fs in figs.items():
        if not fs:
            continue
        sat = sum(bool(f["saturated"]) for f in fs)
        errors = sum(sum(f["errors"].values()) for f in fs)
        part = f"arm {arm}: "
        if c["loop"] == "open":
            part += (
                f"achieved {_med(fs, 'rps'):,.0f} of {_med(fs, 'offered_rps'):,.0f} req/s offered (median)"
            )
            part += f", {sat} of {len(fs)} runs saturated" if sat else ", none saturated"
        else:
            part += f"{_med(fs, 'rps'):,.0f} req/s (median)"
        if c["loop"] == "open" or c["think_ms"]:
            part += f", client send lag p50 {ms(_med(fs, 'lag_p50'))} / p99 {ms(_med(fs, 'lag_p99'))} ms"
        if any(f.get("turnaround_p50") is not None for f in fs):
            t50, t99 = _med(fs, "turnaround_p50"), _med(fs, "turnaround_p99")
            part += f", client turnaround p50 {t50:,.0f} / p99 {t99:,.0f} us"
        part += f", {errors} errors" if errors else ""
        out.append(part)
    return "Checks: " + "; ".join(out) + "."


CLASS_NOTES = [
    "- Load client (`--workload`, `--load open`): `tailjob.loadgen` on uvloop, one process. Open-loop "
    "classes send on a schedule and every latency runs from the request's *intended* send time (wrk2's "
    "method), so a stall shows in every request scheduled during it; closed-loop classes measure from "
    "the batch's send (or, with think time, from the end of the think time). Each response is matched to "
    "its request by the echoed `<seq>`. Latencies are HdrHistogram values (3 significant digits).",
    "- Achieved req/s of a class: its answers that arrived inside the run, per second. An open-loop class "
    "achieving more than 2% less than offered is flagged `saturated`: the server did not keep up and the "
    "latencies grow with the run's length.",
    "- Client turnaround (a closed-loop class without think time): from the read that brought a batch's "
    "last answer to the write of the next batch, in the client process, medians of the runs' p50 and p99 "
    "(the kernel's delivery and the process's wake-up are not in it). The virtual-time tier models it as "
    "`client_us`.",
    "- Client send lag: how late the client sent requests whose connection was idle at their time (its "
    "timers have millisecond resolution, and it shares the machine); the lag is inside the latencies, as "
    "in wrk2. A run whose load generator (wrk or the client) used >= 90% of the CPU it can use while the "
    "server used less is flagged `generator-bound`: its figures describe the generator.",
    "- The latency probe's figures are per worker and blind to client classes: queue delays and "
    "tail_elevations cover every callback, and round time p50/p99 says how long a round takes (age-based "
    "dispatch can only reorder events inside a round longer than CWIST_REACTOR_TAIL_US).",
]
