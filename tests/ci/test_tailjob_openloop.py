"""The job on the load client: load options, workloads, per-class comparison and report, flags.

Pure parts are checked exactly; the end-to-end tests run the real job (tiny: 1 run of 1 s per arm)
and assert what the report and the records contain, never timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from tailjob_testdata import CI_DIR

from tailjob import metrics, report, runner, workloads
from tailjob.loadspec import LoadRunResult
from tailjob.measure import generator_bound
from tailjob.plan import Leg, PlanError
from tailjob.workloads import LoadPlan, parse_rate, plan_load


# -- options ------------------------------------------------------------------------
def test_rate_is_requests_per_second_or_a_fraction_of_capacity():
    assert parse_rate("2000") == (2000.0, False)
    assert parse_rate("0.7x") == (0.7, True)
    for bad in ("", "0", "-5", "x", "0.7X", "fast", "11x", "1e3"):
        with pytest.raises(PlanError, match="--rate"):
            parse_rate(bad)


def test_uniform_closed_loop_is_todays_job_and_open_loop_defaults_to_0_7x():
    assert plan_load("uniform", None, None, None) is None
    assert plan_load("uniform", "closed", None, None) is None
    assert plan_load("uniform", "open", None, None) == LoadPlan("uniform", "0.7x", "poisson")
    assert plan_load("uniform", "open", "1500", "constant") == LoadPlan("uniform", "1500", "constant")
    assert plan_load("mixed", None, None, None) == LoadPlan("mixed", "200", "poisson")
    assert plan_load("slow-route", None, None, None).rate == "0.5x"
    assert plan_load("think-time", None, None, None) == LoadPlan("think-time", None, "poisson")


@pytest.mark.parametrize(
    "args,words",
    [
        (("uniform", None, "2000", None), "--rate needs open-loop load: add --load open"),
        (("uniform", "closed", None, "constant"), "--schedule needs open-loop load"),
        (("mixed", "open", None, None), "workload mixed sets its own load"),
        (("think-time", None, "100", None), "workload think-time has no open-loop class"),
        (("mixed", None, "lots", None), "--rate 'lots'"),
    ],
)
def test_contradicting_load_options_are_refused_with_one_line(args, words):
    with pytest.raises(PlanError, match=words):
        plan_load(*args)


# -- workloads ----------------------------------------------------------------------
def test_mixed_is_bulk_pipelining_beside_few_open_loop_interactive_clients():
    inter, bulk = workloads.classes_for("mixed", connections=64, rate_rps=200.0)
    assert (inter.name, inter.loop, inter.connections, inter.rate, inter.depth) == (
        "interactive",
        "open",
        8,
        200.0,
        1,
    )
    assert (bulk.name, bulk.loop, bulk.connections, bulk.depth) == ("bulk", "closed", 16, 16)
    # every request costs service time, so the bulk class saturates the server and rounds grow long
    assert LoadPlan("mixed", "200").server_env() == {"CWIST_BENCH_DELAY_US": str(workloads.MIXED_SERVICE_US)}


def test_slow_route_splits_the_rate_and_sets_the_slow_knob_for_the_server():
    fast, slow = workloads.classes_for("slow-route", connections=64, rate_rps=10_000.0)
    assert fast.rate + slow.rate == pytest.approx(10_000.0)
    assert slow.rate == pytest.approx(100.0) and slow.path == "/slow/" and fast.path == "/user/"
    assert LoadPlan("slow-route", "0.5x").server_env() == {"CWIST_BENCH_SLOW_US": "2000"}


def test_think_time_has_many_idle_connections():
    (all_,) = workloads.classes_for("think-time", connections=64, rate_rps=None)
    assert (all_.connections, all_.loop, all_.think_ms) == (256, "closed", workloads.THINK_MS)


def test_relative_rate_is_resolved_against_the_capacity_run():
    leg = Leg(0, "epoll", 2, 64, 2, 8)
    spec = LoadPlan("uniform", "0.5x").spec(leg, capacity_rps=30_000.0, seed=4)
    (c,) = spec.classes
    assert (c.rate, c.connections, spec.duration_s, spec.seed) == (15_000.0, 64, 2.0, 4)
    with pytest.raises(PlanError, match="capacity run completed no request"):
        LoadPlan("uniform", "0.5x").spec(leg, capacity_rps=0.0, seed=4)


# -- flags ----------------------------------------------------------------------------
def test_generator_bound_when_the_generator_is_busy_and_the_server_is_not():
    assert generator_bound(generator_busy=0.95, server_busy=0.5) is True
    assert generator_bound(generator_busy=0.95, server_busy=0.95) is False  # both busy: saturated
    assert generator_bound(generator_busy=0.5, server_busy=0.25) is False  # neither
    r = LoadRunResult(
        {
            **_doc(),
            "processes": [{"classes": ["interactive"], "busy": 0.05}, {"classes": ["bulk"], "busy": 0.97}],
        }
    )
    assert r.generator_busy == 0.97  # the busiest process counts: each has one thread


def _doc(*, inter_p99=5000, saturated=False, mismatch=0):
    def cls(name, loop, p99, answered, offered_rps):
        pct = [
            {"p": p, "us": p99 if p >= 99 else 100, "samples": 10}
            for p in (50, 75, 90, 99, 99.9, 99.99, 99.999)
        ]
        return {
            "name": name,
            "loop": loop,
            "connections": 8,
            "offered": answered,
            "sent": answered,
            "answered": answered,
            "answered_in_window": answered,
            "duration_us": 2_000_000,
            "offered_rps": offered_rps,
            "achieved_rps": answered / 2,
            "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 1, "mismatch": mismatch},
            "latency": {"count": answered, "min": 50, "max": p99, "mean": 200.0, "percentiles": pct},
            "lag": {"count": answered, "min": 1, "max": 900, "mean": 300.0, "percentiles": pct},
            "saturated": saturated,
        }

    inter = cls("interactive", "open", inter_p99, 400, 200.0)
    bulk = cls("bulk", "closed", 30000, 40000, None)
    merged = {
        **cls("all", "mixed", 30000, 40400, None),
        "errors": {k: inter["errors"][k] + bulk["errors"][k] for k in inter["errors"]},
    }
    return {"classes": {"interactive": inter, "bulk": bulk}, "all": merged}


def test_load_run_result_answers_like_wrks_and_keeps_the_classes():
    r = LoadRunResult(_doc(mismatch=2))
    assert (r.requests, r.rps) == (40400, 20200.0)
    assert r.percentile(99).us == 30000
    assert r.errors == {"connect": 0, "read": 4, "write": 0, "status": 0, "timeout": 2}  # mismatch -> read
    assert r.socket_errors == 6 and r.saturated is False
    m = r.class_metrics()
    assert m["interactive"]["rps"] == 200.0 and m["interactive"]["p99"] == 5000
    assert m["bulk"]["offered_rps"] is None and "cpu_us_per_req" not in m["bulk"]
    assert LoadRunResult(_doc(saturated=True)).saturated is True


# -- comparison and report --------------------------------------------------------------
@pytest.fixture
def mixed_job(synthetic_job):
    """The synthetic job as a mixed workload: B halves the interactive class's p99, bulk unchanged."""
    lr = synthetic_job.legs[0]
    runs = []
    for r in lr.runs:
        doc = _doc(inter_p99=(2500 if r.arm == "B" else 5000) + 10 * r.trial)
        runs.append(replace(r, classes=LoadRunResult(doc).class_metrics()))
    plan = LoadPlan("mixed", "200")
    spec = plan.spec(lr.leg, capacity_rps=None, seed=1)
    leg = replace(lr, runs=runs, load_spec=__import__("dataclasses").asdict(spec))
    leg.class_comparisons = {c.name: runner.compare_leg(runs, seed=1, klass=c.name) for c in spec.classes}
    return replace(synthetic_job, legs=[leg], settings=replace(synthetic_job.settings, load=plan))


