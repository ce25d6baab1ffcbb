"""``validate``: the same A/B on the live tier and in virtual time, and whether they agree.

Role
----
The sim tier answers in virtual time; the validation says where that answer
is the live job's.  :func:`main_validate` runs the live A/B (the job exactly
as ``scripts/tail-latency.sh`` with the same options runs it: its report,
JSON and history line) and then the sim tier's (``--tier sim`` with the same
options: the same profile, arms, backends, workload, load, connections,
duration, runs as seeds, seed and minimum effects), reads back the two result
documents, and compares them row by row: per leg, per scope (the whole run,
then each client class) and per metric, the live B/A, interval and verdict
beside the sim's B/A and verdict, and an outcome (:func:`outcome`):

* **live unresolved** -- the live verdict is ``inconclusive`` or ``n/a``: the
  live run cannot tell, so no comparison is claimed;
* **agree** -- the live run resolved it (``gain``, ``regression`` or
  ``equivalent``) and the sim calls the same verdict, or its B/A lies inside
  the live interval;
* **sim unresolved** -- the live run resolved it, the sim did not
  (``inconclusive`` or ``n/a``) and its B/A, if any, is outside the live
  interval;
* **disagree** -- both resolved it, to different verdicts, and the sim's B/A
  is outside the live interval.

The comparison (:func:`compare`) reads only the two result documents, so it
is tested on recorded ones (``fixtures/validate/``); :func:`main_validate` gives it the two
documents the tiers return, in memory.  Writes
``<out>/results/<stem>-validate.md`` and ``.json`` beside the two tiers' own
files, and appends one line to ``<out>/tail-latency-validate.jsonl``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from .. import PROG, REPO, history
from .. import fail as _error
from ..plan import AbOptions, PlanError
from ..stats import EQUIVALENT, GAIN, INCONCLUSIVE, NO_VERDICT, REGRESSION, metric

__all__ = [
    "Row",
    "outcome",
    "compare",
    "render",
    "main_validate",
    "tiers",
    "AGREE",
    "DISAGREE",
    "LIVE_UNRESOLVED",
    "SIM_UNRESOLVED",
    "HISTORY_FILE",
    "RULE",
]

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


@dataclass(frozen=True)
class Row:
    """One metric of one scope (``all`` or a class name) of one leg: both tiers' figures, the outcome."""

    leg: str
    scope: str | None  # a client class, or None: the whole run
    metric: str
    live_ratio: float | None
    live_ci: tuple[float, float] | None
    live_verdict: str
    sim_ratio: float | None
    sim_ci: tuple[float, float] | None
    sim_verdict: str
    outcome: str
    why: str

    @property
    def inside(self) -> bool | None:
        """The sim's B/A inside the live interval (None: either is missing)."""
        if self.sim_ratio is None or self.live_ci is None:
            return None
        return self.live_ci[0] <= self.sim_ratio <= self.live_ci[1]

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "live_ci": list(self.live_ci) if self.live_ci else None,
            "sim_ci": list(self.sim_ci) if self.sim_ci else None,
            "inside_live_interval": self.inside,
        }


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _ci(ci) -> str:
    return "-" if not ci else f"{ci[0]:.3f}-{ci[1]:.3f}"


def outcome(live: dict, sim: dict) -> tuple[str, str]:
    """(outcome, why) of one metric from the two tiers' comparisons (``Comparison.as_dict()``)."""
    lv, sv, sr, ci = live["verdict"], sim["verdict"], sim.get("ratio"), live.get("ci")
    inside = sr is not None and ci is not None and ci[0] <= sr <= ci[1]
    where = (
        f"sim B/A {_r(sr)} inside the live interval {_ci(ci)}"
        if inside
        else f"sim B/A {_r(sr)} outside the live interval {_ci(ci)}"
        if sr is not None and ci
        else ""
    )
    if (
        lv not in RESOLVED
    ):  # what is known is said (the interval's width, where the sim falls), nothing claimed
        why = (
            f"live {lv}: detectable ±{live['detectable']:.1%}"
            if lv == INCONCLUSIVE and live.get("detectable")
            else f"live {lv}" + (f": {live['reason']}" if live.get("reason") else "")
        )
        return LIVE_UNRESOLVED, why + (f"; {where}" if where else "")
    if sv == lv:
        return AGREE, f"both {lv}" + (f"; {where}" if where else "")
    if inside:
        return AGREE, f"live {lv}, sim {sv}; {where}"
    if sv in (INCONCLUSIVE, NO_VERDICT):
        return SIM_UNRESOLVED, f"live {lv}, sim {sv}" + (f"; {where}" if where else "")
    return DISAGREE, f"live {lv}, sim {sv}" + (f"; {where}" if where else "")


