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

Runs of aged events
-------------------
If the events remaining at time ``t`` that have aged are ``A``, the rule runs
all of ``A``, oldest first, before anything else: each of them stays aged, and
every other remaining event is younger than all of them (it had not aged at
``t``).  So the reactor takes ``A`` as one *run* (:meth:`AgeOrder.take_aged`)
and walks it with no check between deliveries, then asks again.  That
matters under overload: at ``wrk -c256`` the bench server is a round behind
and the latency probe counts every delivery as a tail elevation, so most of a
round is one or two runs.

Who does what: the reactor walks the batch in backend order itself (a cursor
and a state check per delivery).  Between runs, before each delivery, it
compares the clock with :attr:`AgeOrder.aged_at`, the earliest time any
remaining event not yet taken can have aged; only past that time does it ask
for a run.  A run's events leave ``READY`` when they run (or when an earlier
callback disarms them), so the backend-order walk skips them; once every
event is taken, ``aged_at`` is :data:`NEVER` and the reactor ends that walk.

Cost: aged events are always a prefix of the batch sorted by stamp (age only
grows), so a run is the next slice of that sorted batch, found by a binary
search over its stamps, and the age-order cursor only moves forward.

* Every round (when the policy is on): each stamp is read once; the stamps
  are sorted, which gives the oldest (for :attr:`AgeOrder.aged_at`) and the
  sorted stamps; and the sorted list is compared with the stamps in backend
  order (cheap: ``sorted`` keeps the same int objects and ``==`` tries
  identity first), to know whether the batch is already in age order.  Then
  one comparison per delivery.  That is all a round where nothing ages costs:
  no call into the age order.
* The first time an event ages, if the batch was not in age order: the events
  sorted by the stamps read at round start.

Batches usually come nearly in age order: at ``wrk -c256`` io_uring's came
in age order in 387 of 392 rounds, epoll's in 13 of 497 but in about 8
ascending runs each, which a sort handles in few passes.  Shuffled batches
cost the most: for 256 events in random order a round where nothing ages
costs about 900 instructions per event, against about 480 before (eea632b:
``min`` through ``operator.attrgetter``) and about 360 for 8 ascending runs
(``benchmarks/age_order_cost.py`` counts each case).  Issue 9 measured what
this replaced: reading stamps through ``operator.attrgetter`` three times per
event (``min``, the sort key, the sorted stamps) was most of the policy's
cost at c256, where every event ages.

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

Under ``ready`` every event reaped in a round has the same stamp, so only
the per-delivery check can elevate them (events stuck behind slow callbacks),
and ties keep backend order.  Events carried over from a round cut short
(clause R21) keep their older ``ready_ns``, lead the batch, and are elevated
once aged.
"""

from __future__ import annotations

from bisect import bisect_right

#: ``aged_at`` when nothing can age: later than any clock value (2**63, one
#: more than the largest signed 64-bit value: a C or Rust port uses an unsigned
#: type or INT64_MAX, which is as good, since the clock never gets there).
NEVER = 1 << 63


class AgeOrder:
    """The age-ordered side of one round; see the module docstring.

    ``batch`` is the round's events in backend order; ``age_from`` is
    ``"arm"`` (age counts from ``armed_ns``) or ``"ready"`` (from
    ``ready_ns``), as ``CWIST_REACTOR_AGE_FROM``; ``threshold_ns`` > 0.  An
    event is *remaining* while its ``state`` is ``READY`` (events.py): once
    it runs, or an earlier callback disarms it, it is not.  Ties between
    equal stamps keep backend order.

    ``aged_at`` (ns, public, read by the reactor between runs): no remaining
    event that is not yet taken has aged before this clock value.  A lower
    bound, not exact: the event it comes from may have run in backend order
    since, and then :meth:`take_aged` at that time returns ``[]`` (one wasted
    call).  :data:`NEVER` once no event is left to take.
    """

    __slots__ = ("_batch", "_stamps", "_threshold", "_by_age", "_sorted_stamps", "_k", "aged_at")

    def __init__(self, batch: list, age_from: str, threshold_ns: int):
        self._batch = batch
        self._threshold = threshold_ns
        # Each stamp read once, now: an event that runs may be re-armed in place
        # (Reactor.arm) with a new stamp, and reading that one later would unsort
        # the order the binary search relies on.  A list comprehension, not
        # map(attrgetter): in CPython 3.11 its specialised attribute read is about
        # half the cost.
        if age_from == "ready":
            stamps = [ev.ready_ns for ev in batch]
        else:
            stamps = [ev.armed_ns for ev in batch]
        self._stamps = stamps
        self._sorted_stamps = ordered = sorted(stamps)
        # A batch already in age order is its own age order (the == is cheap:
        # sorted() keeps the same int objects, and == tries identity first).
        self._by_age: list | None = batch if ordered == stamps else None
        self._k = 0  # cursor in age order: everything before it is taken
        self.aged_at = ordered[0] + threshold_ns if batch else NEVER

    def take_aged(self, now_ns: int) -> list:
        """Every remaining event aged at ``now_ns`` (ns), oldest first: a run; ``[]`` if none.

        The caller runs them in this order before any other event, and asks
        again when the clock passes :attr:`aged_at` (module docstring, "Runs
        of aged events").  A run may hold events that are no longer
        ``READY`` (they ran in backend order, or were disarmed); the caller
        skips those, as it skips them in backend order.
        """
        by_age = self._by_age
        if by_age is None:
            # Sort positions by the stamps read at round start (stable: ties keep
            # backend order), then take the events in that order.
            stamps, batch = self._stamps, self._batch
            order = sorted(range(len(stamps)), key=stamps.__getitem__)
            by_age = self._by_age = [batch[i] for i in order]
        sorted_stamps, k = self._sorted_stamps, self._k
        # Aged means stamp <= now - threshold; stamps ascend, so the run is a slice.
        end = bisect_right(sorted_stamps, now_ns - self._threshold, k)
        self._k = end
        self.aged_at = sorted_stamps[end] + self._threshold if end < len(sorted_stamps) else NEVER
        return by_age[k:end]
