"""The dispatch order of one round: backend order, or age-based (tail-aware).

Role
----
Given the batch a backend returned, decide which event runs next.  This is the
policy the seed PR (CWIST #375) describes, made exact:

* **round-start scan**: events whose age is already ``>= CWIST_REACTOR_TAIL_US``
  run first, oldest first; the rest keep backend order;
* **per-delivery check**: before each callback, if a remaining event has aged
  past the threshold behind slow earlier callbacks, it runs next (oldest first).

Both are one rule -- "before each delivery, if the oldest remaining event is
aged, run it; else run the next in backend order" -- because any event aged at
round start is older than every event that was not.  An event run by that rule
is *elevated*: ``dispatch_late()`` is true during its callback and
``tail_elevations`` counts it.

Cost: aged events are always a prefix of the batch sorted by stamp (age only
grows), so each delivery advances one of two cursors: O(1) amortised, no
rescan of the batch.  The sort itself (O(n log n), once per round) is done
lazily, the first time the oldest stamp of the batch is past the threshold;
in the common case where nothing ages during a round the policy costs one
``min`` over the stamps and one comparison per delivery.

Which stamp is "age"
--------------------
``CWIST_REACTOR_AGE_FROM=arm`` (default, CWIST's definition) measures from the
arm stamp; ``ready`` from the moment the reactor reaped the batch.  They
differ in two ways the seed ran into:

* an idle keep-alive connection armed long ago is "aged" under ``arm`` the
  moment a request arrives, although it waited for nothing but its client;
* under constant load every event is re-armed right after its callback, so the
  arm stamp is refreshed so often that events rarely cross 3500 us at delivery
  -- the seed measured ~3-4 elevations per worker in 30 s while 100k+ queue
  delays exceeded 5 ms.

Under ``ready`` every event of a batch has the same stamp, so only the
per-delivery check can elevate (events stuck behind slow callbacks), and ties
keep backend order.
"""

from __future__ import annotations


class BackendOrder:
    """``CWIST_REACTOR_TAIL_US=0``: dispatch in the order the backend returned."""

    __slots__ = ("_batch", "_n", "_i")

    def __init__(self, batch: list):
        self._batch = batch
        self._n = len(batch)
        self._i = 0

    def next(self, now_ns: int):
        """Return ``(event, elevated)`` or ``None`` when the batch is done."""
        i = self._i
        if i >= self._n:
            return None
        self._i = i + 1
        return self._batch[i], False


class AgeOrder:
    """Age-based order; see the module docstring.

    ``stamps[i]`` is the age stamp (ns) of ``batch[i]``; ``threshold_ns`` > 0.
    Ties between equal stamps keep backend order.

    Until the first event ages, :meth:`next` is plain backend order: one
    comparison against the oldest stamp and a cursor step.  The age-sorted
    index and the ``done`` marks are built the first time an event ages.
    """

    __slots__ = ("_batch", "_n", "_stamps", "_oldest", "_by_age", "_threshold", "_done", "_i", "_k")

    def __init__(self, batch: list, stamps: list[int], threshold_ns: int):
        self._batch = batch
        self._n = len(batch)
        self._stamps = stamps
        # A lower bound of the oldest stamp not yet dispatched (exact when set
        # by _next_aged); the aged path is tried only once it has aged.
        self._oldest = min(stamps) if stamps else 0
        self._threshold = threshold_ns
        self._by_age = None  # indexes sorted by stamp, built lazily
        self._done = None    # bytearray of dispatched indexes, from the first sort on
        self._i = 0  # cursor in backend order
        self._k = 0  # cursor in age order

    def next(self, now_ns: int):
        """Return ``(event, elevated)`` for the delivery at ``now_ns``, or ``None``."""
        if now_ns - self._oldest >= self._threshold:
            aged = self._next_aged(now_ns)
            if aged is not None:
                return aged
        i = self._i
        done = self._done
        if done is None:
            # Nothing elevated yet: backend order, nothing to skip.
            if i >= self._n:
                return None
            self._i = i + 1
            return self._batch[i], False
        n = self._n
        while i < n and done[i]:
            i += 1
        if i >= n:
            return None
        done[i] = 1
        self._i = i + 1
        return self._batch[i], False

    def _next_aged(self, now_ns: int):
        """The oldest event not yet dispatched, elevated, if it has aged; else None."""
        by_age, done, n = self._by_age, self._done, self._n
        if by_age is None:
            stamps = self._stamps
            by_age = self._by_age = sorted(range(n), key=stamps.__getitem__)  # stable
            # The events before the backend-order cursor are dispatched already.
            done = self._done = bytearray(n)
            done[:self._i] = b"\x01" * self._i
        k = self._k
        while k < n and done[by_age[k]]:
            k += 1
        self._k = k
        if k >= n:
            self._oldest = now_ns  # everything is dispatched
            return None
        j = by_age[k]
        stamp = self._stamps[j]
        if now_ns - stamp < self._threshold:
            self._oldest = stamp  # not aged yet: the next check waits for this stamp
            return None
        done[j] = 1
        self._k = k + 1
        return self._batch[j], True
