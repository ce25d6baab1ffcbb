"""The job's metrics: one table, read by every part that names a metric.

Each row of :data:`METRICS` is one compared figure of a run: its key in the run records, its label
in the reports, its unit, how it is computed, its minimum effect and which way is better; the flags
say where else it appears (``pooled``: :mod:`tailjob.pooled`; ``per_class``; ``peers``).  The rest is
derived from it: the percentiles recorded (:data:`PERCENTILES`, which wrk's script gets from
``TAILREACTOR_PERCENTILES``), the per-class and peers lists, the Bonferroni width
(:data:`tailjob.stats.CONFIDENCE`) and the report columns.  Adding a latency percentile is adding a
row; a metric computed another way also needs its line in :func:`run_metrics`.  No heavy imports:
the load client reads it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One compared metric (a row of :data:`METRICS`; see the module docstring).

    ``percentile``: for a latency metric, the percentile of the run's latency
    histogram it is (in microseconds); None for a figure computed otherwise
    (``how`` says how).
    """

    key: str
    label: str
    unit: str
    higher_is_better: bool
    min_effect: float
    percentile: float | None = None
    how: str = ""
    pooled: bool = False
    per_class: bool = True
    peers: bool = False


@dataclass(frozen=True)
class Percentile:
    """Percentile ``p`` (e.g. 99.9): latency ``us`` and the ``samples`` at or beyond its rank.

    ``us`` is ``None`` when the histogram is empty (no response at all).
    """

    p: float
    us: int | None
    samples: int


class RunCounts:
    """What the job reads of a run's counts, from ``requests``, ``duration_us`` and ``errors``.

    Shared by :class:`tailjob.wrk.WrkResult` and the load client's result (:mod:`tailjob.workloads`).
    """

    requests: int
    duration_us: int
    errors: Mapping[str, int]  # connect, read, write, timeout, status

    @property
    def rps(self) -> float:
        """Requests per second over the run's measured duration."""
        return self.requests / (self.duration_us / 1e6) if self.duration_us else 0.0

    @property
    def socket_errors(self) -> int:
        """connect + read + write + timeout errors (what wrk prints as "Socket errors")."""
        return sum(self.errors[k] for k in ("connect", "read", "write", "timeout"))

    @property
    def non_2xx(self) -> int:
        """Responses with a status above 399 (wrk: "Non-2xx or 3xx responses")."""
        return self.errors["status"]


# The metrics of the verdict, in report order.  Minimum effects: 5 % for the
# body of the distribution and CPU; the extreme percentiles rest on a handful
# of samples per run (p99.999 of a 3 s run is about its maximum) and move by
# tens of per cent between identical runs, so only a larger effect is called.
METRICS: tuple[Metric, ...] = (
    Metric(
        "rps", "Requests/s", "req/s", True, 0.05, how="requests completed / measured duration", peers=True
    ),
    Metric(
        "cpu_us_per_req",
        "Server CPU us/request",
        "us",
        False,
        0.05,
        how="server process tree's CPU over the run / requests",
        per_class=False,
        peers=True,
    ),
    Metric("p50", "p50 ms", "us", False, 0.05, 50, "latency histogram", peers=True),
    Metric("p99", "p99 ms", "us", False, 0.10, 99, "latency histogram", peers=True),
    Metric("p99.9", "p99.9 ms", "us", False, 0.10, 99.9, "latency histogram", pooled=True, peers=True),
    Metric("p99.99", "p99.99 ms", "us", False, 0.20, 99.99, "latency histogram", pooled=True),
    Metric("p99.999", "p99.999 ms", "us", False, 0.20, 99.999, "latency histogram", pooled=True),
)

EXTRA_PERCENTILES: tuple[float, ...] = (75, 90)
"""Percentiles recorded and printed for every run though no verdict is drawn on them."""

PERCENTILES: tuple[float, ...] = tuple(
    sorted({*EXTRA_PERCENTILES, *(m.percentile for m in METRICS if m.percentile)})
)
"""Every percentile a run records (wrk's script and the load client), ascending."""

LATENCY_KEYS: dict[str, float] = {m.key: m.percentile for m in METRICS if m.percentile is not None}
POOLED_KEYS: dict[str, float] = {
    m.key: m.percentile for m in METRICS if m.pooled and m.percentile is not None
}
CLASS_METRICS: tuple[str, ...] = tuple(m.key for m in METRICS if m.per_class)
PEER_METRICS: tuple[str, ...] = tuple(m.key for m in METRICS if m.peers)

_BY_KEY = {m.key: m for m in METRICS}


def metric(key: str) -> Metric:
    """The :class:`Metric` named ``key``; ``KeyError`` naming the known keys otherwise."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"unknown metric {key!r}: known {', '.join(_BY_KEY)}") from None


def run_metrics(result, *, server_cpu_s: float) -> dict[str, float | None]:
    """A run's row of :data:`METRICS` from a client result (``rps``, ``requests``, ``percentile(p)``)."""
    out: dict[str, float | None] = {
        "rps": result.rps,
        "cpu_us_per_req": server_cpu_s * 1e6 / result.requests if result.requests else None,
    }
    for key, p in LATENCY_KEYS.items():
        out[key] = result.percentile(p).us
    return out


def ms(us: float | None) -> str:
    """Microseconds as ms with three decimals ("-" for None)."""
    return "-" if us is None else f"{us / 1000:.3f}"


def ci_text(c) -> str:
    """A comparison's interval as ``low–high`` ("-" without one)."""
    return "-" if c.ci is None else f"{c.ci[0]:.3f}–{c.ci[1]:.3f}"


def format_value(key: str, v: float | None) -> str:
    """A metric's value as printed: req/s with thousands separators, CPU us with one decimal, ms."""
    if v is None:
        return "-"
    if key == "rps":
        return f"{v:,.0f}"
    if key == "cpu_us_per_req":
        return f"{v:.1f}"
    return ms(v)
