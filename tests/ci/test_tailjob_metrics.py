"""The metric table is the one list: wrk's script, the load client, stats, pooled tails and reports read it."""

from __future__ import annotations

from dataclasses import replace

import tailjob_testdata  # noqa: F401  (puts scripts/ci on sys.path)
from tailjob_testdata import CI_DIR, record

from tailjob import loadspec, metrics, peersjob, pooled, stats, wrk
from tailjob.measure import RunPlan, RunRecord, Settings
from tailjob.plan import AB_PRESETS, Leg
from tailjob.runner import run_job


def test_every_list_of_metrics_is_derived_from_the_table():
    latency = [m for m in metrics.METRICS if m.percentile is not None]
    assert metrics.LATENCY_KEYS == {m.key: m.percentile for m in latency}
    assert set(metrics.PERCENTILES) >= {m.percentile for m in latency}
    assert wrk.PERCENTILES is loadspec.PERCENTILES is metrics.PERCENTILES
    assert stats.METRICS is metrics.METRICS
    assert pooled.POOLED_KEYS == {m.key: m.percentile for m in metrics.METRICS if m.pooled}
    assert peersjob.PEER_METRICS == tuple(m.key for m in metrics.METRICS if m.peers)
    assert stats.CONFIDENCE == 1 - 0.05 / len(metrics.METRICS)


def test_wrk_script_takes_its_percentiles_from_the_table():
    lua = (CI_DIR / "tailjob" / "tail_latency.lua").read_text()
    code = [line for line in lua.splitlines() if not line.lstrip().startswith("--")]
    assert not any("99.9" in line and "e.g." not in line for line in code)  # no list spelled in the script
    assert "TAILREACTOR_PERCENTILES" in lua
    assert wrk.wrk_env({})["TAILREACTOR_PERCENTILES"] == ",".join(f"{p:g}" for p in metrics.PERCENTILES)


class CountingTier:
    """A tier without a server: every run's metrics from the arm's knobs (what a virtual-time tier does)."""

    name = "counting"

    def __init__(self):
        self.plans: list[RunPlan] = []

    def run(self, plan: RunPlan) -> RunRecord:
        self.plans.append(plan)
        r = record(plan.leg.index, plan.trial, plan.position, plan.arm, warmup=plan.warmup)
        return replace(r, backend=plan.env.get("CWIST_REACTOR_BACKEND", "?"))


def test_a_tier_plugs_in_behind_the_measure_interface():
    tier = CountingTier()
    leg = Leg(0, "epoll", 1, 8, 1, 8)
    [lr] = run_job([leg], AB_PRESETS["aa"], Settings(seed=3), ambient={}, tier=tier)
    assert [p.arm for p in tier.plans[1:]] == [k for order in lr.schedule for k in order]  # interleaved
    assert tier.plans[0].warmup and tier.plans[0].trial == -1
    assert all(p.env["CWIST_REACTOR_BACKEND"] == "epoll" for p in tier.plans)
    assert [c.metric.key for c in lr.comparisons] == [m.key for m in metrics.METRICS]
    assert {c.verdict for c in lr.comparisons} <= {stats.EQUIVALENT, stats.INCONCLUSIVE}
