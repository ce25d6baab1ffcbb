"""Statistics of an A/B: medians, the B/A ratio, its bootstrap CI, and the verdict.

Per metric: the median per arm over its measured runs, ratio = median(B) / median(A), and the
percentile-bootstrap interval of that ratio over the *paired* runs (a resample draws whole trials,
so what a trial shares -- a neighbour stealing CPU from both arms -- stays paired; the generator is
seeded).  :func:`verdict` decides gain, regression, equivalent or inconclusive from the interval and
the metric's minimum effect; ``n/a`` without a ratio or with fewer than :data:`MIN_PAIRS` pairs.
The intervals are 95 % jointly over a leg's metrics (Bonferroni, :data:`CONFIDENCE`); why 8 pairs
and Bonferroni (``benchmarks/simulate_aa.py`` reproduces it): docs/en/statistics.md, "Why 8 runs".
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from statistics import median  # of an even count, the mean of the middle two

from .metrics import METRICS, Metric, metric  # noqa: F401

MIN_PAIRS = 8
"""Fewest paired runs for a gain/regression verdict (see the module docstring)."""

RESAMPLES = 10_000
FAMILY_CONFIDENCE = 0.95
"""Confidence that all seven metric intervals of a leg hold at once."""


CONFIDENCE = 1 - (1 - FAMILY_CONFIDENCE) / len(METRICS)
"""Confidence of each metric's interval (Bonferroni over :data:`METRICS`): 0.99286."""


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Quantile ``q`` (0..1) of already sorted values, linear interpolation between ranks."""
    if not sorted_xs:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def median_ratio(a: Sequence[float], b: Sequence[float]) -> float | None:
    """median(b) / median(a); ``None`` when median(a) is 0."""
    ma = median(a)
    return None if ma == 0 else median(b) / ma


def bootstrap_ratio_ci(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile-bootstrap CI ``(low, high)`` of median(b)/median(a) over paired runs: ``a[i]`` and
    ``b[i]`` are the two arms of trial ``i``; a resample draws ``len(a)`` trials with replacement."""
    if len(a) != len(b) or not a:
        raise ValueError(f"bootstrap needs paired, non-empty arms: got {len(a)} A and {len(b)} B values")
    rng, n = random.Random(seed), len(a)
    ratios = []
    for _ in range(resamples):
        pick = rng.choices(range(n), k=n)
        ma = median([a[i] for i in pick])
        if ma == 0:
            raise ValueError("bootstrap resample with median(A) = 0: ratio undefined")
        ratios.append(median([b[i] for i in pick]) / ma)
    ratios.sort()
    tail = (1 - confidence) / 2
    return quantile(ratios, tail), quantile(ratios, 1 - tail)