def test_per_class_comparison_finds_the_interactive_gain_and_leaves_bulk_alone(mixed_job):
    comps = {name: {c.metric.key: c for c in cs} for name, cs in mixed_job.legs[0].class_comparisons.items()}
    assert list(comps["interactive"]) == list(metrics.CLASS_METRICS)
    assert comps["interactive"]["p99"].verdict == "gain"
    assert comps["interactive"]["p99"].ratio == pytest.approx(0.5, rel=0.01)
    assert comps["bulk"]["p99"].ratio == pytest.approx(1.0)
    assert comps["bulk"]["p99"].verdict == "equivalent"
    assert "gain" in mixed_job.verdicts()


def test_report_has_a_table_per_class_with_its_checks(mixed_job):
    text = report.render(mixed_job, runs=False)
    assert "- Workload: workload `mixed`" in text
    assert "## epoll, c64: the load client, 2 s per run, all classes together, medians over 8 runs" in text
    assert "  - class `interactive`: gain on 4: p99 ms (-49.7%)" in text
    assert "  - class `bulk`: equivalent on 6:" in text
    assert "### Class `interactive` (open loop): medians over 8 runs per arm" in text
    assert "### Class `bulk` (closed loop): medians over 8 runs per arm" in text
    section = text.split("### Class `interactive`")[1].split("### Class `bulk`")[0]
    assert "| Achieved req/s | 200 | 200 |" in section
    assert "achieved 200 of 200 req/s offered (median), none saturated" in section
    assert "`interactive`: 8 connections, open loop, poisson, 200 req/s offered" in text
    assert "intended* send time" in text and "wrk's histogram of its own requests" not in text