WHOLE_RUN = None
"""The scope of the whole run's table (a class's is its name)."""


def _live_tables(leg: dict) -> dict[str | None, dict[str, dict]]:
    """A live leg's comparisons by scope and metric key (``tailjob.runner.LegResult.as_dict``).  A
    single class's table repeats the whole run's: left out (the sim tier does not make one)."""
    classes = leg.get("class_comparisons") or {}
    out: dict[str | None, dict[str, dict]] = {WHOLE_RUN: {c["metric"]: c for c in leg["comparisons"]}}
    if len(classes) > 1:
        out.update({name: {c["metric"]: c for c in comps} for name, comps in classes.items()})
    return out


def _sim_tables(leg: dict) -> dict[str | None, dict[str, dict]]:
    """A sim leg's comparisons by scope and metric key (``tailjob.sim.report.result_document``)."""
    classes = leg.get("classes") or {}
    return {
        WHOLE_RUN: dict(leg["comparisons"]),
        **({name: dict(c) for name, c in classes.items()} if len(classes) > 1 else {}),
    }


def _leg_key(leg: dict) -> tuple:
    """(connections, arm A's backend, arm B's) of a leg of either document; a backend left to ``auto``
    on the live tier (None or ``auto``) matches any: the sim tier names the one ``auto`` chose."""
    conns = leg["connections"] if "connections" in leg else leg["leg"]["connections"]
    return conns, leg["backends"]["A"], leg["backends"]["B"]


def _matches(live_key: tuple, sim_key: tuple) -> bool:
    return all(lv in (None, "auto") or lv == sv for lv, sv in zip(live_key, sim_key))


def compare(live_doc: dict, sim_doc: dict) -> list[Row]:
    """Every row of the validation table (see the module docstring): the live document's legs, in
    order, each against the sim leg of the same connections and backends; a scope or metric one tier
    lacks is left out.  ``ValueError`` when a live leg has no sim leg to compare with."""
    rows = []
    sim_legs = list(sim_doc["legs"])
    for leg in live_doc["legs"]:
        match = next((s for s in sim_legs if _matches(_leg_key(leg), _leg_key(s))), None)
        if match is None:
            raise ValueError(f"the sim document has no leg like the live leg {leg['name']!r}")
        sim_legs.remove(match)
        live_t, sim_t = _live_tables(leg), _sim_tables(match)
        for scope, comps in live_t.items():
            for key, lc in comps.items():
                sc = sim_t.get(scope, {}).get(key)
                if sc is None:
                    continue
                what, why = outcome(lc, sc)
                rows.append(
                    Row(
                        leg["name"],
                        scope,
                        key,
                        lc.get("ratio"),
                        _tuple(lc.get("ci")),
                        lc["verdict"],
                        sc.get("ratio"),
                        _tuple(sc.get("ci")),
                        sc["verdict"],
                        what,
                        why,
                    )
                )
    return rows


def _tuple(ci) -> tuple[float, float] | None:
    return (ci[0], ci[1]) if ci else None


def summary(rows: list[Row]) -> dict:
    """Counts by outcome, and the one-line answer."""
    counts = Counter(r.outcome for r in rows)
    resolved = len(rows) - counts[LIVE_UNRESOLVED]
    if not resolved:
        answer = f"no comparison: the live run resolved none of the {len(rows)} metrics (all live unresolved)"
    elif counts[DISAGREE] or counts[SIM_UNRESOLVED]:
        bad = [
            f"{r.leg} {scope_name(r.scope)} {r.metric}"
            for r in rows
            if r.outcome in (DISAGREE, SIM_UNRESOLVED)
        ]
        answer = (
            f"sim and live differ on {counts[DISAGREE] + counts[SIM_UNRESOLVED]} of the {resolved} metrics "
            f"the live run resolved: " + ", ".join(bad)
        )
    else:
        answer = (
            "sim and live agree on the one metric the live run resolved"
            if resolved == 1
            else f"sim and live agree on all {resolved} metrics the live run resolved"
        )
    return {
        "counts": {k: counts[k] for k in OUTCOMES},
        "live_resolved": resolved,
        "rows": len(rows),
        "answer": answer,
    }


