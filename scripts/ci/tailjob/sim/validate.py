"""``validate``: the same A/B on the live tier and in virtual time, and whether they agree
(docs/en/sim-tier.md, "Validation against the live job").

:func:`main_validate` runs the live A/B, then the sim tier's of the same options (:func:`tiers`), and
compares the two tiers' legs in memory (:func:`compare`, on the main job's answer's pairing
:func:`tailjob.sim.answer.pair`): per leg, scope (the whole run, then each client class) and metric,
the two tiers' comparisons side by side and the outcome of the rule :data:`RULE` (:func:`outcome`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from .. import PROG, REPO, history, outputs
from .. import fail as _error
from ..plan import AbOptions, PlanError
from ..report import CLASS_LABELS
from ..runner import LegResult
from ..stats import EQUIVALENT, GAIN, INCONCLUSIVE, NO_VERDICT, REGRESSION, metric
from .answer import WHOLE_RUN, pair, ratio_text

AGREE, DISAGREE, LIVE_UNRESOLVED, SIM_UNRESOLVED = "agree", "disagree", "live unresolved", "sim unresolved"
OUTCOMES = (AGREE, DISAGREE, SIM_UNRESOLVED, LIVE_UNRESOLVED)
RESOLVED = (GAIN, REGRESSION, EQUIVALENT)
HISTORY_FILE = "tail-latency-validate.jsonl"
SCHEMA = 1

RULE = (
    "A row is compared only where the live run resolved it (`gain`, `regression` or `equivalent`); "
    "where the live verdict is `inconclusive` or `n/a` it is **live unresolved** and no agreement is "
    "claimed. A resolved row **agrees** when the sim calls the same verdict, or when the sim's B/A lies "
    "inside the live joint 95 % interval; it **disagrees** when the sim resolves it to another verdict "
    "with its B/A outside the live interval; it is **sim unresolved** when the sim calls `inconclusive` "
    "or `n/a` and its B/A (if any) is outside the live interval."
)


def _ci(ci) -> str:
    return "-" if not ci else f"{ci[0]:.3f}-{ci[1]:.3f}"


def outcome(live: dict, sim: dict) -> tuple[str, str]:
    """(outcome, why) of one metric from the two tiers' comparisons (``Comparison.as_dict()``)."""
    lv, sv, sr, ci = live["verdict"], sim["verdict"], sim.get("ratio"), live.get("ci")
    inside = sr is not None and ci is not None and ci[0] <= sr <= ci[1]
    where = ""
    if sr is not None and ci:
        where = f"; sim B/A {ratio_text(sr)} {'inside' if inside else 'outside'} the live interval {_ci(ci)}"
    if lv not in RESOLVED:  # what is known is said (the interval's width, where the sim falls), no claim
        if lv == INCONCLUSIVE and live.get("detectable"):
            return LIVE_UNRESOLVED, f"live {lv}: detectable ±{live['detectable']:.1%}{where}"
        return LIVE_UNRESOLVED, f"live {lv}" + (f": {live['reason']}" if live.get("reason") else "") + where
    if sv == lv:
        return AGREE, f"both {lv}{where}"
    if inside:
        return AGREE, f"live {lv}, sim {sv}{where}"
    return (SIM_UNRESOLVED if sv in (INCONCLUSIVE, NO_VERDICT) else DISAGREE), f"live {lv}, sim {sv}{where}"


def compare(live: list[LegResult], sim: list[LegResult]) -> list[dict]:
    """The validation table's rows: per pair (:func:`tailjob.sim.answer.pair`) both tiers compared,
    both ratios, intervals and verdicts, whether the sim's B/A is inside the live interval (None:
    either is missing), the outcome and why.  ``ValueError``: a live leg has no sim leg."""
    pairs = pair(live, sim)
    for lr in live:
        if not any(p[0] is lr for p in pairs):
            raise ValueError(f"the sim document has no leg like the live leg {lr.leg.name!r}")
    rows = []
    for live_leg, _, scope, live_c, sim_c in pairs:
        if live_c is None:  # the live job did not run this leg or metric
            continue
        lc, sc = live_c.as_dict(), sim_c.as_dict()
        what, why = outcome(lc, sc)
        lci, sr = lc["ci"], sc["ratio"]
        rows.append(
            {
                "leg": live_leg.leg.name,
                "scope": scope,
                "metric": lc["metric"],
                **{f"live_{k}": lc[k] for k in ("ratio", "ci", "verdict")},
                **{f"sim_{k}": sc[k] for k in ("ratio", "ci", "verdict")},
                "outcome": what,
                "why": why,
                "inside_live_interval": None if sr is None or not lci else lci[0] <= sr <= lci[1],
            }
        )
    return rows


