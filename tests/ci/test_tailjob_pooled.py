"""Pooled tail percentiles: runs' histograms merged per arm, the interval over whole trials."""

from __future__ import annotations

import random

import pytest
from hdrh.histogram import HdrHistogram

from tailjob import pooled, stats


def run_hist(rng: random.Random, n: int, scale: float = 1.0) -> str:
    """A run's latency histogram: log-normal body around 1 ms, times ``scale``."""
    buckets = {}
    for _ in range(n):
        v = int(scale * rng.lognormvariate(7.0, 0.6))
        buckets[v] = buckets.get(v, 0) + 1
    return pooled.encode(pooled.histogram_of(buckets.items()))


@pytest.fixture(scope="module")
def runs():
    rng = random.Random(5)
    return [run_hist(rng, 3000) for _ in range(16)]


def test_buckets_round_trip_through_the_encoded_form():
    h = pooled.decode(pooled.encode(pooled.histogram_of([(100, 3), (2500, 2), (7, 0)])))
    assert h.get_total_count() == 5
    assert h.get_value_at_percentile(50) == 100
    with pytest.raises(ValueError, match=">= 0"):
        pooled.histogram_of([(100, -1)])


def test_pooled_percentile_is_the_merged_histograms_and_counts_the_samples_behind(runs):
    merged = HdrHistogram(1, 60_000_000, 3)
    for t in runs[:8]:
        merged.add(pooled.decode(t))
    q = pooled.pooled_percentile(runs[:8], 99.9)
    assert q.total == 8 * 3000
    assert q.us == merged.get_value_at_percentile(99.9)
    assert q.samples == 24000 - int(99.9 * 24000 / 100 + 0.5) + 1 == 25


@pytest.mark.parametrize("p", [50, 99, 99.9, 99.99, 99.999])
def test_the_vectorised_rule_agrees_with_hdrh(runs, p):
    arms = pooled.PooledArms(runs[:8], runs[8:])
    assert arms.point(p) == (
        pooled.pooled_percentile(runs[:8], p).us,
        pooled.pooled_percentile(runs[8:], p).us,
    )


def test_identical_arms_give_exactly_one(runs):
    arms = pooled.PooledArms(runs[:8], runs[:8])
    assert arms.ratio_ci(99.99, seed=1, resamples=500) == (1.0, 1.0)


def test_the_interval_resamples_trials_so_a_trial_effect_shared_by_both_arms_cancels():
    # Trial t is slow in both arms by the same factor; B = A exactly within a trial.
    a = [run_hist(random.Random(t), 2000, scale=1 + t) for t in range(8)]
    b = list(a)
    lo, hi = pooled.PooledArms(a, b).ratio_ci(99.9, seed=2, resamples=500)
    assert (lo, hi) == (1.0, 1.0)
    # B twice as slow in every trial: every resample's ratio is about 2 (HdrHistogram's 3 digits)
    b2 = [run_hist(random.Random(t), 2000, scale=2 * (1 + t)) for t in range(8)]
    lo, hi = pooled.PooledArms(a, b2).ratio_ci(99.9, seed=2, resamples=500)
    assert 1.99 < lo <= hi < 2.01


def test_compare_pooled_follows_the_verdict_rule_and_reports_samples(runs):
    # p99.9: 25 samples an arm beyond its rank (p99.99 has 3, too few to bound: n/a, tested below)
    m = stats.metric("p99.9")
    c = pooled.compare_pooled(m, runs[:8], runs[8:], seed=1, resamples=2000)
    assert c.estimator == "pooled"
    assert c.samples_a == c.samples_b == 24000 - int(99.9 * 24000 / 100 + 0.5) + 1
    assert c.verdict == stats.verdict(c.ratio, c.ci, min_effect=c.min_effect, higher_is_better=False).verdict
    assert c.ci[0] <= c.ratio <= c.ci[1]
    few = pooled.compare_pooled(m, runs[:5], runs[8:13], seed=1)
    assert few.verdict == "n/a" and few.reason == "5 paired runs; a verdict needs 8"


def test_compare_pooled_refuses_unpaired_arms(runs):
    with pytest.raises(ValueError, match="paired"):
        pooled.PooledArms(runs[:8], runs[:7])