def scope_name(scope: str | None) -> str:
    return "whole run" if scope is WHOLE_RUN else f"class {scope}"


def _label(scope: str | None, key: str) -> str:
    label = metric(key).label
    return "Achieved req/s" if scope is not WHOLE_RUN and key == "rps" else label


def table(rows: list[Row]) -> list[str]:
    """The validation table in Markdown, one block per leg."""
    lines: list[str] = []
    for leg in dict.fromkeys(r.leg for r in rows):
        lines += [
            f"### {leg}",
            "",
            "| Scope | Metric | Live B/A | Live interval | Live verdict | Sim B/A | Sim verdict | Outcome | Why |",
            "|---|---|---:|:---:|---|---:|---|---|---|",
        ]
        for r in (r for r in rows if r.leg == leg):
            mark = f"**{r.outcome}**" if r.outcome in (DISAGREE, SIM_UNRESOLVED) else r.outcome
            lines.append(
                f"| {scope_name(r.scope)} | {_label(r.scope, r.metric)} | {_r(r.live_ratio)} | {_ci(r.live_ci)} | "
                f"{r.live_verdict} | {_r(r.sim_ratio)} | {r.sim_verdict} | {mark} | {r.why} |"
            )
        lines.append("")
    return lines


def polluted(live_doc: dict) -> tuple[int, int]:
    """(measured live runs flagged ``polluted``, measured live runs)."""
    runs = [r for leg in live_doc["legs"] for r in leg.get("runs", ()) if not r.get("warmup")]
    return sum("polluted" in r.get("flags", ()) for r in runs), len(runs)


def render(doc: dict) -> str:
    """The validation report (``doc``: :func:`document`'s)."""
    live, sim, s = doc["live"], doc["sim"], doc["summary"]
    la = doc["load_average"]
    lines = [
        "# Tail-latency job: validation of the sim tier against the live job",
        "",
        f"**{s['answer'][0].upper() + s['answer'][1:]}.**",
        "",
        "The same A/B ran twice: on the live tier (the bench server under load in wall-clock time) and "
        "on the sim tier (the same reactor and HTTP code in virtual time, docs/en/sim-tier.md). "
        "Each row sets one metric's live figures beside the sim's.",
        "",
        f"- Live: `scripts/tail-latency.sh {' '.join(live['argv'])}`; result `{live['result']}`.",
        f"- Sim: `scripts/tail-latency.sh {' '.join(sim['argv'])}`; result `{sim['result']}`.",
        f"- Code: commit {doc['provenance'].get('git_commit', 'unknown')}"
        + (" (dirty)" if doc["provenance"].get("git_dirty") else "")
        + f"; started {doc['started_at']}, "
        f"finished {doc['finished_at']} (wall clock).",
        f"- The live runs' machine: load average {la['before_live']:.2f} before them, {la['after_live']:.2f} "
        f"after (1-minute, {la['cpus']} CPUs); {live['polluted']} of {live['measured']} measured live runs "
        "flagged `polluted` (other processes used more than the pollution limit). Live intervals, and so "
        "how many rows the live run resolves, depend on how quiet the machine was; the sim's figures do "
        "not.",
        "- Outcomes: " + ", ".join(f"{k} {n}" for k, n in s["counts"].items()) + f" (of {s['rows']} rows).",
        "",
        "Rule: " + doc["rule"],
        "",
        "A sim rate given as a fraction of capacity (`0.7x`) is of the sim's own capacity, the live one of "
        "the live server's: both tiers run at the same load relative to what they can serve.",
        "",
    ]
    lines += table(
        [
            Row(**{**r, "live_ci": _tuple(r["live_ci"]), "sim_ci": _tuple(r["sim_ci"])})
            for r in ({k: v for k, v in row.items() if k != "inside_live_interval"} for row in doc["rows"])
        ]
    )
    return "\n".join(lines)


