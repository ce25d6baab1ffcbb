"""``--validate``: the live A/B beside the sim tier's, and the rule that says where they agree.

The rule (:func:`tailjob.sim.validate.outcome`) and the table (:func:`compare`) are tested on the legs
of result documents recorded from real runs (``fixtures/validate/``); the command itself on a short bounded
live run (one pair, so every row is ``live unresolved``: what is checked is what ran and what was
written, not a wall-clock figure).
"""

from __future__ import annotations

import json

import pytest
from tailjob_testdata import ROOT

from tailjob import stats
from tailjob.cli import main
from tailjob.plan import Leg
from tailjob.runner import LegResult
from tailjob.sim import validate
from tailjob.sim.validate import (
    AGREE,
    DISAGREE,
    LIVE_UNRESOLVED,
    SIM_UNRESOLVED,
    compare,
    outcome,
    tiers,
)

RECORDED = ROOT / "fixtures" / "validate"


def _c(verdict, ratio=None, ci=None, **kw):
    return {
        "verdict": verdict,
        "ratio": ratio,
        "ci": list(ci) if ci else None,
        "detectable": kw.get("detectable"),
        "reason": kw.get("reason", ""),
    }


@pytest.mark.parametrize(
    "live, sim, expected",
    [
        (_c("inconclusive", 1.2, (0.5, 2.0), detectable=0.75), _c("regression", 1.3), LIVE_UNRESOLVED),
        (_c("n/a", reason="needs 7 samples"), _c("gain", 0.5), LIVE_UNRESOLVED),
        (_c("gain", 0.48, (0.41, 0.55)), _c("gain", 0.38, (0.37, 0.39)), AGREE),  # same verdict, outside
        (_c("gain", 0.90, (0.85, 0.97)), _c("equivalent", 0.96), AGREE),  # inside the live interval
        (_c("equivalent", 1.0, (0.98, 1.03)), _c("equivalent", 1.04), AGREE),
        (_c("gain", 0.48, (0.41, 0.55)), _c("equivalent", 1.0, (1.0, 1.0)), DISAGREE),
        (_c("regression", 1.15, (1.08, 1.22)), _c("equivalent", 1.0, (1.0, 1.0)), DISAGREE),
        (_c("regression", 1.15, (1.08, 1.22)), _c("gain", 0.8), DISAGREE),
        (_c("equivalent", 1.0, (0.97, 1.02)), _c("n/a"), SIM_UNRESOLVED),
        (_c("gain", 0.5, (0.4, 0.6)), _c("inconclusive", 0.9, (0.6, 1.2)), SIM_UNRESOLVED),
        (_c("gain", 0.5, (0.4, 0.6)), _c("inconclusive", 0.55, (0.3, 1.2)), AGREE),  # its B/A inside
    ],
)
def test_the_agreement_rule(live, sim, expected):
    got, why = outcome(live, sim)
    assert got == expected, why
    assert live["verdict"] in why


def _recorded(name):
    return json.loads((RECORDED / name).read_text())


def _comparisons(table) -> list[stats.Comparison]:
    """A recorded table (a list, or a dict by metric) as the comparisons it was written from."""
    return [
        stats.Comparison(
            stats.metric(c["metric"]),
            **{k: v for k, v in c.items() if k not in ("metric", "ci")},
            ci=c["ci"] and tuple(c["ci"]),
        )
        for c in (table.values() if isinstance(table, dict) else table)
    ]


def _legs(doc) -> list[LegResult]:
    """The legs of a recorded result document of either tier, as the run that wrote it held them."""
    out = []
    for i, d in enumerate(doc["legs"]):
        a, b = d["backends"]["A"], d["backends"]["B"]
        leg = Leg(i, a, 1, d.get("leg", d).get("connections"), 1, 1)
        if a != b:
            leg = Leg(i, None, 1, leg.connections, 1, 1, arm_backends=(("A", a), ("B", b)))
        classes = d.get("class_comparisons") or d.get("classes") or {}
        out.append(
            LegResult(
                leg,
                (),
                {},
                {},
                [],
                [],
                _comparisons(d["comparisons"]),
                class_comparisons={k: _comparisons(v) for k, v in classes.items()},
            )
        )
    return out


def _compare(live_doc, sim_doc):
    return compare(_legs(live_doc), _legs(sim_doc))


def test_the_table_of_recorded_runs_pairs_every_scope_and_metric():
    live, sim = _recorded("live-mixed-epoll.json"), _recorded("sim-mixed-epoll.json")
    rows = _compare(live, sim)
    scopes = list(dict.fromkeys(r["scope"] for r in rows))
    assert scopes == [None, "interactive", "bulk"]  # None: the whole run
    [leg] = live["legs"]
    assert len(rows) == len(leg["comparisons"]) + sum(len(c) for c in leg["class_comparisons"].values())
    for r in rows:  # each row is its two documents' figures and the rule's outcome of them
        lc = next(
            c
            for c in (leg["comparisons"] if r["scope"] is None else leg["class_comparisons"][r["scope"]])
            if c["metric"] == r["metric"]
        )
        sc = (sim["legs"][0]["comparisons"] if r["scope"] is None else sim["legs"][0]["classes"][r["scope"]])[
            r["metric"]
        ]
        assert (r["live_ratio"], r["live_verdict"], r["sim_ratio"], r["sim_verdict"]) == (
            lc["ratio"],
            lc["verdict"],
            sc["ratio"],
            sc["verdict"],
        )
        assert (r["outcome"], r["why"]) == outcome(lc, sc)
        assert (r["live_ci"], r["sim_ci"]) == (lc["ci"], sc["ci"])


