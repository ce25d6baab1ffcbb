"""Tail percentiles of an arm from its runs pooled: merged latency histograms.

For :data:`POOLED_KEYS` each arm's figure is read from all its runs' histograms merged (exactly: as
one long run), with the samples at or beyond its rank.  The interval resamples whole trials and is
the log ratio +- t(n - 1) x sqrt(n / (n - 1)) x the resamples' standard deviation.  Why:
docs/en/statistics.md, "Tail percentiles: each arm's runs pooled".  The bootstrap evaluates
HdrHistogram's percentile rule (rank ``max(1, int(p * count / 100 + 0.5))``) for every resample at
once with numpy; :func:`pooled_percentile` reads the point estimate through hdrh; the tests check both agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from . import stats
from .loadspec import US_MAX, encode, histogram  # noqa: F401  (encode: pooled.encode, as the job reads it)
from .metrics import POOLED_KEYS  # noqa: F401


def histogram_of(buckets: Iterable[Sequence[int]]) -> HdrHistogram:
    """An HdrHistogram (us) of ``(value_us, count)`` buckets, e.g. wrk's non-empty 1-us buckets."""
    h = histogram()
    for value, count in buckets:
        if value < 0 or count < 0:
            raise ValueError(f"histogram bucket ({value}, {count}): value and count must be >= 0")
        if count:
            h.record_value(min(int(value), US_MAX), int(count))
    return h


def decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text)


@dataclass(frozen=True)
class Pooled:
    """A pooled percentile: ``us``, and ``samples`` at or beyond its rank out of ``total``."""

    us: int
    samples: int
    total: int


def pooled_percentile(encoded: Sequence[str], p: float) -> Pooled:
    """Percentile ``p`` of the runs' histograms merged (through hdrh's own add and percentile)."""
    if not encoded:
        raise ValueError("pooled percentile of no runs")
    merged = histogram()
    for text in encoded:
        merged.add(decode(text))
    total = merged.get_total_count()
    if total == 0:
        raise ValueError("pooled percentile of empty histograms")
    rank = merged.get_target_count_at_percentile(p)
    return Pooled(merged.get_value_at_percentile(p), total - rank + 1, total)


class PooledArms:
    """Both arms' runs of a leg on one bucket grid: ``a[i]`` and ``b[i]`` are trial ``i``'s runs."""

    def __init__(self, a: Sequence[str], b: Sequence[str]):
        if len(a) != len(b) or not a:
            raise ValueError(
                f"pooled comparison needs paired, non-empty arms: got {len(a)} A and {len(b)} B histograms"
            )
        hists = [decode(t) for t in (*a, *b)]
        counts = np.array([np.ctypeslib.as_array(h.counts)[: h.counts_len] for h in hists], dtype=np.int64)
        used = np.flatnonzero(counts.sum(axis=0))  # the grid: buckets some run used
        ref = hists[0]
        self.values = np.array(
            [ref.get_highest_equivalent_value(ref.get_value_from_index(int(i))) for i in used], dtype=np.int64
        )
        cum = np.cumsum(counts[:, used], axis=1)
        self.n = len(a)
        self.cum_a, self.cum_b = cum[: self.n], cum[self.n :]

    def _percentile(self, cum: np.ndarray, p: float) -> np.ndarray:
        """HdrHistogram's percentile rule on each row of cumulative counts."""
        total = cum[:, -1]
        rank = np.maximum(np.floor(p * total / 100 + 0.5), 1)
        index = (cum < rank[:, None]).sum(axis=1)
        return self.values[np.minimum(index, len(self.values) - 1)]

    def point(self, p: float) -> tuple[int, int]:
        """Percentile ``p`` of every A run merged and of every B run merged (the vectorised rule)."""
        a = self._percentile(self.cum_a.sum(axis=0, keepdims=True), p)[0]
        b = self._percentile(self.cum_b.sum(axis=0, keepdims=True), p)[0]
        return int(a), int(b)

    def log_ratios(
        self, p: float, *, seed: int, resamples: int = stats.RESAMPLES, chunk: int = 1000
    ) -> np.ndarray:
        """log(pooled(B*)/pooled(A*)) at ``p`` for ``resamples`` resamples of whole trials."""
        rng = np.random.default_rng(seed)
        out = []
        for start in range(0, resamples, chunk):
            k = min(chunk, resamples - start)
            picks = rng.integers(0, self.n, size=(k, self.n))
            weights = np.zeros((k, self.n), dtype=np.int64)
            np.add.at(weights, (np.arange(k)[:, None], picks), 1)
            va = self._percentile(weights @ self.cum_a, p)
            vb = self._percentile(weights @ self.cum_b, p)
            if (va == 0).any():
                raise ValueError("bootstrap resample with pooled A percentile 0: ratio undefined")
            out.append(np.log(vb / va))
        return np.concatenate(out)

    def ratio_ci(
        self, p: float, *, seed: int, resamples: int = stats.RESAMPLES, confidence: float = stats.CONFIDENCE
    ) -> tuple[float, float]:
        """Interval of pooled(B)/pooled(A) at ``p``: log ratio +- t(n-1) x bootstrap SE (module docstring)."""
        a, b = self.point(p)
        if a == 0:
            raise ValueError("pooled A percentile 0: ratio undefined")
        centre = math.log(b / a)
        se = float(np.std(self.log_ratios(p, seed=seed, resamples=resamples), ddof=1))
        half = _t_quantile(confidence, self.n - 1) * math.sqrt(self.n / (self.n - 1)) * se
        return math.exp(centre - half), math.exp(centre + half)


