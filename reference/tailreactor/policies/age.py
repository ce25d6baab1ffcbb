"""Age order (``age``, the default policy): CWIST's age-based, tail-aware order of one round.

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
matters under overload: when the server is a round behind, every event of a
batch ages, one after another as they were armed, and a round is a few runs
rather than one check per delivery.

The walk
--------
:class:`DeliveryOrder` is that rule as one object with one method: the
reactor's dispatch is the loop "``next(now)``, take the event, run it".
The reactor keeps one and begins each round with :meth:`DeliveryOrder.start`.
``next`` walks the run being delivered, if any, else the batch in backend
order, and skips what is no longer ``READY`` (it ran in a run, or an earlier
callback disarmed it).  Between runs it compares ``now`` with the earliest
time any remaining event not yet taken can have aged: at round start the
aging time of the batch's oldest stamp, once the :class:`AgeOrder` is built
its :attr:`AgeOrder.aged_at`; only past that time does it ask for a run.  The
age order is built then, at the first delivery at which an event can have
aged (or at a harvest): a round in which nothing ages never sorts.  Once every event
is taken, ``aged_at`` is :data:`NEVER`, the one value for "never" here (with
the policy off, too: no event ever ages), and the backend-order walk ends.

Where the reactor walks the round itself (the same rule)
---------------------------------------------------------
Two parts of a round need no decision, and the reactor walks them itself
(dispatch.py), with what this order tells it:

* until the clock reaches :meth:`DeliveryOrder.aged_at`, the aging time of
  the round's oldest event, nothing in the round is aged, so the rule is
  backend order; and a round of one event is its own age order, so its event
  runs at once (elevated if it has aged);
* at the delivery at which the clock reaches that time, if every event left
  has aged (:meth:`DeliveryOrder.aged_run`), the rule gives the rest of the
  round as one run, the batch sorted by stamp, all elevated: the reactor
  walks it as it walks the batch.  This is the round of a server a round
  behind, where every event ages.  Only a larger round in which some event
  has not aged is handed to ``next``;
* a run after which backend order has nothing left (every remaining event
  had aged when it was taken) is the rest of the round, oldest first, all
  elevated: :meth:`DeliveryOrder.rest` gives it, and the reactor walks it
  with no check between deliveries.

With harvesting on neither is taken (a harvest joins events to the round).
The walk only reads the batch: an event leaves it when the reactor takes it,
so an interrupt inside ``next`` loses nothing (clause R21, interrupts.py).

What a port must keep
---------------------
* The order of one delivery: the run being walked first, then a new run if
  ``now >= aged_at``, then backend order; skip what is not ``READY``.
* The oldest stamp is read at round start, before the first callback.  The
  age order, built later, may read the others then: a callback re-arms in
  place only its own Event, no longer ``READY``, so every event the order
  can still deliver has the stamp it had at round start.  An event that is
  not ``READY`` may sort anywhere: it is skipped.
* The sort is **stable**: ties keep backend order.  C's ``qsort``, Go's
  ``sort.Slice`` and Rust's ``sort_unstable`` are not; sort by (stamp,
  position in the batch) with them.
* Aged events are a prefix of the batch sorted by stamp, so the cursor only
  moves forward (below).
* ``now - threshold`` and ``stamp + threshold``: with an unsigned clock the
  first wraps while ``now < threshold``; any value of the second at or past
  :data:`NEVER` must become :data:`LAST` (saturate the add, then clamp).

Cost
----
Aged events are always a prefix of the batch sorted by stamp (age only
grows), so a run is the next slice of that sorted batch, found by a binary
search over its stamps, and the age-order cursor only moves forward.  Every
round (when the policy is on), before any callback runs, the oldest stamp is
found (one pass over the batch).  In a round where something can have aged,
at the first such delivery:

* the events are sorted by stamp (stable: ties keep backend order), and
* the sorted stamps are copied into a list for the binary search.

Every stamp is read then and never again by that order: a callback's re-arm
in place (``Reactor.arm``) gives its Event a new stamp, and a stamp read
later would unsort the order.  Then one comparison per delivery between
runs, and one binary search and one slice per run.

What this costs per event, by the order the stamps come in (io_uring's
batches mostly come in age order, epoll's in a few ascending runs), is
measured by ``benchmarks/age_order_cost.py`` and recorded in
``benchmarks/README.md``.

Events that join the round (harvesting)
---------------------------------------
With ``CWIST_REACTOR_HARVEST_US`` on, the reactor may add events to the round
between two deliveries: those ready since its wait, stamped ready then
(``Dispatch._harvest``).  They join the batch at its end, so in backend order
they follow the round's events, and the rule above holds over the batch so
grown: :meth:`DeliveryOrder.add` has :meth:`AgeOrder.add` rebuild the age
order of the events still ``READY`` -- the run being walked, the ones not yet
taken, and the new ones -- drops the run it was walking and asks for a new
one at the next delivery.  An event
armed long ago and ready only now is then aged at once and runs before every
event of the round not yet aged; under ``AGE_FROM=ready`` a joined event is
the youngest of the round.  The stamps of the events already in the order are
the ones read at round start (kept in the sorted list), never read again.

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
from collections.abc import Sequence
from operator import itemgetter

from ..dispatch import LAST, NEVER
from ..events import READY, stamp_of

__all__ = ["AgeOrder", "DeliveryOrder"]

_FIRST = itemgetter(0)


def _aging_time(stamp_ns: int, threshold_ns: int) -> int:
    """When an event stamped ``stamp_ns`` ages (ns), at most :data:`LAST`: never read as NEVER."""
    return min(stamp_ns + threshold_ns, LAST)


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
    since, and then :meth:`take_aged` at that time returns a run of events
    that are no longer ``READY``, which the caller skips.  At most
    :data:`LAST` while an event is left; :data:`NEVER` once none is.  Raises
    ``ValueError`` for an ``age_from`` other than ``"arm"`` or ``"ready"``.
    """

    __slots__ = ("_by_age", "_sorted_stamps", "_threshold", "_k", "_run_start", "_stamp", "aged_at")

    def __init__(self, batch: Sequence, age_from: str, threshold_ns: int):
        self._threshold = threshold_ns
        self._k = 0  # cursor in age order: everything before it is taken
        self._run_start = 0  # where the latest run began: add() puts its rest back
        stamp = stamp_of(age_from)
        self._stamp = stamp
        # Every stamp is read here and never again (see "Cost" and "What a port must keep").
        self._by_age = sorted(batch, key=stamp)
        self._sorted_stamps = stamps = list(map(stamp, self._by_age))
        self.aged_at = _aging_time(stamps[0], threshold_ns) if stamps else NEVER

    def take_aged(self, now_ns: int) -> list:
        """Every remaining event aged at ``now_ns`` (ns), oldest first: a run; ``[]`` if none.

        The caller runs them in this order before any other event, and asks
        again when the clock passes :attr:`aged_at` (module docstring, "Runs
        of aged events").  A run may hold events that are no longer
        ``READY`` (they ran in backend order, or were disarmed); the caller
        skips those, as it skips them in backend order.
        """
        sorted_stamps, k = self._sorted_stamps, self._k
        # Aged means stamp <= now - threshold; stamps ascend, so the run is a slice.
        end = bisect_right(sorted_stamps, now_ns - self._threshold, k)
        self._run_start = k
        self._k = end
        self.aged_at = _aging_time(sorted_stamps[end], self._threshold) if end < len(sorted_stamps) else NEVER
        return self._by_age[k:end]

    def add(self, events: list) -> None:
        """Merge ``events``, which joined the round's batch at its end, into the age order.

        Rebuilds the order from the events still ``READY`` of the latest run
        on (the caller drops that run and asks :meth:`take_aged` again) plus
        ``events``, by stamp; ties keep backend order, the round's own events
        before the joined ones.  The joined events' stamps are read now, the
        others' are the ones read at round start ("Events that join the
        round" in the module docstring).
        """
        start = self._run_start
        # An event re-armed in place (Reactor.arm) and joining again is a new arming:
        # its entry from the earlier one goes.
        joining = {id(ev) for ev in events}
        kept = [
            (stamp, ev)
            for stamp, ev in zip(self._sorted_stamps[start:], self._by_age[start:])
            if ev.state == READY and id(ev) not in joining
        ]
        stamp = self._stamp
        merged = sorted(kept + [(stamp(ev), ev) for ev in events], key=_FIRST)  # stable
        self._by_age = [ev for _, ev in merged]
        self._sorted_stamps = stamps = [s for s, _ in merged]
        self._k = self._run_start = 0
        self.aged_at = _aging_time(stamps[0], self._threshold) if stamps else NEVER