def document(
    rows,
    *,
    live: dict,
    sim: dict,
    provenance: dict,
    started: str,
    finished: str,
    argv: list[str],
    load_average: dict,
) -> dict:
    return {
        "schema": SCHEMA,
        "kind": "validate",
        "argv": argv,
        "rule": RULE,
        "live": live,
        "sim": sim,
        "provenance": provenance,
        "started_at": started,
        "finished_at": finished,
        "load_average": load_average,
        "summary": summary(rows),
        "rows": [r.as_dict() for r in rows],
    }


def history_line(doc: dict, *, result_file: str) -> dict:
    """One line of ``tail-latency-validate.jsonl`` (:func:`tailjob.history.line`, tier ``both``)."""
    return history.line(
        "validate",
        "both",
        doc,
        result=result_file,
        live_result=doc["live"]["result"],
        sim_result=doc["sim"]["result"],
        summary=doc["summary"],
        outcomes={
            f"{r['leg']} / {scope_name(r['scope'])} / {r['metric']}": r["outcome"] for r in doc["rows"]
        },
    )


# -- the command -------------------------------------------------------------------------------------


def tiers(o: AbOptions) -> tuple[AbOptions, AbOptions]:
    """The live A/B and the sim tier's of ``validate``'s options ``o``: the live one without
    ``--sim-cost``, the sim one without what only processes on a machine mean (pinning, wrk threads,
    the probe, the warm-up, the CPU lists, the pollution limit)."""
    live = replace(o, tier="wall", sim_cost=None)
    sim = replace(
        o,
        tier="sim",
        pin=False,
        threads=None,
        probe=False,
        no_warmup=False,
        server_cpus="0",
        wrk_cpus="1",
        pollution_limit=0.10,
    )
    return replace(live, argv=tuple(live.command())), replace(sim, argv=tuple(sim.command()))


def _rel(path: Path, out: Path) -> str:
    try:
        return str(path.relative_to(out))
    except ValueError:
        return str(path)


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
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    load = [os.getloadavg()[0]]
    live: dict = {}
    sim: dict = {}
    for first, what, tier, done in (
        ("", "the live A/B first", live_o, live),
        ("\n", "the same A/B in virtual time", sim_o, sim),
    ):
        print(
            f"{first}{PROG}: validate: {what} (scripts/tail-latency.sh {' '.join(tier.argv)})\n", flush=True
        )
        code = run_ab(tier, collect=done)
        if code:
            return code
        load.append(os.getloadavg()[0])
    try:
        rows = compare(live["document"], sim["document"])
    except ValueError as e:
        return _error(f"validate: {e}", 3)
    n_polluted, measured = polluted(live["document"])
    pv = history.provenance(REPO, wrk_version="-")
    doc = document(
        rows,
        argv=list(o.argv),
        started=started,
        finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        live={
            "argv": list(live_o.argv),
            "result": _rel(Path(live["result"]), o.out),
            "polluted": n_polluted,
            "measured": measured,
        },
        sim={"argv": list(sim_o.argv), "result": _rel(Path(sim["result"]), o.out)},
        provenance={k: pv[k] for k in ("git_commit", "git_dirty", "python", "kernel")},
        load_average={"before_live": load[0], "after_live": load[1], "cpus": os.cpu_count()},
    )
    _write(doc, o.out, history.stem(started, o.profile, live["document"]["ab"]) + "-validate")
    return 0


def _write(doc: dict, out: Path, stem: str) -> None:
    """The validation's report and JSON under ``<out>/results/``, its history line, the file list."""
    md, js = out / "results" / f"{stem}.md", out / "results" / f"{stem}.json"
    text = render(doc)
    md.write_text(text + "\n")
    js.write_text(json.dumps(doc, indent=1) + "\n")
    jsonl = history.append_history(
        history_line(doc, result_file=f"results/{js.name}"), out, name=HISTORY_FILE
    )
    history.show("\n" + text, (md, js), jsonl)