# -- no percentile the samples cannot carry (issue 30 item 3) ------------------------------
@pytest.mark.parametrize(
    "p, confidence", [(99.999, stats.CONFIDENCE), (99.99, 0.95), (99.9, stats.CONFIDENCE)]
)
def test_samples_to_bound_is_the_binomial_order_statistic_rule(p, confidence):
    """N = samples at or beyond the rank of the smallest count n whose largest sample is above
    the p-quantile with probability 1 - alpha/2: q^n <= alpha/2 (q = p/100), so n = ceil(ln(alpha/2)/ln q)."""
    import math

    q, alpha = p / 100, 1 - confidence
    n = math.ceil(math.log(alpha / 2) / math.log(q))
    assert q**n <= alpha / 2 < q ** (n - 1)
    rank = max(1, int(q * n + 0.5))
    assert stats.samples_to_bound(p, confidence) == n - rank + 1
    assert stats.samples_to_bound(99.999, stats.CONFIDENCE) == 7  # the job's per-metric 99.29 %
    assert stats.samples_to_bound(99.99, 0.95) == 5


def test_a_pooled_percentile_with_too_few_samples_beyond_its_rank_gets_no_verdict():
    rng = random.Random(3)
    few = [run_hist(rng, 400) for _ in range(16)]  # 3,200 samples an arm: p99.99 rests on 1
    m = stats.metric("p99.99")
    c = pooled.compare_pooled(m, few[:8], few[8:], seed=1, resamples=500)
    need = stats.samples_to_bound(99.99)
    assert c.samples_a < need and c.verdict == "n/a" and c.ci is None
    assert (
        c.needs_samples == need
        and c.reason == f"needs {need} samples at or beyond its rank; A has {c.samples_a}, B {c.samples_b}"
    )
    enough = pooled.compare_pooled(stats.metric("p99"), few[:8], few[8:], seed=1, resamples=500)
    assert enough.verdict != "n/a" and enough.needs_samples is None


def test_the_report_shows_n_a_with_the_samples_needed(synthetic_job):
    from dataclasses import replace as _replace

    from tailjob import report

    lr = synthetic_job.legs[0]
    need = stats.samples_to_bound(99.999)
    cs = [
        _replace(
            c,
            verdict="n/a",
            ratio=None,
            ci=None,
            needs_samples=need,
            detectable=None,
            pairs_needed=None,
            reason=f"needs {need} samples at or beyond its rank; A has 1, B 1",
        )
        if c.metric.key == "p99.999"
        else c
        for c in lr.comparisons
    ]
    job = _replace(synthetic_job, legs=[_replace(lr, comparisons=cs)])
    text = report.render(job)
    row = next(ln for ln in text.splitlines() if ln.startswith("| p99.999 ms |"))
    assert row.rstrip().endswith(f"| n/a (needs {need} samples) |"), row
    assert "| - |" in row  # no ratio, no interval


def test_a_median_estimated_percentile_whose_runs_lack_the_samples_gets_no_verdict():
    """Without histograms a percentile is the median of the runs' own; it gets a verdict only if the
    median run has samples_to_bound(p) samples at or beyond its rank (the client class's p99 at
    about 400 samples a run has 4)."""
    from dataclasses import replace as _replace

    from tailjob_testdata import record

    from tailjob import runner

    need = stats.samples_to_bound(99)
    runs = []
    for t in range(8):
        for pos, arm in enumerate("AB"):
            r = record(0, t, pos, arm, scale=2.0 if arm == "B" else 1.0)
            figs = {
                **r.metrics,
                "p99_samples": need - 1,
                "p50_samples": 200,
                "p99.9_samples": 1,
                "p99.99_samples": 1,
                "p99.999_samples": 1,
            }
            runs.append(_replace(r, classes={"interactive": figs}))
    by_key = {c.metric.key: c for c in runner.compare_leg(runs, seed=1, resamples=500, klass="interactive")}
    assert by_key["p99"].verdict == "n/a" and by_key["p99"].needs_samples == need
    assert by_key["p99"].samples_a == need - 1 and by_key["p99"].ci is None
    assert by_key["p50"].verdict == "regression" and by_key["p50"].needs_samples is None
    whole = {c.metric.key: c for c in runner.compare_leg(runs, seed=1, resamples=500)}
    assert whole["p99"].verdict == "regression"  # the whole run's wrk figures: 600 samples beyond p99
