"""Latency probe: where the time goes between readiness and callback, per worker.

Role
----
``CWIST_LATENCY_PROBE=1`` gives each reactor a :class:`LatencyProbe`.  The
reactor feeds it durations in nanoseconds (the probe never reads a clock, so
an injected test clock drives it too); the probe records them, in
microseconds, into HdrHistograms (the ``hdrh`` package: 1 us .. 60 s,
3 significant digits):

=================  ==========================================================
queue_delay_arm    dispatch time minus the arm stamp (CWIST's ``queue_delay``;
                   includes the time a re-arm spent queued for submission)
queue_delay_ready  dispatch time minus the time the reactor reaped the event
                   (the wait behind earlier callbacks of the same round)
svc                callback run time
post_delay         ``post()`` to the posted callback starting
batch_size         events reaped per round (unit: events, 1 .. 1e6)
round_time         reap to end of dispatch, per round
=================  ==========================================================

plus counters: ``rounds``, ``dispatched``, ``tail_elevations`` (callbacks
elevated by age-based dispatch), ``over_5ms`` (queue delay since arm over
5 ms; CWIST's counter), ``over_5ms_ready`` (same, since ready) and ``posts``.

Rounds that reaped no event (a wake-up, a timeout, timers only) count in
``rounds`` but are not recorded in ``batch_size`` or ``round_time``, so those
describe I/O batches rather than idle wake-ups.

Recording rule: ns are rounded *up* to us, so a real delay of 1 ns is 1 us,
never 0; values are clamped to the histogram's range (0 and negatives record
as 1, anything over 60 s as 60 s).  Each histogram also keeps the exact sum of
what it recorded, so ``mean`` is exact.  Percentiles and ``max`` follow
HdrHistogram's convention: the highest value equivalent to the recorded one
(exact below 2048 us, within 0.1% above).

Output
------
* :meth:`LatencyProbe.snapshot` -- a JSON-ready dict (the bench server's
  ``GET /__probe``);
* :meth:`LatencyProbe.finish` -- called by ``Reactor.close()``: one block on
  stderr, every line tagged ``[latency-probe] pid=.. worker=.. backend=..``,
  and, with ``CWIST_LATENCY_PROBE_FILE``, one JSON file per worker whose
  histograms are in HdrHistogram's standard compressed base64 ("HISTF...")
  form, readable by any HdrHistogram implementation;
* reading the files back, merging workers and the per-worker table are
  :mod:`tailreactor.probe_files` (the tail-latency job's, and
  ``python -m tailreactor.probe_files TEMPLATE_OR_FILE...``).

Source: CWIST PR #186 measured
queue_delay, svc and over_5ms into 18 fixed buckets; HdrHistogram keeps 3
significant digits instead, so p99.9 and max are not bucket upper bounds.

Threading: every method of a probe runs on its reactor's thread (the reactor
calls it; ``GET /__probe`` is served from a reactor callback).
"""

from __future__ import annotations

import json
import os
import sys

from hdrh.histogram import HdrHistogram

from .config import check_probe_file, probe_file_path

__all__ = ["LatencyProbe", "HISTOGRAMS", "COUNTERS", "FORMAT", "summarize", "format_report", "new_histogram"]

FORMAT = "tailreactor-latency-probe/1"
SIGNIFICANT_DIGITS = 3
US_MAX = 60_000_000  # 60 s in us
BATCH_MAX = 1_000_000
OVER_NS = 5_000_000  # the over_5ms threshold (strictly greater)

#: name -> (highest trackable value, unit).  Lowest is always 1.
HISTOGRAMS: dict[str, tuple[int, str]] = {
    "queue_delay_arm": (US_MAX, "us"),
    "queue_delay_ready": (US_MAX, "us"),
    "svc": (US_MAX, "us"),
    "post_delay": (US_MAX, "us"),
    "batch_size": (BATCH_MAX, "events"),
    "round_time": (US_MAX, "us"),
}
COUNTERS = ("rounds", "dispatched", "tail_elevations", "over_5ms", "over_5ms_ready", "posts")
#: key in the summaries -> percentile passed to HdrHistogram.
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}

_TAG = "[latency-probe]"


def new_histogram(name: str) -> HdrHistogram:
    """An empty histogram of the range and precision of :data:`HISTOGRAMS` ``name``."""
    return HdrHistogram(1, HISTOGRAMS[name][0], SIGNIFICANT_DIGITS)


