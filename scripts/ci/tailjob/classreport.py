"""The report's sections for runs on the load client: the load, the capacity, and each client class.

Role
----
With ``--workload`` or ``--load open`` (:mod:`tailjob.openloop`) each leg gets,
after its table of the whole run:

* one line with the capacity run (for a rate like ``0.7x``) and the load
  offered;
* per client class, a table in the shape of the leg's: medians per arm over
  the runs, B/A, interval and verdict (:func:`tailjob.runner.compare_leg` with
  the class), preceded by what the class is (loop, connections, offered rate)
  and followed by what checks it: achieved against offered, runs flagged
  ``saturated``, the client's send lag.

Verdicts come from :mod:`tailjob.stats`, as the leg's.
"""

from __future__ import annotations

from .metrics import POOLED_KEYS, ci_text, format_value, ms
from .stats import median
from .workloads import CAPACITY_S

__all__ = ["load_line", "class_tables", "NOTES"]


def load_line(lr) -> str:
    """'Load: ... Capacity (closed loop, wrk ..., arm A): N req/s.' for a leg run on the load client."""
    parts = []
    if lr.capacity:
        parts.append(f"capacity measured first, closed loop `wrk -t{lr.leg.threads} -c{lr.leg.connections} "
                     f"-d{CAPACITY_S}s` "
                     f"on arm {lr.capacity['arm']}: **{lr.capacity['rps']:,.0f} req/s**"
                     + (f" (flagged {', '.join(lr.capacity['flags'])})" if lr.capacity["flags"] else ""))
    for c in lr.load_spec["classes"]:
        what = (f"open loop, {c['schedule']}, {c['rate']:,.0f} req/s offered" if c["loop"] == "open" else
                f"closed loop, depth {c['depth']}" + (f", think {c['think_ms']:g} ms" if c["think_ms"] else ""))
        parts.append(f"`{c['name']}`: {c['connections']} connections, {what}, `GET {c['path']}<seq>`")
    return "Load (tailjob.loadgen, " + f"{lr.load_spec['duration_s']:g} s per run): " + "; ".join(parts) + "."


def class_tables(job, lr) -> list[str]:
    """Per client class: what it is, its comparison table, and its checks."""
    a, b = job.arms
    lines: list[str] = [load_line(lr)]
    for c in lr.load_spec["classes"]:
        name = c["name"]
        comps = lr.class_comparisons.get(name, [])
        figs = {arm: [r.classes[name] for r in lr.measured(arm) if r.classes and name in r.classes]
                for arm in ("A", "B")}
        n = min(len(figs["A"]), len(figs["B"]))
        pooled = any(getattr(x, "estimator", "median") == "pooled" for x in comps)
        lines += ["", f"### Class `{name}` ({c['loop']} loop): medians over {n} runs per arm"
                  + ("; p99.9 and beyond pooled over each arm's runs" if pooled else ""), "",
                  f"| Metric | A: {a.label} | B: {b.label} | B/A | Joint 95% CI | Min. effect | Detectable "
                  "| Pairs needed | Verdict |",
                  "|---|---:|---:|---:|:---:|---:|---:|---:|---|"]
        for cmp in comps:
            key = cmp.metric.key
            label = "Achieved req/s" if key == "rps" else cmp.metric.label
            sa_txt = sb_txt = ""
            if getattr(cmp, "estimator", "median") == "pooled":  # the samples of each arm's merged histogram
                sa_txt = "" if cmp.samples_a is None else f" ({cmp.samples_a:,})"
                sb_txt = "" if cmp.samples_b is None else f" ({cmp.samples_b:,})"
            elif key in POOLED_KEYS:  # the median run's
                sa = [f[f"{key}_samples"] for f in figs["A"]]
                sb = [f[f"{key}_samples"] for f in figs["B"]]
                if sa and sb:
                    sa_txt, sb_txt = f" ({median(sa):.0f})", f" ({median(sb):.0f})"
            ratio = "-" if cmp.ratio is None else f"{cmp.ratio:.3f}"
            detectable = "-" if getattr(cmp, "detectable", None) is None else f"±{cmp.detectable:.1%}"
            needed = "-" if getattr(cmp, "pairs_needed", None) is None else str(cmp.pairs_needed)
            verdict = f"**{cmp.verdict}**" if cmp.verdict in ("regression", "inconclusive") else cmp.verdict
            lines.append(f"| {label} | {format_value(key, cmp.median_a)}{sa_txt} | {format_value(key, cmp.median_b)}{sb_txt} "
                         f"| {ratio} | {ci_text(cmp)} | {cmp.min_effect:.0%} | {detectable} | {needed} | {verdict} |")
        lines += ["", _checks(c, figs)]
    return lines


def _checks(c: dict, figs: dict) -> str:
    out = []
    for arm in ("A", "B"):
        fs = figs[arm]
        if not fs:
            continue
        sat = sum(bool(f["saturated"]) for f in fs)
        errors = sum(sum(f["errors"].values()) for f in fs)
        part = f"arm {arm}: "
        if c["loop"] == "open":
            offered = median([f["offered_rps"] for f in fs])
            achieved = median([f["rps"] for f in fs])
            part += f"achieved {achieved:,.0f} of {offered:,.0f} req/s offered (median)"
            part += f", {sat} of {len(fs)} runs saturated" if sat else ", none saturated"
        else:
            part += f"{median([f['rps'] for f in fs]):,.0f} req/s (median)"
        lag50 = median([f["lag_p50"] for f in fs if f["lag_p50"] is not None] or [0])
        lag99 = median([f["lag_p99"] for f in fs if f["lag_p99"] is not None] or [0])
        if c["loop"] == "open" or c["think_ms"]:
            part += f", client send lag p50 {ms(lag50)} / p99 {ms(lag99)} ms"
        part += f", {errors} errors" if errors else ""
        out.append(part)
    return "Checks: " + "; ".join(out) + "."


NOTES = [
    "- Load client (`--workload`, `--load open`): `tailjob.loadgen` on uvloop, one process. Open-loop "
    "classes send on a schedule and every latency runs from the request's *intended* send time (wrk2's "
    "method), so a stall shows in every request scheduled during it; closed-loop classes measure from "
    "the batch's send (or, with think time, from the end of the think time). Each response is matched to "
    "its request by the echoed `<seq>`. Latencies are HdrHistogram values (3 significant digits).",
    "- Achieved req/s of a class: its answers that arrived inside the run, per second. An open-loop class "
    "achieving more than 2% less than offered is flagged `saturated`: the server did not keep up and the "
    "latencies grow with the run's length.",
    "- Client send lag: how late the client sent requests whose connection was idle at their time (its "
    "timers have millisecond resolution, and it shares the machine); the lag is inside the latencies, as "
    "in wrk2. A run whose load generator (wrk or the client) used >= 90% of the CPU it can use while the "
    "server used less is flagged `generator-bound`: its figures describe the generator.",
    "- The latency probe's figures are per worker and blind to client classes: queue delays and "
    "tail_elevations cover every callback, and round time p50/p99 says how long a round takes (age-based "
    "dispatch can only reorder events inside a round longer than CWIST_REACTOR_TAIL_US).",
]