def test_a_cost_both_tiers_resolve_agrees_and_a_single_class_is_the_whole_run():
    # 200 us of injected service per request in arm B, open loop: the live CPU per request resolves
    # even on a loaded machine; nothing else did there.
    rows = _compare(_recorded("live-delay-epoll.json"), _recorded("sim-delay-epoll.json"))
    assert {r["scope"] for r in rows} == {None}  # the one class "all" is not a table of its own
    by_metric = {r["metric"]: r for r in rows}
    cpu = by_metric.pop("cpu_us_per_req")
    assert (cpu["live_verdict"], cpu["sim_verdict"], cpu["outcome"], cpu["inside_live_interval"]) == (
        "regression",
        "regression",
        AGREE,
        True,
    )
    assert {r["outcome"] for r in by_metric.values()} == {LIVE_UNRESOLVED}


def test_a_live_leg_left_to_auto_matches_the_sim_leg_and_a_missing_one_is_an_error():
    live, sim = _recorded("live-mixed-epoll.json"), _recorded("sim-mixed-epoll.json")
    live["legs"][0]["backends"] = {"A": None, "B": None}
    assert _compare(live, sim)
    live["legs"][0]["backends"] = {"A": "epoll", "B": "auto"}
    assert _compare(live, sim)
    sim["legs"][0]["connections"] = 128
    with pytest.raises(ValueError, match="no leg like the live leg"):
        _compare(live, sim)


def test_summary_names_the_rows_that_differ():
    rows = _compare(_recorded("live-mixed-epoll.json"), _recorded("sim-mixed-epoll.json"))
    s = validate.summary(rows)
    assert sum(s["counts"].values()) == len(rows) == s["rows"]
    assert s["live_resolved"] == len(rows) - s["counts"][LIVE_UNRESOLVED]
    for r in rows:
        named = f"{r['leg']} {validate.scope_name(r['scope'])} {r['metric']}"
        assert (named in s["answer"]) == (r["outcome"] in (DISAGREE, SIM_UNRESOLVED)) or r["outcome"] == AGREE


def test_each_tier_gets_the_options_that_mean_something_to_it(tmp_path):
    from tailjob.cli import AbOptions

    asked = AbOptions(
        out=tmp_path,
        workload="mixed",
        pin=True,
        threads=1,
        probe=True,
        sim_cost="request_us=20",
        duration=4,
        server_cpus="0",
    )
    live, sim = tiers(asked)
    assert (live.tier, live.sim_cost) == ("wall", None)
    assert (live.pin, live.threads, live.probe, live.duration) == (True, 1, True, 4)
    assert (sim.tier, sim.sim_cost, sim.duration, sim.workload) == ("sim", "request_us=20", 4, "mixed")
    assert (sim.pin, sim.threads, sim.probe) == (False, None, False)
    out = ["--out", str(tmp_path)]
    assert list(live.argv) == [
        "ab",
        "--threads",
        "1",
        "--duration",
        "4",
        "--workload",
        "mixed",
        "--pin",
        "--probe",
        *out,
    ]
    assert list(sim.argv) == [
        "ab",
        "--tier",
        "sim",
        "--duration",
        "4",
        "--workload",
        "mixed",
        "--sim-cost",
        "request_us=20",
        *out,
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tier", "sim"], "--tier: not an option of validate (an option of ab)"),
        (["--gate"], "--gate: not an option of validate (an option of ab, count)"),
        (["--a-ref", "HEAD"], "--a-ref: not an option of validate (an option of ab)"),
        (["--calibrate", "2"], "--calibrate: now a subcommand"),
        (["--workers", "2"], "--workers: not an option of validate (an option of ab, calibrate)"),
        (["--sim-cost", "request_us=-1"], "--sim-cost request_us=-1: accepted 0 to"),
        (["--workload", "mixed", "--load", "open"], "--load open: workload mixed sets its own load"),
        (["--pin", "--server-cpus", "99"], "--server-cpus '99': CPUs [99] are not available"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(argv, message, capsys, tmp_path):
    assert main(["validate", *argv, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("tail_latency: error: ") and message in captured.err
    assert captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_validate_runs_both_tiers_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "out"
    argv = [
        "validate",
        "--backend",
        "epoll",
        "--load",
        "open",
        "--rate",
        "300",
        "--connections",
        "4",
        "--duration",
        "1",
        "--runs",
        "1",
        "--no-warmup",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert (
        "validation of the sim tier against the live job" in text and "| Scope | Metric | Live B/A |" in text
    )
    [md] = (out / "results").glob("*-validate.md")
    [js] = (out / "results").glob("*-validate.json")
    doc = json.loads(js.read_text())
    assert doc["live"]["argv"] == [
        "ab",
        "--connections",
        "4",
        "--duration",
        "1",
        "--runs",
        "1",
        "--load",
        "open",
        "--rate",
        "300",
        "--backend",
        "epoll",
        "--no-warmup",
        "--out",
        str(out),
    ]
    assert doc["sim"]["argv"][:3] == ["ab", "--tier", "sim"] and "--no-warmup" not in doc["sim"]["argv"]
    live = json.loads((out / doc["live"]["result"]).read_text())
    sim = json.loads((out / doc["sim"]["result"]).read_text())
    assert live["legs"][0]["runs"] and sim["tier"] == "sim"
    assert doc["rows"] == _compare(live, sim)
    assert {r["outcome"] for r in doc["rows"]} == {LIVE_UNRESOLVED}  # one pair: the live run calls nothing
    assert doc["summary"]["answer"].startswith("no comparison")
    [line] = (out / validate.HISTORY_FILE).read_text().splitlines()
    hist = json.loads(line)
    assert hist["result"] == f"results/{js.name}" and hist["summary"] == doc["summary"]
    assert (hist["tier"], hist["kind"]) == ("both", "validate")
    assert md.read_text().startswith("# Tail-latency job: validation of the sim tier against the live job")