def samples_to_bound(p: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples at or beyond percentile ``p``'s rank that bound the p-quantile.

    Lancet's rule (Kogias et al., OSDI 2018): report a percentile only with
    enough samples for its confidence interval.  The distribution-free
    interval of the q-quantile (q = p/100) is a pair of order statistics, and
    the number of n samples below the true quantile is Binomial(n, q).  Its
    upper end exists only if the largest sample lies above the quantile with
    probability at least 1 - alpha/2, i.e. q^n <= alpha/2: the fewest samples
    are n = ceil(ln(alpha/2) / ln q), alpha = 1 - ``confidence`` (by default
    the job's per-metric level).  The figure returned is what a report shows
    beside a percentile: n's samples at or beyond the rank, n - rank + 1 with
    HdrHistogram's rank ``max(1, int(q n + 0.5))`` -- about -ln(alpha/2) + 1,
    7 at 99.29 % and 5 at 95 %, whatever the percentile.
    """
    q, alpha = p / 100, 1 - confidence
    if not (0 < q < 1 and 0 < alpha < 1):
        raise ValueError(
            f"percentile {p!r}, confidence {confidence!r}: accepted 0 < p < 100 and 0 < confidence < 1"
        )
    n = math.ceil(math.log(alpha / 2) / math.log(q) - 1e-9)
    return n - max(1, int(q * n + 0.5)) + 1


#: A document's short name for a :class:`Comparison` field (``a`` is ``median_a``); other names are the field's.
_SHORT_NAMES = {"a": "median_a", "b": "median_b"}


def summary(c: Comparison, keys: Iterable[str]) -> dict:
    """The fields ``keys`` of ``c`` as JSON (``ci`` a list or None): the history line's and the sim
    and sweep documents' record of a comparison, each document naming the fields it keeps."""
    out = {}
    for key in keys:
        value = getattr(c, _SHORT_NAMES.get(key, key))
        out[key] = (list(value) if value else None) if key == "ci" else value
    return out


def verdict_cell(c: Comparison) -> str:
    """A comparison's verdict as a report prints it: ``regression`` and ``inconclusive`` bold,
    a percentile without the samples to bound it ``n/a (needs N samples)``."""
    if c.needs_samples is not None:
        return f"n/a (needs {c.needs_samples} samples)"
    return f"**{c.verdict}**" if c.verdict in (REGRESSION, INCONCLUSIVE) else c.verdict


GAIN = "gain"
REGRESSION = "regression"
EQUIVALENT = "equivalent"
INCONCLUSIVE = "inconclusive"
NO_VERDICT = "n/a"
VERDICTS = (REGRESSION, GAIN, INCONCLUSIVE, EQUIVALENT, NO_VERDICT)
"""Every verdict word, in the order a report counts them (what needs attention first)."""


def count_verdicts(words: Iterable[str]) -> dict[str, int]:
    """How many of ``words`` are each verdict, in :data:`VERDICTS` order (only those that occur)."""
    words = list(words)
    return {v: n for v in VERDICTS if (n := words.count(v))}


@dataclass(frozen=True)
class Verdict:
    """What :func:`verdict` decided: one of :data:`VERDICTS` and why, in a few words."""

    verdict: str
    reason: str


def verdict(ratio: float, ci: tuple[float, float], *, min_effect: float, higher_is_better: bool) -> Verdict:
    """The verdict on a B/A ``ratio`` with interval ``ci`` = (low, high) and minimum effect e.

    * gain / regression: ``low > 1`` or ``high < 1`` (the interval excludes 1;
      an end exactly at 1 does not) and ``|ratio - 1| >= e``; gain when the
      change goes the metric's better way;
    * equivalent: ``1 - e <= low`` and ``high <= 1 + e`` (ends on a bound count
      as inside);
    * inconclusive: anything else.

    Every part of the job decides with this one function, so every verdict in a table follows from
    its row.
    """
    low, high = ci
    if low > high:
        raise ValueError(f"interval with low {low} > high {high}: expected (low, high)")
    if not min_effect > 0:
        raise ValueError(f"min_effect {min_effect!r}: accepted a fraction above 0, e.g. 0.05")
    bound = f"+-{min_effect:.0%}"
    excludes_one = low > 1 or high < 1
    effect = ratio - 1
    if excludes_one and abs(effect) >= min_effect:
        better = (ratio > 1) == higher_is_better
        return Verdict(GAIN if better else REGRESSION, f"CI excludes 1, effect {effect:+.1%}")
    if 1 - min_effect <= low and high <= 1 + min_effect:
        return Verdict(EQUIVALENT, f"CI within {bound}")
    if excludes_one:
        return Verdict(
            INCONCLUSIVE,
            f"CI excludes 1 but effect {effect:+.1%} is under {min_effect:.0%} "
            f"and the CI reaches past {bound}",
        )
    return Verdict(INCONCLUSIVE, f"CI includes 1 and reaches past {bound}")


def detectable_effect(ci: tuple[float, float]) -> float:
    """Half the width of the interval: the smallest effect this run could have told from none."""
    return (ci[1] - ci[0]) / 2


def pairs_needed(n_pairs: int, ci: tuple[float, float], min_effect: float) -> int:
    """About how many paired runs would shrink the detectable effect to ``min_effect``.

    An interval's width falls as 1/sqrt(pairs), so ``n * (half-width / e)^2``,
    rounded up, and never below :data:`MIN_PAIRS` (the fewest pairs for a verdict).
    An estimate from one run's interval: the noise of the next run decides.
    """
    return max(MIN_PAIRS, math.ceil(n_pairs * (detectable_effect(ci) / min_effect) ** 2 - 1e-9))


@dataclass(frozen=True)
class Comparison:
    """The A/B comparison of one metric.

    Medians in the metric's unit; ``ratio`` = B/A; ``ci`` its bootstrap CI
    (``None`` when not computed); ``verdict`` is one of :data:`VERDICTS` and
    ``reason`` says why in a few words.  ``detectable`` is the interval's
    half-width and ``pairs_needed`` about how many pairs would bring it to the
    minimum effect (both ``None`` without an interval).  ``estimator`` says
    how each arm's figure was made: ``median`` (of the runs' values) or
    ``pooled`` (of the runs' merged latency histograms, :mod:`tailjob.pooled`);
    ``samples_a`` / ``samples_b``: with ``pooled``, the samples at or beyond
    the percentile's rank in each arm's merged histogram.  ``needs_samples``:
    set when an arm has fewer than :func:`samples_to_bound` of them, so the
    percentile gets no verdict (``n/a``).
    """

    metric: Metric
    n_pairs: int
    median_a: float | None
    median_b: float | None
    ratio: float | None
    ci: tuple[float, float] | None
    min_effect: float
    verdict: str
    reason: str
    detectable: float | None = None
    pairs_needed: int | None = None
    estimator: str = "median"
    samples_a: int | None = None
    samples_b: int | None = None
    needs_samples: int | None = None

    def as_dict(self) -> dict:
        out = {"metric": self.metric.key, **{f.name: getattr(self, f.name) for f in fields(self)[1:]}}
        return {**out, "ci": list(self.ci) if self.ci else None}


def compare(
    m: Metric,
    a: Sequence[float | None],
    b: Sequence[float | None],
    *,
    seed: int,
    min_effect: float | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    min_pairs: int = MIN_PAIRS,
) -> Comparison:
    """Compare arm B with arm A on metric ``m``.

    ``a`` and ``b`` are aligned by trial; a trial where either value is
    ``None`` (missing) is dropped.  ``min_effect`` overrides the metric's
    minimum effect.  See the module docstring for the verdict rule.
    """
    effect_floor = m.min_effect if min_effect is None else min_effect
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    n = len(pairs)
    pa = [x for x, _ in pairs]
    pb = [y for _, y in pairs]

    def result(ratio, ci, verdict, reason):
        ma, mb = (median(pa), median(pb)) if pa else (None, None)
        return Comparison(m, n, ma, mb, ratio, ci, effect_floor, verdict, reason)

    if n == 0:
        return result(None, None, "n/a", "no paired runs")
    ratio = median_ratio(pa, pb)
    if ratio is None:
        return result(None, None, "n/a", "median of A is 0")
    if n < min_pairs:
        return result(
            ratio, None, "n/a", f"{n} paired run{'s' if n != 1 else ''}; a verdict needs {min_pairs}"
        )
    if any(x == 0 for x in pa):
        return result(ratio, None, "n/a", "A has zero values")
    ci = bootstrap_ratio_ci(pa, pb, seed=seed, resamples=resamples, confidence=confidence)
    return decided(m, n, median(pa), median(pb), ratio, ci, effect_floor)


def decided(
    m: Metric,
    n: int,
    value_a: float,
    value_b: float,
    ratio: float,
    ci: tuple[float, float],
    min_effect: float,
    **extra,
) -> Comparison:
    """The :class:`Comparison` of a metric with an interval: :func:`verdict`, detectable effect and
    pairs needed filled in from ``ratio``, ``ci`` and ``min_effect``; ``extra`` sets the estimator
    fields."""
    v = verdict(ratio, ci, min_effect=min_effect, higher_is_better=m.higher_is_better)
    figures = (m, n, value_a, value_b, ratio, ci, min_effect, v.verdict, v.reason)
    return Comparison(*figures, detectable_effect(ci), pairs_needed(n, ci, min_effect), **extra)