class DeliveryOrder:
    """The order of delivery of a reactor's rounds: aged runs first, then backend order.

    One per reactor, reused round after round; ``age_from`` and
    ``threshold_ns`` are as :class:`AgeOrder`'s, and ``threshold_ns`` 0 is
    backend order alone (``CWIST_REACTOR_TAIL_US=0``).  :meth:`start`
    begins a round over ``batch``, the round's events in backend order (the
    reactor's list: an event harvested mid-round joins it at its end, and
    :meth:`add` is told).  Raises ``ValueError`` for an ``age_from`` other
    than ``"arm"`` or ``"ready"``.

    :meth:`next` gives the event to deliver next, and :attr:`elevated` says
    whether it came from a run of aged events; :meth:`again` puts the event
    it gave back, when the reactor did something else first (drained posts,
    harvested).  See "The walk" in the module docstring.

    The walk is over one sequence at a time, ``_seq[_i:_n]``: the batch, or
    a run of aged events (:attr:`elevated` true), after which backend order
    goes on from ``_resume``.  ``_check_at`` is the earliest time an event
    not yet taken can have aged while walking the batch (the aging time of
    the oldest stamp until the :class:`AgeOrder` is built, then
    :attr:`AgeOrder.aged_at`) and :data:`NEVER` in a run, where no check is
    made.  ``_age`` is the round's :class:`AgeOrder`, None until it is built.
    """

    __slots__ = (
        "_batch",
        "_age_from",
        "_stamp",
        "_threshold",
        "_age",
        "_seq",
        "_i",
        "_n",
        "_resume",
        "_check_at",
        "elevated",
        "reads_clock",
        "in_backend_order",
    )
    name = "age"  # CWIST_REACTOR_POLICY=age (tailreactor/policies)
    _batch: Sequence  # the round's events in backend order; () once the round is over
    _seq: Sequence  # the sequence walked now: the batch or a run
    _age: AgeOrder | None  # built on first need (_age_order)

    def __init__(self, age_from: str = "arm", threshold_ns: int = 0):
        stamp = stamp_of(age_from)
        self._age_from = age_from
        self._stamp = stamp
        self._threshold = threshold_ns
        #: Whether :meth:`next` reads ``now_ns`` (policies/__init__.py): only with the threshold on.
        self.reads_clock = threshold_ns > 0
        #: Backend order all round (policies/__init__.py): only with the threshold off.
        self.in_backend_order = not threshold_ns
        self._resume = 0
        self.start([])

    def start(self, batch: list) -> None:
        """Begin a round over ``batch``: nothing of the previous round is kept.

        Reads the oldest stamp of the batch now, before any callback of the
        round; the age order itself is built when the clock first reaches
        that stamp's aging time (``_take_run``), or at a harvest (:meth:`add`).
        """
        self._batch = self._seq = batch
        self._age = None
        self._i = 0
        self._n = len(batch)
        #: Whether the event :meth:`next` returned last came from a run of aged events.
        self.elevated = False
        if self._threshold and batch:
            at = self.aged_at(batch)
            self._check_at = at if at < LAST else LAST  # _aging_time: an event left is never NEVER
        else:
            self._check_at = NEVER

    def aged_at(self, batch: list) -> int:
        """The clock value (ns) at which the oldest event of ``batch`` ages (past :data:`NEVER`: no event).

        Before it nothing in the round is aged, so the rule is backend order:
        the reactor walks such a round itself (dispatch.py, ``Dispatch._dispatch``)
        and asks this order for the next event only from the delivery at
        which the clock has reached this value.  Exact (aged means ``stamp +
        threshold <= now``, as :meth:`AgeOrder.take_aged`), not clamped.
        """
        if len(batch) == 1:  # (its one stamp: cheaper than min() over a map)
            return self._stamp(batch[0]) + self._threshold
        # (min() without default=: the empty batch is tested here instead)
        return min(map(self._stamp, batch)) + self._threshold if batch else NEVER

    def aged_run(self, batch: list, now_ns: int) -> list | None:
        """``batch`` oldest first if every event of it has aged at ``now_ns`` (ns), else None.

        Then the rule gives the rest of the round as one run: every remaining
        event is aged and stays so, and nothing else remains, so the order is
        the batch sorted by stamp (stable: ties keep backend order), all
        elevated, with no check between deliveries.  The reactor asks at the
        delivery at which the clock reaches :meth:`aged_at` and walks that
        run itself (dispatch.py, ``Dispatch._dispatch``).  Events of
        ``batch`` that are no longer ``READY`` sort anywhere (they are
        skipped), but a new stamp of theirs (a re-arm in place) can make
        this None: then the order is asked as usual, which is always right.
        """
        by_age = sorted(batch, key=self._stamp)
        return by_age if self._stamp(by_age[-1]) + self._threshold <= now_ns else None

    def next(self, now_ns: int):
        """The event to deliver at ``now_ns`` (ns), or None when the round has none left.

        The rule of the module docstring: the rest of the run being walked;
        else, if an event has aged by ``now_ns``, a new run
        (:meth:`AgeOrder.take_aged`); else the next event in backend order.
        """
        while True:
            if now_ns >= self._check_at:
                self._take_run(now_ns)
            i = self._i
            if i < self._n:
                ev = self._seq[i]
                self._i = i + 1
                if ev.state == READY:
                    return ev
                # Not READY: it ran in a run, or an earlier callback disarmed or re-armed it.
            elif self.elevated and self._resume < len(self._batch):
                self._walk_batch(self._resume)  # the run is over: backend order goes on
            else:  # the round is over (after a run: backend order had nothing left, see _take_run)
                self._batch = self._seq = ()  # let go of its events (and their callbacks' owners)
                self._age = None
                return None

    def rest(self) -> Sequence | None:
        """The events this order gives after the one :meth:`next` gave last, if that is all it gives.

        That is so in a run after which backend order has nothing left
        (``_take_run``: every remaining event had aged when the run was
        taken): the rest of the run, oldest first, all elevated, with no
        check between them.  Then the reactor walks them itself (dispatch.py,
        ``Dispatch._in_order``) and this order lets go of the round; else None.
        """
        if not self.elevated or self._resume < len(self._batch):
            return None
        left = self._seq[self._i : self._n]  # (a run is a list: its slice is a copy)
        self._batch = self._seq = ()  # let go of the round's events (and their callbacks' owners)
        self._age = None
        return left

    def _take_run(self, now_ns: int) -> None:
        """Walk the run of the events aged at ``now_ns`` next, then backend order again."""
        if not self._threshold or self.elevated:
            return  # only a clock at or past NEVER (an injected one) gets here
        age = self._age_order()
        run = age.take_aged(now_ns)
        if age.aged_at == NEVER:
            self._i = self._n  # every event is taken or gone: backend order has nothing left
        if run:
            self._resume = self._i
            self._seq, self._i, self._n = run, 0, len(run)
            self._check_at = NEVER
            self.elevated = True
        else:  # aged_at was a lower bound (or clamped to LAST): backend order goes on
            self._check_at = age.aged_at

    def _age_order(self, joined: int = 0) -> AgeOrder:
        """The round's :class:`AgeOrder`, built now if it is not yet: over the batch but its last ``joined``."""
        if self._age is None:
            batch = self._batch
            self._age = AgeOrder(
                batch[: len(batch) - joined] if joined else batch, self._age_from, self._threshold
            )
        return self._age

    def _walk_batch(self, i: int) -> None:
        """Walk the batch in backend order from position ``i``."""
        self._seq, self._i, self._n = self._batch, i, len(self._batch)
        self._check_at = self._age.aged_at if self._age is not None else NEVER
        self.elevated = False

    def again(self) -> None:
        """The event :meth:`next` gave last was not taken: give it (or what now comes first) again."""
        self._i -= 1

    def add(self, events: list) -> None:
        """``events`` joined the batch at its end (a harvest): walk them too.

        In backend order they come after the round's own; with the age
        order on, :meth:`AgeOrder.add` merges them (the age order of the
        round's own events is built first, if it is not yet), and the run
        being walked is dropped (its rest, an event given back by
        :meth:`again` too, is back in the age order), so the next delivery
        asks for a new one.
        """
        if self._threshold:
            self._age_order(len(events)).add(events)
        self._walk_batch(self._resume if self.elevated else self._i)