def scope_name(scope: str | None) -> str:
    return "whole run" if scope is WHOLE_RUN else f"class {scope}"


def summary(rows: list[dict]) -> dict:
    """Counts by outcome, and the one-line answer."""
    counts = Counter(r["outcome"] for r in rows)
    resolved = len(rows) - counts[LIVE_UNRESOLVED]
    differ = [r for r in rows if r["outcome"] in (DISAGREE, SIM_UNRESOLVED)]
    bad = [f"{r['leg']} {scope_name(r['scope'])} {r['metric']}" for r in differ]
    if not resolved:
        answer = f"no comparison: the live run resolved none of the {len(rows)} metrics (all live unresolved)"
    elif bad:
        answer = (
            f"sim and live differ on {len(bad)} of the {resolved} metrics the live run resolved: "
            + ", ".join(bad)
        )
    elif resolved == 1:
        answer = "sim and live agree on the one metric the live run resolved"
    else:
        answer = f"sim and live agree on all {resolved} metrics the live run resolved"
    return {
        "counts": {k: counts[k] for k in OUTCOMES},
        "live_resolved": resolved,
        "rows": len(rows),
        "answer": answer,
    }


def table(rows: list[dict]) -> list[str]:
    """The validation table in Markdown, one block per leg (``rows``: :func:`compare`'s)."""
    lines: list[str] = []
    for leg in dict.fromkeys(r["leg"] for r in rows):
        lines += [
            f"### {leg}",
            "",
            "| Scope | Metric | Live B/A | Live interval | Live verdict | Sim B/A | Sim verdict | Outcome | Why |",
            "|---|---|---:|:---:|---|---:|---|---|---|",
        ]
        for r in (r for r in rows if r["leg"] == leg):
            label = (r["scope"] and CLASS_LABELS.get(r["metric"])) or metric(r["metric"]).label
            mark = f"**{r['outcome']}**" if r["outcome"] in (DISAGREE, SIM_UNRESOLVED) else r["outcome"]
            lines.append(
                f"| {scope_name(r['scope'])} | {label} | {ratio_text(r['live_ratio'])} | {_ci(r['live_ci'])} | "
                f"{r['live_verdict']} | {ratio_text(r['sim_ratio'])} | {r['sim_verdict']} | {mark} | {r['why']} |"
            )
        lines.append("")
    return lines


def render(doc: dict) -> str:
    """The validation report (``doc``: the result document :func:`main_validate` writes)."""
    live, sim, s, la, pv = doc["live"], doc["sim"], doc["summary"], doc["load_average"], doc["provenance"]
    return "\n".join(
        [
            "# Tail-latency job: validation of the sim tier against the live job",
            "",
            f"**{s['answer'][0].upper() + s['answer'][1:]}.**",
            "",
            "The same A/B ran twice: on the live tier (the bench server under load in wall-clock time) and "
            "on the sim tier (the same reactor and HTTP code in virtual time, docs/en/sim-tier.md). "
            "Each row sets one metric's live figures beside the sim's.",
            "",
            f"- Live: `{history.command(live['argv'])}`; result `{live['result']}`.",
            f"- Sim: `{history.command(sim['argv'])}`; result `{sim['result']}`.",
            f"- Code: commit {pv.get('git_commit', 'unknown')}{' (dirty)' if pv.get('git_dirty') else ''}; "
            f"started {doc['started_at']}, finished {doc['finished_at']} (wall clock).",
            f"- The live runs' machine: load average {la['before_live']:.2f} before them, "
            f"{la['after_live']:.2f} after (1-minute, {la['cpus']} CPUs); {live['polluted']} of "
            f"{live['measured']} measured live runs flagged `polluted` (other processes used more than the "
            "pollution limit). Live intervals, and so how many rows the live run resolves, depend on how "
            "quiet the machine was; the sim's figures do not.",
            "- Outcomes: "
            + ", ".join(f"{k} {n}" for k, n in s["counts"].items())
            + f" (of {s['rows']} rows).",
            "",
            "Rule: " + doc["rule"],
            "",
            "A sim rate given as a fraction of capacity (`0.7x`) is of the sim's own capacity, the live one "
            "of the live server's: both tiers run at the same load relative to what they can serve.",
            "",
            *table(doc["rows"]),
        ]
    )


