"""Statistics of the tail-latency job: fixed inputs, known answers."""

from __future__ import annotations

import pytest

from tailjob import stats
from tailjob.stats import METRICS, compare, metric


def test_median_odd_and_even():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_quantile_interpolates_linearly():
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert stats.quantile(xs, 0.0) == 1.0
    assert stats.quantile(xs, 0.5) == 3.0
    assert stats.quantile(xs, 0.25) == 2.0
    assert stats.quantile(xs, 0.125) == 1.5
    assert stats.quantile(xs, 1.0) == 5.0


def test_ratio_of_medians():
    assert stats.median_ratio([10, 20, 30], [15, 30, 45]) == 1.5
    assert stats.median_ratio([0, 0, 0], [1, 2, 3]) is None


def test_bootstrap_of_exact_scaling_is_exact():
    # B = 2 x A in every pair: every resample's median(B*)/median(A*) is exactly 2.
    a = [10.0, 13.0, 9.0, 11.0, 40.0]
    b = [2 * x for x in a]
    assert stats.bootstrap_ratio_ci(a, b, seed=1) == (2.0, 2.0)


def test_bootstrap_is_reproducible_with_a_fixed_seed():
    a = [100.0, 104.0, 97.0, 101.0, 99.0, 103.0]
    b = [98.0, 107.0, 96.0, 105.0, 97.0, 101.0]
    assert stats.bootstrap_ratio_ci(a, b, seed=7) == stats.bootstrap_ratio_ci(a, b, seed=7)


def test_bootstrap_ci_contains_the_point_estimate_and_excludes_one_for_a_clear_shift():
    a = [100.0, 101.0, 99.0, 100.0, 102.0]
    b = [150.0, 149.0, 151.0, 152.0, 148.0]
    lo, hi = stats.bootstrap_ratio_ci(a, b, seed=1)
    point = stats.median_ratio(a, b)
    assert lo <= point <= hi
    assert 1.4 < lo <= hi < 1.6


def test_bootstrap_resamples_pairs_not_arms():
    # Trial effects are shared within a pair (a slow trial is slow in both arms);
    # resampling pairs keeps them, so the CI is as tight as the per-pair ratio.
    a = [100.0, 200.0, 300.0, 400.0, 500.0]
    b = [110.0, 220.0, 330.0, 440.0, 550.0]
    assert stats.bootstrap_ratio_ci(a, b, seed=3) == pytest.approx((1.1, 1.1))


def test_bootstrap_rejects_unpaired_input():
    with pytest.raises(ValueError, match="paired"):
        stats.bootstrap_ratio_ci([1.0, 2.0], [1.0], seed=1)


def test_metric_directions():
    assert metric("rps").higher_is_better
    for key in ("cpu_us_per_req", "p50", "p99", "p99.9", "p99.99", "p99.999"):
        assert not metric(key).higher_is_better
    assert [m.key for m in METRICS] == ["rps", "cpu_us_per_req", "p50", "p99", "p99.9", "p99.99", "p99.999"]


def test_more_requests_per_second_is_a_gain_and_fewer_a_regression():
    a = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0, 998.0, 1007.0]
    more = [x * 1.5 + 3 for x in a]
    less = [x * 0.5 - 2 for x in a]
    assert compare(metric("rps"), a, more, seed=1).verdict == "gain"
    assert compare(metric("rps"), a, less, seed=1).verdict == "regression"


A8 = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0, 998.0, 1007.0]


def test_higher_latency_or_cpu_is_a_regression_and_lower_a_gain():
    a = A8
    higher = [x * 1.5 for x in a]
    lower = [x * 0.5 for x in a]
    for key in ("p50", "p99.999", "cpu_us_per_req"):
        assert compare(metric(key), a, higher, seed=1).verdict == "regression"
        assert compare(metric(key), a, lower, seed=1).verdict == "gain"


def test_identical_arms_are_equivalent_because_the_ci_is_within_the_minimum_effect():
    a = A8
    c = compare(metric("p99"), a, list(a), seed=1)
    assert (c.ratio, c.ci) == (1.0, (1.0, 1.0))
    assert c.verdict == "equivalent"
    assert c.reason == "CI within +-10%"
    assert (c.detectable, c.pairs_needed) == (0.0, stats.MIN_PAIRS)


def test_a_certain_effect_below_the_minimum_is_equivalent_not_a_gain():
    a = A8
    b = [x * 1.02 for x in a]  # a certain but tiny +2 %
    c = compare(metric("rps"), a, b, seed=1, min_effect=0.05)
    assert c.ci[0] > 1.0
    assert c.verdict == "equivalent"
    assert compare(metric("rps"), a, b, seed=1, min_effect=0.01).verdict == "gain"


def test_noisy_identical_arms_are_inconclusive_not_no_effect():
    a = A8
    b = [x * f for x, f in zip(a, (0.6, 1.7, 0.9, 1.3, 1.0, 0.7, 1.5, 1.1))]
    c = compare(metric("p99"), a, b, seed=1)
    assert c.ci[0] < 1 < c.ci[1]
    assert c.verdict == "inconclusive"
    assert c.detectable > 0.10 and c.pairs_needed > 8


def test_too_few_pairs_give_no_verdict():
    a = A8[:7]
    c = compare(metric("rps"), a, [x * 2 for x in a], seed=1)
    assert c.ratio == 2.0
    assert c.verdict == "n/a"
    assert c.reason == "7 paired runs; a verdict needs 8"
    assert stats.MIN_PAIRS == 8


def test_intervals_are_simultaneous_over_the_seven_metrics():
    # Bonferroni: seven intervals that all hold with 95 % are each 1 - 0.05/7.
    assert stats.CONFIDENCE == pytest.approx(1 - 0.05 / 7)
    # a wider confidence never gives a narrower interval
    a = [100.0, 104.0, 97.0, 101.0, 99.0, 103.0, 96.0, 102.0]
    b = [98.0, 107.0, 96.0, 105.0, 97.0, 101.0, 99.0, 104.0]
    lo95, hi95 = stats.bootstrap_ratio_ci(a, b, seed=7, confidence=0.95)
    lo, hi = stats.bootstrap_ratio_ci(a, b, seed=7)
    assert lo <= lo95 <= hi95 <= hi


def test_missing_values_drop_their_pair():
    a = [1000.0, None, 990.0, 1005.0, 995.0, 1001.0, 1003.0, 999.0, 998.0, 1004.0]
    b = [2000.0, 2020.0, None, 2010.0, 1990.0, 2002.0, 2006.0, 1998.0, 1996.0, 2008.0]
    c = compare(metric("rps"), a, b, seed=1)
    assert c.n_pairs == 8
    assert c.verdict == "gain"
    assert compare(metric("rps"), a[:9], b[:9], seed=1).verdict == "n/a"  # 7 pairs left


def test_zero_baseline_gives_no_ratio():
    c = compare(metric("cpu_us_per_req"), [0.0] * 8, [1.0] * 8, seed=1)
    assert c.ratio is None and c.verdict == "n/a"


def test_the_gate_fails_only_on_a_regression():
    from tailjob.report import gate_tables

    def table(*verdicts):
        return [
            ("leg", [stats.Comparison(metric("p99"), 8, 1, 1, 1, (1, 1), 0.1, v, "", 0.1) for v in verdicts])
        ]

    assert gate_tables(table("equivalent", "gain", "regression", "n/a"))[0] == 1
    assert gate_tables(table("equivalent", "inconclusive", "gain", "n/a"))[0] == 0