#: HdrHistogram with 3 significant digits has 2048 sub-buckets: values below 2**11
#: are kept exactly, and above that a value shares its bucket with the values
#: that agree with it in the top 11 bits.
_SUB_BUCKET_BITS = 11


class _Series:
    """One histogram plus the exact sum of the values it recorded.

    Why a pending dict in front of the HdrHistogram: ``hdrh`` records in pure
    Python (about 1 us a value), three values per callback, and the probe is
    meant to stay on.  ``record`` only rounds the value to its histogram
    bucket's representative (same bucket, so the same counts once folded) and
    counts it in a dict; :attr:`hist` folds the dict in with one
    ``record_value(value, count)`` per distinct bucket when anyone reads it.
    """

    __slots__ = ("_hist", "sum", "_hi", "_pending")

    def __init__(self, name: str):
        self._hist = new_histogram(name)
        self.sum = 0
        self._hi = HISTOGRAMS[name][0]
        self._pending: dict[int, int] = {}

    def record(self, value: int) -> None:
        """Record ``value`` in the histogram's unit, clamped to [1, highest]."""
        if value < 1:
            value = 1
        elif value > self._hi:
            value = self._hi
        self.sum += value
        shift = value.bit_length() - _SUB_BUCKET_BITS
        if shift > 0:
            value = (value >> shift) << shift  # the bucket's lowest value: same bucket
        pending = self._pending
        pending[value] = pending.get(value, 0) + 1

    def record_ns(self, ns: int) -> None:
        """Record a duration in ns as us, rounded up."""
        self.record(-(-ns // 1000))

    @property
    def hist(self) -> HdrHistogram:
        """The HdrHistogram with every recorded value folded in."""
        if self._pending:
            record = self._hist.record_value
            for value, count in self._pending.items():
                record(value, count)
            self._pending.clear()
        return self._hist


def summarize(hist: HdrHistogram, total: int, unit: str) -> dict:
    """``{unit, count, p50, p90, p99, p99.9, max, mean, sum}`` of one histogram (zeros if empty).

    ``total`` is the exact sum of the recorded values (the mean is ``total / count``).
    """
    count = hist.get_total_count()
    out: dict = {"unit": unit, "count": count}
    if count:
        pct = hist.get_percentile_to_value_dict(list(PERCENTILES.values()))
        out.update({key: pct[p] for key, p in PERCENTILES.items()})
        out.update(max=hist.get_max_value(), mean=total / count, sum=total)
    else:
        out.update({key: 0 for key in PERCENTILES})
        out.update(max=0, mean=0.0, sum=0)
    return out


class LatencyProbe:
    """Per-reactor recorder; see the module docstring.

    ``backend`` (name) and ``worker`` (0-based index) tag every output.
    ``config`` supplies ``latency_probe_file`` (``None``: no file).  Raises
    :class:`~tailreactor.config.ConfigError` if that file's directory does not
    exist or is not writable, so a bad path fails at start, not at shutdown.
    """

    def __init__(self, backend: str, worker: int = 0, config=None):
        self.backend = backend
        self.worker = worker
        self.file_template: str | None = getattr(config, "latency_probe_file", None)
        if self.file_template is not None:
            check_probe_file(self.file_template, (worker,))
        self._series = {name: _Series(name) for name in HISTOGRAMS}
        # Bound once: the hot path below then costs attribute loads, not dict lookups.
        s = self._series
        self._arm, self._ready, self._svc = s["queue_delay_arm"], s["queue_delay_ready"], s["svc"]
        self._post, self._batch, self._round = s["post_delay"], s["batch_size"], s["round_time"]
        self.rounds = self.dispatched = self.tail_elevations = 0
        self.over_5ms = self.over_5ms_ready = self.posts = 0
        #: The reactor's own counters, given to :meth:`finish` (None before).
        self.reactor_counters: dict | None = None

    # -- recording (called by the reactor; all durations in ns) ------------------------------------
    def dispatch(self, queue_arm_ns: int, queue_ready_ns: int, svc_ns: int, elevated: bool) -> None:
        """One I/O callback ran: its queue delays since arm and since ready, its run time."""
        self.dispatched += 1
        if elevated:
            self.tail_elevations += 1
        if queue_arm_ns > OVER_NS:
            self.over_5ms += 1
        if queue_ready_ns > OVER_NS:
            self.over_5ms_ready += 1
        self._arm.record_ns(queue_arm_ns)
        self._ready.record_ns(queue_ready_ns)
        self._svc.record_ns(svc_ns)

    def post(self, delay_ns: int) -> None:
        """A posted callback is about to run, ``delay_ns`` after its ``post()``."""
        self.posts += 1
        self._post.record_ns(delay_ns)

    def round(self, batch_size: int, round_ns: int) -> None:
        """A round ended: ``batch_size`` events reaped, ``round_ns`` from reap to end."""
        self.rounds += 1
        if batch_size > 0:
            self._batch.record(batch_size)
            self._round.record_ns(round_ns)

    # -- reading ------------------------------------------------------------------------------------
    def histogram(self, name: str) -> HdrHistogram:
        """The live HdrHistogram ``name`` (a key of :data:`HISTOGRAMS`); ``KeyError`` otherwise."""
        return self._series[name].hist

    def counters(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTERS}

    def snapshot(self) -> dict:
        """The live figures as a JSON-serialisable dict.

        Shape: ``{format, pid, worker, backend, counters: {COUNTERS},
        reactor: dict | None, histograms: {name: {unit, count, p50, p90, p99,
        p99.9, max, mean, sum}}}``; values in each histogram's unit (us, or
        events for ``batch_size``).
        """
        return {
            "format": FORMAT,
            "pid": os.getpid(),
            "worker": self.worker,
            "backend": self.backend,
            "counters": self.counters(),
            "reactor": self.reactor_counters,
            "histograms": {
                name: summarize(s.hist, s.sum, HISTOGRAMS[name][1]) for name, s in self._series.items()
            },
        }

    def document(self) -> dict:
        """:meth:`snapshot` plus each histogram encoded under ``hdr`` (HdrHistogram V2 base64)."""
        doc = self.snapshot()
        for name, s in self._series.items():
            doc["histograms"][name]["hdr"] = s.hist.encode().decode("ascii")
        return doc

    def report(self) -> str:
        """The stderr block: one line per histogram, counters first, every line tagged."""
        return format_report(self.snapshot())

    # -- shutdown -----------------------------------------------------------------------------------
    def finish(self, counters: dict | None = None) -> str | None:
        """Write the report to stderr and, if configured, the JSON file; return its path.

        ``counters`` is the reactor's ``Counters.as_dict()``, kept in the
        outputs under ``reactor``.  The file is written to a hidden temporary
        name and renamed, so a reader never sees half a document.  A failed
        write is reported on stderr (one line) and returns ``None``: shutdown
        must go on.
        """
        if counters is not None:
            self.reactor_counters = dict(counters)
        path = None
        lines = self.report()
        if self.file_template is not None:
            path = probe_file_path(self.file_template, os.getpid(), self.worker)
            try:
                _write_atomically(path, json.dumps(self.document(), indent=1) + "\n")
                lines += f"{self._tag()} file={path}\n"
            except OSError as exc:
                lines += f"{self._tag()} cannot write CWIST_LATENCY_PROBE_FILE {path!r}: {exc}\n"
                path = None
        sys.stderr.write(lines)  # one write: workers sharing stderr do not interleave lines
        sys.stderr.flush()
        return path

    def _tag(self) -> str:
        return f"{_TAG} pid={os.getpid()} worker={self.worker} backend={self.backend}"


def _write_atomically(path: str, text: str) -> None:
    folder, base = os.path.split(path)
    tmp = os.path.join(folder, f".{base}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def format_report(snap: dict) -> str:
    """The text block of a :meth:`LatencyProbe.snapshot` (or a :func:`tailreactor.probe_files.merge` result)."""
    tag = f"{_TAG} pid={snap['pid']} worker={snap['worker']} backend={snap['backend']}"
    out = [tag + " " + " ".join(f"{k}={v}" for k, v in snap["counters"].items())]
    for name, h in snap["histograms"].items():
        pct = " ".join(f"{k}={h[k]}" for k in PERCENTILES)
        out.append(
            f"{tag} {name:<17} {h['unit']:<6} count={h['count']} {pct} max={h['max']} mean={h['mean']:.1f}"
        )
    if snap.get("reactor"):
        out.append(tag + " reactor " + " ".join(f"{k}={v}" for k, v in snap["reactor"].items()))
    return "\n".join(out) + "\n"
