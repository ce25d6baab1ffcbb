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
    assert arms.point(p) == (pooled.pooled_percentile(runs[:8], p).us,
                             pooled.pooled_percentile(runs[8:], p).us)


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
    m = stats.metric("p99.99")
    c = pooled.compare_pooled(m, runs[:8], runs[8:], seed=1, resamples=2000)
    assert c.estimator == "pooled"
    assert c.samples_a == c.samples_b == 24000 - int(99.99 * 24000 / 100 + 0.5) + 1
    assert c.verdict == stats.verdict(c.ratio, c.ci, min_effect=c.min_effect,
                                      higher_is_better=False).verdict
    assert c.ci[0] <= c.ratio <= c.ci[1]
    few = pooled.compare_pooled(m, runs[:5], runs[8:13], seed=1)
    assert few.verdict == "n/a" and few.reason == "5 paired runs; a verdict needs 8"


def test_compare_pooled_refuses_unpaired_arms(runs):
    with pytest.raises(ValueError, match="paired"):
        pooled.PooledArms(runs[:8], runs[:7])
