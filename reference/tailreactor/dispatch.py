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

Who does what: the reactor walks the batch in backend order itself (a cursor
and a state check per delivery), and before each delivery compares the clock
with :attr:`AgeOrder.aged_at`, the earliest time any remaining event can have
aged.  Only past that time does it ask :meth:`AgeOrder.pop_aged` for the
oldest remaining event.  An elevated event is marked done when it runs, so the
backend-order walk skips it like any event an earlier callback disarmed.

Cost: aged events are always a prefix of the batch sorted by stamp (age only
grows), so the age-order cursor only moves forward: O(1) amortised per
delivery, no rescan.  The sort itself (O(n log n), once per round) is done
lazily, the first time the oldest stamp of the batch is past the threshold.
In the common case, where nothing ages during a round, the policy costs one
``min`` over the stamps and one comparison per delivery, and no call.

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

from .events import READY

#: ``aged_at`` when nothing can age: later than any clock value.
NEVER = 1 << 63


class AgeOrder:
    """The age-ordered side of one round; see the module docstring.

    ``batch`` is the round's events in backend order, ``stamps[i]`` the age
    stamp (ns) of ``batch[i]``, ``threshold_ns`` > 0.  An event is *remaining*
    while its ``state`` is ``READY`` (events.py): once it runs, or an earlier
    callback disarms it, it is not.  Ties between equal stamps keep backend
    order.

    ``aged_at`` (ns, public, read by the reactor before every delivery): no
    remaining event has aged before this clock value.  It is exact once
    :meth:`pop_aged` has looked at the oldest remaining event, a lower bound
    before; :data:`NEVER` when no event remains.
    """

    __slots__ = ("_batch", "_stamps", "_threshold", "_by_age", "_k", "aged_at")

    def __init__(self, batch: list, stamps: list[int], threshold_ns: int):
        self._batch = batch
        self._stamps = stamps
        self._threshold = threshold_ns
        self._by_age = None  # indexes sorted by stamp, built the first time an event ages
        self._k = 0          # cursor in age order: every index before it has run or is cancelled
        self.aged_at = min(stamps) + threshold_ns if stamps else NEVER

    def pop_aged(self, now_ns: int):
        """The oldest remaining event if it has aged at ``now_ns``, else None.

        The caller runs the event it gets (its state leaves ``READY``).  When
        it gets None, :attr:`aged_at` says when to ask again.
        """
        by_age = self._by_age
        if by_age is None:
            stamps = self._stamps
            by_age = self._by_age = sorted(range(len(stamps)), key=stamps.__getitem__)  # stable
        batch, n, k = self._batch, len(by_age), self._k
        # Skip what ran in backend order or was disarmed since.
        while k < n and batch[by_age[k]].state != READY:
            k += 1
        self._k = k
        if k >= n:
            self.aged_at = NEVER  # nothing remains
            return None
        j = by_age[k]
        aged_at = self.aged_at = self._stamps[j] + self._threshold
        if now_ns < aged_at:
            return None  # the oldest remaining event has not aged yet
        self._k = k + 1
        return batch[j]