def history_line(doc: dict, *, result_file: str) -> dict:
    """One line of ``tail-latency-validate.jsonl`` (:func:`tailjob.history.line`, tier ``both``)."""
    outcomes = {f"{r['leg']} / {scope_name(r['scope'])} / {r['metric']}": r["outcome"] for r in doc["rows"]}
    return history.line(
        "validate",
        "both",
        doc,
        result=result_file,
        live_result=doc["live"]["result"],
        sim_result=doc["sim"]["result"],
        summary=doc["summary"],
        outcomes=outcomes,
    )


MACHINE_ONLY = ("pin", "threads", "probe", "no_warmup", "server_cpus", "wrk_cpus", "pollution_limit")
"""Options only processes on a machine mean: the sim tier takes their defaults."""


def tiers(o: AbOptions) -> tuple[AbOptions, AbOptions]:
    """The live A/B and the sim tier's of ``validate``'s options ``o``: the live one without
    ``--sim-cost``, the sim one without :data:`MACHINE_ONLY`."""
    live = replace(o, tier="wall", sim_cost=None)
    defaults: dict[str, Any] = {f.name: f.default for f in fields(AbOptions) if f.name in MACHINE_ONLY}
    sim = replace(o, tier="sim", **defaults)
    return replace(live, argv=tuple(live.command())), replace(sim, argv=tuple(sim.command()))


def _rel(path: Path, out: Path) -> str:
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


def main_validate(o: AbOptions, run_ab: Callable[..., int]) -> int:
    """``validate`` (see the module docstring); ``run_ab(options, collect=dict)``: runs one A/B on its
    tier and gives its result (:func:`tailjob.cli.run_ab`).  Exit 0 done (whatever the outcomes),
    2 bad options, 3 a run failed."""
    from .cli import plan_sim
    from .costs import CostError

    live_o, sim_o = tiers(o)
    try:
        plan_sim(sim_o)  # the sim's options are checked before the live job runs
    except (PlanError, CostError) as e:
        return _error(str(e), 2)
    started, load = history.now(), [os.getloadavg()[0]]
    done: list[dict] = []  # what each tier's run_ab collected
    for first, what, tier in (
        ("", "the live A/B first", live_o),
        ("\n", "the same A/B in virtual time", sim_o),
    ):
        print(f"{first}{PROG}: validate: {what} ({history.command(tier.argv)})\n", flush=True)
        done.append({})
        code = run_ab(tier, collect=done[-1])
        if code:
            return code
        load.append(os.getloadavg()[0])
    live, sim = done
    try:
        rows = compare(live["legs"], sim["legs"])
    except ValueError as e:
        return _error(f"validate: {e}", 3)
    measured = [r for lr in live["legs"] for r in lr.measured()]
    pv = history.provenance(REPO, wrk_version="-")
    doc = {
        "schema": SCHEMA,
        "kind": "validate",
        "argv": list(o.argv),
        "rule": RULE,
        "live": {
            "argv": list(live_o.argv),
            "result": _rel(Path(live["result"]), o.out),
            "polluted": sum("polluted" in r.flags for r in measured),
            "measured": len(measured),
        },
        "sim": {"argv": list(sim_o.argv), "result": _rel(Path(sim["result"]), o.out)},
        "provenance": {k: pv[k] for k in ("git_commit", "git_dirty", "python", "kernel")},
        "started_at": started,
        "finished_at": history.now(),
        "load_average": {"before_live": load[0], "after_live": load[1], "cpus": os.cpu_count()},
        "summary": summary(rows),
        "rows": rows,
    }
    stem = history.stem(started, o.profile, live["document"]["ab"]) + "-validate"
    text = render(doc)
    files = outputs.write_files(o.out / "results", stem, {".md": text + "\n", ".json": outputs.dumps(doc)})
    line = history_line(doc, result_file=f"results/{files[1].name}")
    history.show("\n" + text, files, history.append_history(line, o.out, name=HISTORY_FILE))
    return 0