# -- the real job -------------------------------------------------------------------------
def _job(tmp_path, *args):
    return subprocess.run(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            *args,
            "--threads",
            "1",
            "--duration",
            "1",
            "--runs",
            "1",
            "--no-warmup",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_mixed_ab_reports_interactive_and_bulk_separately_with_the_probe(tmp_path):
    out = _job(tmp_path, "--workload", "mixed", "--ab", "tail", "--backend", "epoll", "--connections", "8")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "  - class `interactive`: no verdict (1 paired run; a verdict needs 8)" in out.stdout
    assert "  - class `bulk`: no verdict" in out.stdout
    assert "## Latency probe: epoll, c8" in out.stdout and "round_time p50 us" in out.stdout
    result = json.loads(next((tmp_path / "results").glob("*-quick-tail.json")).read_text())
    (leg,) = result["legs"]
    assert [c["name"] for c in leg["load_spec"]["classes"]] == ["interactive", "bulk"]
    for r in leg["runs"]:
        inter, bulk = r["classes"]["interactive"], r["classes"]["bulk"]
        assert inter["answered"] > 0 and bulk["answered"] > 0
        assert (
            inter["errors"]
            == bulk["errors"]
            == dict.fromkeys(("connect", "read", "write", "status", "timeout", "mismatch"), 0)
        )
        assert r["probe"]["all"]["dispatched"] > 0


@pytest.mark.io_uring  # runs the job with --backend io_uring
def test_open_loop_at_a_fraction_of_capacity_measures_the_capacity_first(tmp_path):
    out = _job(
        tmp_path,
        "--load",
        "open",
        "--rate",
        "0.3x",
        "--ab",
        "aa",
        "--backend",
        "io_uring",
        "--connections",
        "4",
        "--schedule",
        "constant",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "capacity [io_uring, c4] arm A, closed loop" in out.stderr
    result = json.loads(next((tmp_path / "results").glob("*-quick-aa.json")).read_text())
    (leg,) = result["legs"]
    cap = leg["capacity"]["rps"]
    (cls,) = leg["load_spec"]["classes"]
    assert cls["rate"] == pytest.approx(0.3 * cap) and cls["schedule"] == "constant"
    assert "capacity measured first" in out.stdout and f"{cap:,.0f} req/s" in out.stdout
    # the capacity run sends the load client's request, GET /user/<seq>, not GET /
    assert leg["capacity"]["wrk_argv"][-1].endswith("/user/")
    assert "`GET /user/<seq>`" in out.stdout.split("capacity measured first")[1].split("req/s")[0]


def test_bad_load_options_exit_2_with_one_line(tmp_path):
    out = _job(tmp_path, "--rate", "2000")
    assert out.returncode == 2
    assert out.stderr.strip() == "tail_latency: error: --rate needs open-loop load: add --load open"
    out = _job(tmp_path, "peers", "--workload", "mixed")
    assert out.returncode == 2 and "--workload: not an option of peers" in out.stderr
    out = _job(tmp_path, "peers", "--class", "name=web connections=4 loop=closed")
    assert out.returncode == 2 and "--class: not an option of peers" in out.stderr
