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

    __slots__ = ("_batch", "_i")

    def __init__(self, batch: list):
        self._batch = batch
        self._i = 0

    def next(self, now_ns: int):
        """Return ``(event, elevated)`` or ``None`` when the batch is done."""
        i = self._i
        if i >= len(self._batch):
            return None
        self._i = i + 1
        return self._batch[i], False


class AgeOrder:
    """Age-based order; see the module docstring.

    ``stamps[i]`` is the age stamp (ns) of ``batch[i]``; ``threshold_ns`` > 0.
    Ties between equal stamps keep backend order.
    """

    __slots__ = ("_batch", "_stamps", "_oldest", "_by_age", "_threshold", "_done", "_i", "_k")

    def __init__(self, batch: list, stamps: list[int], threshold_ns: int):
        self._batch = batch
        self._stamps = stamps
        self._oldest = min(stamps) if stamps else 0
        self._by_age = None  # sorted lazily: most rounds never need it
        self._threshold = threshold_ns
        self._done = bytearray(len(batch))
        self._i = 0  # cursor in backend order
        self._k = 0  # cursor in age order

    def next(self, now_ns: int):
        """Return ``(event, elevated)`` for the delivery at ``now_ns``, or ``None``."""
        done, n = self._done, len(self._batch)
        if now_ns - self._oldest >= self._threshold:
            by_age = self._by_age
            if by_age is None:
                stamps = self._stamps
                by_age = self._by_age = sorted(range(n), key=stamps.__getitem__)  # stable
            k = self._k
            while k < n and done[by_age[k]]:
                k += 1
            self._k = k
            if k < n and now_ns - self._stamps[by_age[k]] >= self._threshold:
                j = by_age[k]
                done[j] = 1
                self._k = k + 1
                return self._batch[j], True
        i = self._i
        while i < n and done[i]:
            i += 1
        if i >= n:
            return None
        done[i] = 1
        self._i = i + 1
        return self._batch[i], False