def _t_quantile(confidence: float, df: int) -> float:
    from scipy.stats import t as student_t  # here, not at the top: scipy.stats costs ~1 s of import

    return float(student_t.ppf(1 - (1 - confidence) / 2, df))


def compare_pooled(
    m: stats.Metric,
    a: Sequence[str | None],
    b: Sequence[str | None],
    *,
    seed: int,
    min_effect: float | None = None,
    resamples: int = stats.RESAMPLES,
    confidence: float = stats.CONFIDENCE,
    min_pairs: int = stats.MIN_PAIRS,
) -> stats.Comparison:
    """:func:`tailjob.stats.compare` for a metric of :data:`POOLED_KEYS` from the encoded histograms
    of each trial's runs (``None``: missing, the pair is dropped): the pooled percentiles, their
    ratio and :meth:`PooledArms.ratio_ci`."""
    effect = m.min_effect if min_effect is None else min_effect
    p = m.percentile
    if p is None:
        raise ValueError(f"{m.key} is not a percentile: it has no pooled comparison")
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    n = len(pairs)
    if n == 0:
        return stats.Comparison(
            m, 0, None, None, None, None, effect, stats.NO_VERDICT, "no paired runs", estimator="pooled"
        )
    pa, pb = [x for x, _ in pairs], [y for _, y in pairs]
    qa, qb = pooled_percentile(pa, p), pooled_percentile(pb, p)
    extra: dict[str, Any] = {"estimator": "pooled", "samples_a": qa.samples, "samples_b": qb.samples}
    ratio, need = None, stats.samples_to_bound(p, confidence)
    if qa.us == 0:
        why = "pooled A is 0"
    elif min(qa.samples, qb.samples) < need:  # the interval of the percentile itself has no upper end
        why = f"needs {need} samples at or beyond its rank; A has {qa.samples}, B {qb.samples}"
        extra["needs_samples"] = need
    else:
        ratio = qb.us / qa.us
        if n >= min_pairs:
            ci = PooledArms(pa, pb).ratio_ci(p, seed=seed, resamples=resamples, confidence=confidence)
            return stats.decided(m, n, qa.us, qb.us, ratio, ci, effect, **extra)
        why = f"{n} paired run{'s' if n != 1 else ''}; a verdict needs {min_pairs}"
    return stats.Comparison(m, n, qa.us, qb.us, ratio, None, effect, stats.NO_VERDICT, why, **extra)
