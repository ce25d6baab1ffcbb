"""Step 5 of a round, the dispatch: what the reactor keeps whatever the order of delivery.

Role
----
:class:`Dispatch` is the part of :class:`tailreactor.reactor.Reactor` that
runs step 5 of its round (reactor.py, "One round"): next event, take it, run
it, until the round has none left.  The order is the policy's
(:mod:`tailreactor.policies`); what holds whatever the policy is here, in
the reactor: every event of the batch runs once (an event given that is no
longer ``READY`` is skipped, and the sweep runs in backend order what the
policy left ``READY``), each is taken before its callback (interrupts.py),
and the round budget, the harvest and the drain chunk keep their times
between deliveries (:class:`Due`).  It is a base class of the reactor, kept
in a file of its own so that each file reads as one part of the
specification; it reads and writes the reactor's fields annotated on the
class, and calls the reactor's ``_stamp``, ``_drain_posts`` and
``_callback_failed``.

A round does only what its knobs turn on.  A policy in backend order all
round (``in_backend_order``) is asked nothing: the reactor walks the batch
itself, a list's iterator (which reaches what a harvest appends).  Age order
is asked only where the rule has something to decide: the reactor walks its
round the same way until the round's oldest event has aged (before that the
rule is backend order), delivers a round of one event at once, and walks a
run that is the rest of the round itself (policies/age.py, "Where the
reactor walks the round itself").  The clock
is read before each delivery only when the policy, the round budget,
harvesting or the probe reads it; else "now" stays the round start.  The
reactor's walk reads it before each delivery but the round's first: step 5
starts from a clock value read after the wait (and after the timers, when
step 4 ran some), and no callback has run since, so it is the clock of that
delivery; no submit or harvest is due at it.  The
round budget's and the harvest's clock values are set per round only when
one of them is on (and then the clock is read), so a round that reads no
clock tests nothing of them; the drain chunk is a count compared per
delivery (in backend order, right after the callback that reaches it).
The sweep, a second walk of the batch, runs only when an entry can still be
``READY``: the callbacks run and the entries dropped since the batch was kept
(``RoundState.dropped``: disarmed or replaced while ``READY``) count fewer
than the batch holds.  What each policy costs in instructions per request is
in ``benchmarks/README.md`` ("Dispatch policies: instructions per request").

Harvesting mid-round (``CWIST_REACTOR_HARVEST_US`` > 0, beyond CWIST)
--------------------------------------------------------------------
Age-based dispatch reorders only the events of the round's batch: an event
that becomes ready just after the wait returned waits for the whole round,
however long ago it was armed.  With harvesting on, once the round has run
``HARVEST_US`` and again every ``HARVEST_US`` after that, before the next
delivery (while the round has events left) the reactor takes what is ready
now without blocking (``backend.harvest``: io_uring peeks its completion
queue, epoll and selectors poll with timeout 0) and stamps it into the batch
as step 3 does, ready at that clock value: in backend order those events
follow the round's own, and the age order is rebuilt over the events left
(``add``: :meth:`tailreactor.policies.age.AgeOrder.add`), so one armed long ago runs
before every event of the round not yet aged.  Bounds: a round runs at most
as many harvested events as its wait returned (it at most doubles, so
callbacks that keep events ready cannot keep it alive); timers still fire
once per round, in step 4, and posts drain as below.  The bound counts the
harvested events that *run*, not those taken: until it is reached the round
goes on harvesting every ``HARVEST_US`` to its last delivery, and a
harvested event the order reaches once the bound is reached is not run: it
stays ``READY`` and leads the next round's batch, as the events of a round
cut short do, so it runs there (that round owes it as one of its own).
Harvesting to the round's end is what lets an order by size help: under
``shortest`` a short event that becomes ready late in a long round is
harvested and runs next, while the long ones harvested with it wait for the
next round; were the harvesting to stop once as many events had been
*taken* as the wait returned, the short one would wait for the rest of the
round (docs/en/findings.md, "Moonshot").  A harvested event is told from
the round's own by its stamp: it was stamped ready after the round's start
(the round's own at it or before).  A harvested event has left the backend
(one-shot): the next wait does not report it again.  A backend without
``harvest`` is never harvested.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

from .backends.base import direction_name
from .events import CANCELLED, DONE, READY, Event
from .state import Counters, RoundState

__all__ = ["NEVER", "LAST", "Due", "Dispatch"]

#: "Never", the one sentinel of a round: ``aged_at`` when no event is left to
#: take (the walk of the round ends on it), and every deadline of the round
#: that is off (``Dispatch._dispatch``).  2**63, one more than the largest
#: signed 64-bit value, so no clock value reaches it.
NEVER = 1 << 63
#: The latest ``aged_at`` while an event is left: an aging time at or past
#: NEVER (only an injected clock gets there) is clamped here, so that it is not
#: read as "nothing left", which would end the walk with an event not run.
#: A C or Rust port can use INT64_MAX for NEVER and INT64_MAX - 1 here: a
#: saturating add for ``stamp + threshold``, then ``at >= NEVER ? LAST : at``
#: (a saturated sum lands on NEVER itself).
LAST = NEVER - 1

#: Takes the place of a batch entry whose Event joined the batch again (a
#: harvest found it re-armed in place and ready): never dispatched, never carried.
_GONE = Event(-1, 0, None, None, 0)
_GONE.state = CANCELLED


class Due:
    """When the work a round does between deliveries is next due (:meth:`Dispatch._dispatch`).

    The knobs, given once: ``budget_ns`` (``CWIST_REACTOR_ROUND_BUDGET_US``),
    ``harvest_ns`` (``CWIST_REACTOR_HARVEST_US``) and ``drain_chunk``
    (``CWIST_REACTOR_DRAIN_CHUNK``), each 0 when off.  What they make due:
    ``drain_at``, the count of callbacks after which the posts drain next
    (every ``drain_chunk``); ``flush_at``, the clock value (ns) past which
    the re-arms queued since the last submit are submitted (the round
    budget, then every budget); ``harvest_at``, the clock value from which
    the next harvest is due (every ``harvest_ns``) while ``harvest_left``,
    the harvested events the round may still run, is above 0: at most as
    many as the round's batch had (:meth:`joins` counts them); ``round_ns``, the round's start
    (when ``clocked``: a harvested event is stamped after it).  ``at_ns``: the earlier of ``flush_at`` and
    ``harvest_at``, so that one comparison per delivery tells whether either
    may be due.  Each is :data:`NEVER` while off.  ``clocked``: the budget or
    harvesting is on; only then do the clock values move, and a round start
    them (:meth:`start`).  ``aged_at``: while the reactor walks an
    age-ordered round itself, the clock value at which the round's oldest
    event ages (set per round, :meth:`Dispatch._dispatch`); :data:`NEVER`
    for a policy in backend order all round.
    """

    __slots__ = (
        "drain_at",
        "flush_at",
        "harvest_at",
        "harvest_left",
        "at_ns",
        "budget_ns",
        "harvest_ns",
        "drain_chunk",
        "first_drain",
        "clocked",
        "aged_at",
        "round_ns",
    )

    def __init__(self, budget_ns: int = 0, harvest_ns: int = 0, drain_chunk: int = 0):
        self.budget_ns = budget_ns
        self.harvest_ns = harvest_ns
        self.drain_chunk = drain_chunk
        self.first_drain = self.drain_at = drain_chunk or NEVER
        self.clocked = bool(budget_ns or harvest_ns)
        self.flush_at = self.harvest_at = self.at_ns = self.aged_at = NEVER
        self.round_ns = 0
        self.harvest_left = 0

    def joins(self) -> bool:
        """A harvested event is next: True (and it is counted) while the round's bound lets it run.

        False once the round has run as many harvested events as its wait
        returned: the event is left ``READY`` for the next round.  The bound
        reached, harvesting stops: what it would take could not run.
        """
        if self.harvest_left <= 0:
            return False
        self.harvest_left -= 1
        if not self.harvest_left:  # the bound is reached: what a harvest takes now could not run
            self.harvest_at = NEVER
            self.at_ns = self.flush_at
        return True

    def start(self, start_ns: int, harvest_left: int) -> None:
        """Begin a round that started at ``start_ns`` with ``harvest_left`` events (when ``clocked``)."""
        budget_ns, harvest_ns = self.budget_ns, self.harvest_ns
        self.round_ns = start_ns
        self.flush_at = flush_at = start_ns + budget_ns if budget_ns else NEVER
        self.harvest_at = harvest_at = start_ns + harvest_ns if harvest_ns else NEVER
        self.harvest_left = harvest_left if harvest_ns else 0
        self.at_ns = flush_at if flush_at < harvest_at else harvest_at


class Dispatch:
    """Step 5 of :class:`tailreactor.reactor.Reactor`'s round (module docstring); a base class of it.

    The reactor's fields it reads and writes are annotated below (reactor.py
    sets them): the policy object and what the round derives from it
    (``Reactor._use``), the work due between deliveries, the round's state,
    the armed table and the callback running now.
    """

    _order: Any  # the policy object (tailreactor.policies)
    _walk: bool  # the policy is in backend order all round: the reactor walks the batch itself
    _aged_at: Callable[[list], int] | None  # the policy's aged_at (age order), or None
    _timed: bool  # the clock is read before each delivery
    _due: Due
    _state: RoundState
    _armed: dict
    _late: bool
    _running: Event | None
    _arms_since_flush: int
    _harvest_from: Any
    counters: Counters
    probe: Any
    clock: Callable[[], int]
    backend: Any
    _posts: Any
    _stamp: Callable[[int], list]  # step 3, for a harvest
    _drain_posts: Callable[[], None]
    _callback_failed: Callable[..., None]

    def _dispatch(self, batch: list[Event], now: int) -> int:
        """Step 5: next event, take it, run it, until none is left; return how many ran.

        ``now`` is the round's stamp.  In backend order the next event is the
        batch's next, in the order the backend reported it: the loop below,
        which does that and what is due between deliveries, nothing else.  It
        walks the whole round when the policy is in backend order all round
        (``_walk``).  It walks an age-ordered round (the policy has
        ``aged_at``: policies/age.py) too, by the same rule: until the clock
        reaches the aging time of the round's oldest event (``Due.aged_at``)
        nothing in the round is aged, so the rule gives the batch's next
        event.  At that delivery, if every event left has aged, the rule
        gives the rest of the round as one run, oldest first, all elevated
        (the policy's ``aged_run``): the loop walks that run as it walks the
        batch, with no check between deliveries (a round of one event is
        that run already, and is delivered at once); else the policy gives
        the next event from there on (:meth:`_in_order`).  Elevations are
        counted as ``dispatched`` is, as the walk ends: those that ran from
        ``first``.  Any other order, and an age-ordered round with harvesting
        on (a harvest joins events whose age this loop does not track), the
        policy orders all round.
        """
        due = self._due
        due.drain_at = drain_at = due.first_drain
        if due.clocked:
            due.start(now, len(batch))
        if not self._walk:
            if self._aged_at is None:
                return self._in_order(batch, now)
            due.aged_at = self._aged_at(batch)  # (_timed is set: the loop reads the clock)
        timed = self._timed
        probe = self.probe
        ran = 0
        try:  # (two tries: were one finally cut short by an interrupt, the other clears _late)
            try:
                while True:  # the batch; then, at most once, the rest of an age-ordered round (below)
                    for ev in batch:  # a list's iterator: it reaches what a harvest appends
                        if ev.state != READY:
                            continue  # an earlier callback or post disarmed it: never cancelled
                        if timed:  # (a round with a time due reads the clock: Due.clocked makes _timed)
                            if ran:  # (before the round's first callback ``now`` is the round's start)
                                if due.harvest_ns and ev.ready_ns > due.round_ns and not due.joins():
                                    continue  # harvested past the round's bound: it leads the next round
                                now = self.clock()
                                if (
                                    now >= due.at_ns
                                ):  # a harvest or a submit may be due (they run no callback)
                                    self._between(due, None, now, ran, ev)
                            if now >= due.aged_at:  # the round's oldest event has aged (policies/age.py)
                                if len(batch) > 1 or self._walk:  # (_walk: a clock at NEVER, an injected one)
                                    break  # the policy decides from this delivery on (below)
                                first = ran  # (0) the round's one event, aged: elevated (counted below)
                                self._late = True
                        # Take the event, then run its callback (interrupts.py: nothing calls out in between).
                        ev.state = DONE
                        del self._armed[ev.key]
                        if probe is not None:
                            # Before the callback: a re-arm from it re-stamps this Event.
                            queued_ns, ready_for_ns = now - ev.armed_ns, now - ev.ready_ns
                        # What arm() and dispatch_late() read about the callback running now:
                        self._running = ev
                        callback = ev.callback
                        ran += 1
                        try:
                            callback(ev)
                        except Exception:  # noqa: BLE001 (a callback's error must not stop the round)
                            self._callback_failed(
                                "callback %r for fd %d (%s)", callback, ev.fd, direction_name(ev.direction)
                            )
                        finally:
                            if probe is not None:
                                probe.dispatch(queued_ns, ready_for_ns, self.clock() - now, self._late)
                        if ran == drain_at:  # the drain chunk: the posts queued so far, before the next event
                            self._between(due, None, now, ran, None, self._late)
                            drain_at = due.drain_at
                    else:
                        return ran
                    # The round's oldest event has aged at ``now``.  If every event left has, the rule
                    # gives the rest of the round as one run, oldest first, all elevated: the loop walks
                    # it (``ev``, not yet taken, is in it), reading the clock only for what is due
                    # between deliveries and the probe.  Else the policy orders the round (below).
                    run = None if self._aged_at is None or self._late else self._order.aged_run(batch, now)
                    # (_late: only a clock at or past NEVER, an injected one, comes back here.)
                    if run is None:
                        break
                    first = ran  # elevated from here on (counted below, as ``dispatched`` is)
                    self._late = True
                    batch = run
                    timed = due.clocked or probe is not None
                    due.aged_at = NEVER
            finally:
                if self._late:  # the round ended walking elevated events: those that ran from ``first``
                    self._late = False
                    self.counters.tail_elevations += ran - first
                self._running = None  # the last one holds its callback, and so its owner, alive
                self.counters.dispatched += ran
        finally:
            self._late = False
        return self._in_order(batch, now, ran)

    def _in_order(self, batch: list[Event], round_start: int, ran: int = 0) -> int:
        """Step 5 in the policy's order (:meth:`_dispatch` has set ``_due`` for the round).

        The next event is the policy's ``next``; once it has none left while
        an event of the batch can still be ``READY``, the sweep walks the
        batch in backend order (a list's iterator, a cursor the reactor keeps
        itself: it reaches what a harvest appends).  A policy with ``rest``
        (age order) is asked once, at the first event it elevates, whether
        the events it would give after it are the rest of the round, all
        elevated, with no decision left to make (every remaining event has
        aged: policies/age.py): then the reactor walks them itself, reading
        the clock only for what is due between deliveries and the probe.  ``ran``: the callbacks
        the round has run so far (:meth:`_dispatch`'s loop, in backend order:
        every entry of the batch before the one it stopped at is no longer
        ``READY``); returns the round's total.
        """
        order = self._order
        order.start(batch)
        due = self._due
        at, drain_at = due.at_ns, due.drain_at
        timed = self._timed
        probe = self.probe
        walk = False  # the reactor walks ``events`` itself: the sweep, or the rest of the round
        events = cursor = iter(batch)
        ran_before = ran
        now = round_start
        elevated = False
        # Asked once, at the first elevated event; not with harvesting on (a harvest joins events).
        rest = None if due.harvest_ns else getattr(order, "rest", None)
        try:
            while True:
                if timed:
                    now = self.clock()
                if walk:
                    ev = next(events, None)
                else:
                    ev = order.next(now)
                    elevated = order.elevated
                    if elevated and rest is not None:
                        left = rest()  # the rest of the round, if it is one run: the reactor walks it
                        rest = None
                        if left is not None:
                            walk, timed = True, due.clocked or probe is not None  # nothing left to age
                            events = cursor = iter(left)
                if ev is None:
                    if not walk and ran + self._state.dropped < len(batch):
                        # The sweep: an event of the batch is still READY; walk the batch again.
                        walk, elevated = True, False
                        events = cursor = iter(batch)
                        continue
                    if ran != drain_at or not self._between(due, None, now, ran, None):
                        break  # the round is over
                    drain_at = due.drain_at
                    continue  # posts ran after the last callback: they may have made events ready
                if ev.state != READY:
                    continue  # it ran, or an earlier callback disarmed it: never twice, never cancelled
                if now >= at or ran == drain_at:  # something may be due
                    again = self._between(due, None if walk else order, now, ran, ev)
                    at, drain_at = due.at_ns, due.drain_at
                    if again:  # posts ran or events joined: ask again (the policy was told: again())
                        if walk:
                            events = chain((ev,), cursor)  # ev first again, then the rest of the batch
                        continue
                if ev.ready_ns > round_start and due.harvest_ns:  # a harvested event
                    if not due.joins():
                        continue  # past the round's bound: it leads the next round
                    at = due.at_ns  # the bound reached, no harvest is due any more (Due.joins)
                # Take the event, then run its callback (interrupts.py: nothing calls out in between).
                ev.state = DONE
                del self._armed[ev.key]
                if elevated:
                    self.counters.tail_elevations += 1
                if probe is not None:
                    # Before the callback: a re-arm from it re-stamps this Event.
                    queued_ns, ready_for_ns = now - ev.armed_ns, now - ev.ready_ns
                # What arm() and dispatch_late() read about the callback running now.
                self._late = elevated
                self._running = ev
                callback = ev.callback
                ran += 1
                try:
                    callback(ev)
                except Exception:  # noqa: BLE001 (a callback's error must not stop the round)
                    self._callback_failed(
                        "callback %r for fd %d (%s)", callback, ev.fd, direction_name(ev.direction)
                    )
                finally:
                    if probe is not None:
                        probe.dispatch(queued_ns, ready_for_ns, self.clock() - now, elevated)
        finally:
            self._late = False
            self._running = None  # the last one holds its callback, and so its owner, alive
            self.counters.dispatched += ran - ran_before
        return ran

    def _between(self, due: Due, order, now: int, ran: int, ev: Event | None, late: bool = False) -> bool:
        """What is due before delivering ``ev`` (None: the round is over); True: ask the order again.

        After every ``drain_chunk``-th callback, the posts queued so far
        (outside any callback: ``dispatch_late()`` is false and nothing is
        re-armed in place); else, if an event is to follow and its time has
        come, a harvest (:meth:`_harvest`); else, past the round budget, the
        submit of the re-arms queued since the last one.  When posts ran or
        a harvest did, ``ev`` is given back (the policy's ``again()``;
        ``order`` is None while the reactor walks the batch itself: the
        sweep steps its cursor back) and the caller asks again.  Backend
        order's own loop (:meth:`_dispatch`) asks only for the drain chunk
        after a callback (``ev`` None) and for the rest before ``ev``, which
        it then delivers: a harvest appends behind it, and only posts could
        have disarmed it.  ``late``: what ``dispatch_late()`` says again once
        the posts have run (``_dispatch``'s walk of elevated events goes on
        elevated; every other caller sets it per delivery).
        """
        if ran == due.drain_at:
            due.drain_at += due.drain_chunk
            if self._posts.pending():
                self._late = False  # posts run outside any callback
                self._running = None
                self.counters.drain_chunk_drains += 1
                if ev is not None and order is not None:
                    order.again()
                try:
                    self._drain_posts()
                finally:
                    self._late = late  # (True: _dispatch's walk of elevated events goes on)
                return True
        if ev is None:
            return False
        if now >= due.harvest_at and due.harvest_left > 0:
            if order is not None:
                order.again()
            self._harvest(order, now, due.harvest_left)
            due.harvest_at = now + due.harvest_ns
            again = True
        elif now > due.flush_at and self._arms_since_flush:
            # Past the round budget: submit the re-arms queued since the last submit.
            if self.backend.flush():
                self.counters.round_budget_flushes += 1
            self._arms_since_flush = 0
            due.flush_at = now + due.budget_ns
            again = False  # nothing joined: deliver ev
        else:
            return False
        due.at_ns = due.flush_at if due.flush_at < due.harvest_at else due.harvest_at
        return again

    def _harvest(self, order, now: int, limit: int) -> int:
        """Take what the backend has ready now (at most ``limit`` reports) into the round's batch.

        Returns how many reports the backend gave.  They are stamped ready
        ``now`` and appended as step 3 does (``RoundState.reaped`` holds them
        until then: interrupts.py), and ``order`` walks them too
        (the policy's ``add()``; None while the reactor walks the batch
        itself, whose cursor reaches them in turn).  An event re-armed in place
        (:meth:`arm`) earlier in this round and ready again is the same
        object as an entry of the batch: that entry, of its earlier arming,
        gives way to :data:`_GONE`, so the walk meets the event only at its
        new place.
        """
        state = self._state
        batch = state.batch
        n = len(batch)
        state.reaped = reaped = self._harvest_from(limit)
        self._stamp(now)
        if len(batch) > n:
            joined = batch[n:]
            joining = {id(ev) for ev in joined}
            for j in range(n):
                if id(batch[j]) in joining:
                    batch[j] = _GONE
            if order is not None:
                order.add(joined)
            self.counters.harvested += len(joined)
        self.counters.harvests += 1
        return len(reaped)
