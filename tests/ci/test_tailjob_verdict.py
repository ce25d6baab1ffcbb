"""The verdict rule of the tail-latency job at its edges (issue 19).

``stats.verdict(ratio, ci, min_effect=e, higher_is_better=...)``:

* ``gain`` / ``regression``: the interval excludes 1 (strictly) and
  |ratio - 1| >= e; the direction decides which;
* ``equivalent``: the whole interval lies in the closed [1 - e, 1 + e];
* ``inconclusive``: anything else.
"""

from __future__ import annotations

import math

import pytest

from tailjob import stats
from tailjob.stats import EQUIVALENT, GAIN, INCONCLUSIVE, REGRESSION, verdict

E = 0.05


def rule(ratio, ci, *, e=E, higher=False):
    return verdict(ratio, ci, min_effect=e, higher_is_better=higher).verdict


def test_the_four_words_and_no_neutral():
    assert set(stats.VERDICTS) == {"gain", "regression", "equivalent", "inconclusive", "n/a"}
    assert "neutral" not in stats.VERDICTS


@pytest.mark.parametrize("ci", [(1 - E, 1.0), (1.0, 1 + E), (1 - E, 1 + E)])
def test_an_interval_touching_the_equivalence_bound_is_equivalent(ci):
    assert rule(1.0, ci) == EQUIVALENT


@pytest.mark.parametrize("ci", [(math.nextafter(1 - E, 0), 1.0), (1.0, math.nextafter(1 + E, 2))])
def test_an_interval_just_past_the_equivalence_bound_is_inconclusive(ci):
    assert rule(1.0, ci) == INCONCLUSIVE


def test_an_interval_touching_one_does_not_exclude_it():
    # ratio 1.2 is beyond the minimum effect, but the interval reaches 1: no call.
    assert rule(1.2, (1.0, 1.4)) == INCONCLUSIVE
    assert rule(0.8, (0.6, 1.0)) == INCONCLUSIVE
    # one step past 1 it does exclude 1
    assert rule(1.2, (math.nextafter(1.0, 2), 1.4)) == REGRESSION
    assert rule(0.8, (0.6, math.nextafter(1.0, 0))) == GAIN


def test_one_sided_intervals_are_called_by_direction():
    above, below = (1.06, 1.30), (0.70, 0.94)
    assert rule(1.15, above, higher=False) == REGRESSION  # more latency or CPU
    assert rule(1.15, above, higher=True) == GAIN  # more requests/s
    assert rule(0.85, below, higher=False) == GAIN
    assert rule(0.85, below, higher=True) == REGRESSION


def test_a_one_sided_interval_with_the_effect_exactly_at_the_minimum_is_called():
    assert rule(1 + E, (1.01, 1.2)) == REGRESSION
    assert rule(1 - E, (0.8, 0.99)) == GAIN


def test_a_one_sided_interval_with_an_effect_under_the_minimum():
    # a real but small effect, certain to stay within +-e: equivalent
    assert rule(1.02, (1.01, 1.04)) == EQUIVALENT
    # excludes 1, but the effect is under e and the interval reaches past 1 + e: inconclusive
    assert rule(1.04, (1.01, 1.20)) == INCONCLUSIVE


def test_an_interval_that_straddles_one_and_a_bound_is_inconclusive():
    assert rule(1.0, (0.99, 1.10)) == INCONCLUSIVE
    assert rule(1.0, (0.90, 1.01)) == INCONCLUSIVE


def test_the_issue_s_a_a_example_is_inconclusive_not_no_effect():
    # p99 B/A 1.683 with the interval 0.210-3.327 (quick A/A on io_uring, c64)
    v = verdict(1.683, (0.210, 3.327), min_effect=0.10, higher_is_better=False)
    assert v.verdict == INCONCLUSIVE
    assert "1" in v.reason and "10%" in v.reason


def test_every_verdict_has_a_reason_naming_the_minimum_effect_or_the_interval():
    for ratio, ci in [(1.0, (0.97, 1.03)), (1.3, (1.2, 1.4)), (1.0, (0.5, 2.0))]:
        v = verdict(ratio, ci, min_effect=E, higher_is_better=False)
        assert v.reason


def test_bad_inputs_are_refused_with_what_was_given():
    with pytest.raises(ValueError, match="low.*high"):
        verdict(1.0, (1.2, 1.1), min_effect=E, higher_is_better=False)
    with pytest.raises(ValueError, match="min_effect"):
        verdict(1.0, (0.9, 1.1), min_effect=0.0, higher_is_better=False)


def test_detectable_effect_is_the_half_width():
    assert stats.detectable_effect((0.90, 1.30)) == pytest.approx(0.20)
    assert stats.detectable_effect((1.0, 1.0)) == 0.0


def test_pairs_needed_scales_with_the_square_of_width_over_minimum_effect():
    # half-width 0.20 with 8 pairs; to reach 0.10 the width must halve: 4x the pairs
    assert stats.pairs_needed(8, (0.90, 1.30), 0.10) == 32
    # already narrow enough: the fewest pairs a verdict needs
    assert stats.pairs_needed(8, (0.99, 1.01), 0.10) == stats.MIN_PAIRS
    assert stats.pairs_needed(20, (0.99, 1.01), 0.10) == stats.MIN_PAIRS
    # rounding up
    assert stats.pairs_needed(8, (0.90, 1.12), 0.10) == math.ceil(8 * (0.11 / 0.10) ** 2)


def test_compare_rows_agree_with_the_rule():
    a = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0, 998.0, 1007.0]
    for b in (
        [x * 1.5 for x in a],
        list(a),
        [x * 1.02 for x in a],
        [x * f for x, f in zip(a, (0.6, 1.7, 0.9, 1.3, 1.0, 0.7, 1.5, 1.1))],
    ):
        for key in ("rps", "p99"):
            m = stats.metric(key)
            c = stats.compare(m, a, b, seed=1)
            assert (
                c.verdict
                == verdict(
                    c.ratio, c.ci, min_effect=c.min_effect, higher_is_better=m.higher_is_better
                ).verdict
            )
            assert c.detectable == pytest.approx(stats.detectable_effect(c.ci))
            assert c.pairs_needed == stats.pairs_needed(c.n_pairs, c.ci, c.min_effect)
