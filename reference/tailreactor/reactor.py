"""The reactor: one-shot arming, timers, posts and the dispatch round.

Role
----
Backend-agnostic core.  A backend (epoll, io_uring, ...) reports readiness;
everything else -- stamps, timers, posts, the dispatch policy, counters and
the optional latency probe -- is here, so every backend runs the same policy
code.

One round
---------
:meth:`Reactor._round` (what :meth:`Reactor.run_once` runs) is these five
steps, in this order:

1. **Drain posts** queued so far (oldest first).
2. **Wait** for a batch.  Timeout: 0 if posts are pending, a stop was asked
   or events are left over from a round cut short (below), else the time to
   the earliest timer, else the caller's timeout.  On io_uring this wait also
   submits the re-arms queued in the previous round (one ``io_uring_enter``
   per round).
3. **Stamp** every reaped event with ``ready_ns`` (one clock read per round)
   and append it to the round's batch.
4. **Fire due timers** (those armed before this pass).
5. **Dispatch** the batch (:class:`tailreactor.dispatch.Dispatch`, a base
   class of the reactor) in the order the dispatch policy chooses
   (:mod:`tailreactor.policies`, ``CWIST_REACTOR_POLICY``: age-based by
   default, :mod:`tailreactor.policies.age`).  The reactor takes each event
   the policy gives, skips one no longer ``READY``, and runs in backend
   order what the policy left ``READY`` (the sweep), so every event of the
   batch runs once whatever the order.  Between callbacks: the round-budget
   check (once the round has run longer than
   ``CWIST_REACTOR_ROUND_BUDGET_US``, submit the queued re-arms, and again
   every budget after that), the harvest (``CWIST_REACTOR_HARVEST_US``,
   dispatch.py) and the drain chunk (run posts every
   ``CWIST_REACTOR_DRAIN_CHUNK`` callbacks).  A round does only what its
   knobs turn on (dispatch.py).

The batch belongs to the reactor (:class:`RoundState`), not to the round's
stack.  An event in it is the round's while it is ``READY``; the dispatch
*takes* it (marks it ``DONE`` and removes it from the armed table) as its callback
starts.  A round that ends early leaves the events not taken in the batch,
and they lead the next round's batch.

Threading: every method runs on the reactor thread except :meth:`post` and
:meth:`stop`, which any thread may call.  Callbacks run inline on the reactor
thread ("readiness + synchronous completion", as in CWIST); an exception in a
callback is logged with its fd and callback and the loop goes on.

An exception that is not an ``Exception`` (``KeyboardInterrupt``,
``SystemExit``) is not the callback's failure but a request to stop: it
propagates out of :meth:`run_once`, and the round loses nothing by it
(clause R21).  What that takes in Python, and why a port in C, Rust or Go
needs almost none of it, is :mod:`tailreactor.interrupts`.

Clock: ``clock`` returns integer nanoseconds (default ``time.monotonic_ns``,
CLOCK_MONOTONIC as in CWIST).  Tests inject a fake clock and advance it from
callbacks to make "slow callbacks" deterministic.
"""

from __future__ import annotations

import logging
import threading
import time

from . import config as _config
from . import policies
from .backends import READ, WRITE, create_backend
from .backends.base import key_of, not_open_error
from .dispatch import NEVER, Dispatch, Due
from .events import ARMED, CANCELLED, DONE, READY, Event
from .interrupts import carried_over
from .posts import PostQueue
from .state import Counters, RoundState
from .timers import Timer, TimerHeap

log = logging.getLogger("tailreactor")

_DIRECTIONS = (READ, WRITE)


def _reentered(method: str) -> RuntimeError:
    return RuntimeError(
        f"{method}() called from a callback of the round in progress: a round is not "
        f"re-entrant (clause R22); return from the callback, or post() the work"
    )


__all__ = ["Reactor", "Counters", "READ", "WRITE"]  # (Counters: state.py)


class Reactor(Dispatch):
    """An event reactor on one backend.  See the module docstring.

    Parameters
    ----------
    backend:
        A backend object, a backend name (``auto``, ``io_uring``, ``epoll``,
        ``selectors``, ``module:factory``), or ``None`` for
        ``config.backend``.  Name resolution raises what
        :func:`tailreactor.backends.create_backend` raises.
    config:
        A :class:`tailreactor.config.Config`; ``None`` loads it from the
        environment (raises :class:`~tailreactor.config.ConfigError`).
    clock:
        Callable returning monotonic nanoseconds.
    probe:
        Optional latency probe (:mod:`tailreactor.probe`); ``None`` creates one
        when ``config.latency_probe`` is set.
    worker:
        Worker index (0-based) this reactor serves; tags the probe report.
    policy:
        The dispatch policy: a name of :data:`tailreactor.policies.POLICIES`,
        ``module:Class`` or a class called as ``Class(age_from, threshold_ns)``;
        ``None`` for ``config.policy``.  Raises ``ValueError`` for one that
        cannot be made.
    """

    def __init__(
        self, backend=None, *, config=None, clock=time.monotonic_ns, probe=None, worker=0, policy=None
    ):
        self.config = config if config is not None else _config.load()
        # The order of delivery, made first: a policy that cannot be made leaves no backend open.
        order = policies.create(
            policy or self.config.policy, self.config.age_from, self.config.tail_us * 1000
        )
        if backend is None or isinstance(backend, str):
            backend = create_backend(backend or self.config.backend, ring_entries=self.config.uring_entries)
        self.backend = backend
        self.clock = clock
        self.counters = Counters()
        self._armed: dict[int, Event] = {}  # by key_of(fd, direction)
        self._timers = TimerHeap(clock)
        self._thread_ident: int | None = None
        self._posts = PostQueue(backend.wake, lambda: self._thread_ident, clock)
        self._stopping = False
        self._late = False
        self._closed = False
        self._in_round = False  # run_once is running (R22: it must not nest)
        self._arms_since_flush = 0
        self._state = RoundState()
        # The policy's knobs, read once: the round does not re-parse config.
        self._tail_ns = self.config.tail_us * 1000
        self._age_from = self.config.age_from  # the stamp age counts from (dispatch.py)
        # Harvesting mid-round: only on a backend that can take what is ready now.
        self._harvest_from = getattr(backend, "harvest", None)
        harvest_ns = self.config.harvest_us * 1000 if callable(self._harvest_from) else 0
        # The work due between deliveries and its knobs: one, reset every round.
        self._due = Due(self.config.round_budget_us * 1000, harvest_ns, self.config.drain_chunk)
        self._rx = self.config.rx_uring != "0" and hasattr(backend, "arm_recv")
        # A backend may offer rearm(): arm from inside the callback of the event
        # just reported for that fd, which it may do cheaper (epoll: no
        # epoll_ctl).
        self._rearm = getattr(backend, "rearm", None) or backend.arm
        # The event whose callback runs now, or None: arm() re-arms it in place.
        self._running: Event | None = None
        if probe is None and self.config.latency_probe:
            from .probe import LatencyProbe

            probe = LatencyProbe(backend=self.backend_name, worker=worker, config=self.config)
        self.probe = probe
        self._use(order)

    def _use(self, order) -> None:
        """Deliver in the order of the policy object ``order``, and derive once what a round reads of it.

        ``_walk``: the order is the backend's all round (``in_backend_order``,
        policies/__init__.py), so the reactor walks the batch itself and asks
        the policy nothing.  ``_timed``: a round reads the clock before each
        delivery, because the policy, the round budget, harvesting or the
        probe reads it.  ``_aged_at``: the policy's ``aged_at`` (age order), with
        which the reactor walks a round itself until its oldest event has aged
        (dispatch.py).
        """
        self._order = order
        self._walk = walk = getattr(order, "in_backend_order", False)
        # (not with harvesting on: a harvest joins events whose age that walk does not track)
        self._aged_at = None if walk or self._due.harvest_ns else getattr(order, "aged_at", None)
        self._due.aged_at = NEVER  # an age-ordered round sets it (dispatch.py); nothing ages before
        self._timed = self._due.clocked or self.probe is not None or (not walk and order.reads_clock)

    # -- introspection ----------------------------------------------------------
    @property
    def backend_name(self) -> str:
        return getattr(self.backend, "name", type(self.backend).__name__)

    def dispatch_late(self) -> bool:
        """True exactly while running the callback of an event elevated by age.

        The HTTP handler reads it to serve its buffered pipeline without
        yielding (CWIST's ``cwist_reactor_dispatch_late()``).
        """
        return self._late

    def armed(self, fd: int, direction: int) -> Event | None:
        """The event armed for ``fd`` in ``direction``, or None."""
        return self._armed.get(key_of(fd, direction))

    # -- arming ---------------------------------------------------------------
    def arm(self, fd: int, direction: int, callback, data=None) -> Event:
        """Arm ``fd`` one-shot for ``READ`` or ``WRITE``; return the :class:`Event`.

        ``callback(event)`` runs once when the fd is ready (or already is); arm
        again from the callback to keep listening.  That re-arm (same fd and
        direction, from the callback of the event just delivered) returns the
        delivered Event itself, re-armed: new callback and data, a fresh
        ``armed_ns``, ``ready_ns`` and ``revents`` 0 -- one allocation less
        per request (CWIST likewise recycles a fired event's slot through a
        pool); read the event before re-arming.  Every other arm returns a new
        Event.  Arming a direction that is armed already replaces the earlier
        event (it will not run).  Raises ``OSError(EBADF)`` for a closed fd,
        ``ValueError`` for a bad direction, ``RuntimeError`` after :meth:`close`.
        """
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be READ (1) or WRITE (2), got {direction!r}")
        return self._arm(fd, direction, callback, data, None)

    @property
    def rx_supported(self) -> bool:
        """True when :meth:`arm_recv` works: the backend has a receive operation
        (io_uring) and ``CWIST_RX_URING`` is not ``0`` (CWIST's ``rx_supported``)."""
        return self._rx

    def arm_recv(self, fd: int, buffer, callback, data=None) -> Event:
        """Arm a one-shot receive into ``buffer`` (RX-uring); return the :class:`Event`.

        The kernel receives when data, EOF or an error arrives, and then
        ``callback(event)`` runs with ``event.result``: bytes received into
        ``buffer``, 0 at EOF, or ``-errno``.  It is the READ direction of
        ``fd``: arming READ replaces it and ``disarm(fd, READ)`` cancels it;
        the event is stamped, ordered, counted, and re-armed from its own
        callback (the same Event, ``result`` 0 again), like any other: it
        takes the same arming path as :meth:`arm`.  Raises ``RuntimeError``
        when :attr:`rx_supported` is false, ``ValueError`` for an empty
        buffer, ``OSError(EBADF)`` for a closed fd.  A receive that is
        replaced or disarmed before the kernel processes its cancel may still
        take bytes, already queued or arriving, and they are lost with it: do
        that only when closing.  Source: CWIST PR #187 (``CWIST_RX_URING``).
        """
        if not self._rx:
            raise RuntimeError(
                f"arm_recv needs a backend with a receive operation and CWIST_RX_URING "
                f"not 0; backend {self.backend_name}, "
                f"CWIST_RX_URING={self.config.rx_uring}: arm READ and recv instead"
            )
        if self._closed:
            raise RuntimeError("reactor is closed")
        if not len(buffer):
            raise ValueError("arm_recv needs a non-empty buffer: its result 0 would read as EOF")
        return self._arm(fd, READ, callback, data, buffer)

    def _arm(self, fd: int, direction: int, callback, data, buffer) -> Event:
        """The one arming path of :meth:`arm` (``buffer`` None) and :meth:`arm_recv`.

        Two cases.  From the callback of the event just delivered for this
        fd and direction, that Event is re-armed in place: nothing else can
        be armed for it (it left the table when it was taken, and every arm
        of it since would have come here), and the reactor is open (close()
        clears ``_running``).  Any other arm makes a new Event and replaces
        what the table holds for its key, once the backend has accepted it.  An arm from
        the fd's own callback tells the backend so (``rearm``, which may skip
        work: backends/base.py).
        """
        running = self._running
        if (
            running is not None
            and running.fd == fd
            and running.direction == direction
            and running.state == DONE
        ):
            ev = running
            ev.callback = callback
            ev.data = data
            ev.armed_ns = self.clock()
            ev.ready_ns = ev.revents = 0
            ev.state = ARMED
            if buffer is None:
                self._rearm(fd, direction, ev)
            else:
                self.backend.arm_recv(fd, buffer, ev)
        else:
            if self._closed:
                raise RuntimeError("reactor is closed")
            if fd < 0:
                raise not_open_error(fd, "a closed socket's fileno() is -1")
            ev = Event(fd, direction, callback, data, self.clock())
            if buffer is not None:
                self.backend.arm_recv(fd, buffer, ev)
            elif running is not None and running.fd == fd:
                self._rearm(fd, direction, ev)
            else:
                self.backend.arm(fd, direction, ev)
            old = self._armed.get(ev.key)
            if old is not None:
                if old.state == READY:
                    self._state.dropped += 1
                old.state = CANCELLED
        self._armed[ev.key] = ev
        self._arms_since_flush += 1
        return ev

    def arm_read(self, fd: int, callback, data=None) -> Event:
        return self.arm(fd, READ, callback, data)

    def arm_write(self, fd: int, callback, data=None) -> Event:
        return self.arm(fd, WRITE, callback, data)

    def disarm(self, fd: int, direction: int = READ | WRITE) -> int:
        """Disarm ``fd`` for ``READ``, ``WRITE`` or both (default).

        Returns how many events were disarmed.  A disarmed event never runs,
        even if it is in the batch being dispatched (an earlier callback of the
        same batch may disarm or close the fd).  Call it before closing an fd.
        """
        n = 0
        for d in (READ, WRITE):
            if direction & d:
                ev = self._armed.pop(key_of(fd, d), None)
                if ev is not None:
                    if ev.state == READY:
                        self._state.dropped += 1  # one entry of the batch the round will not run
                    ev.state = CANCELLED
                    n += 1
                # Tell the backend even when nothing is armed: one that keeps
                # a registration across arms (epoll) drops it here, before
                # the owner closes the fd and its number is reused.
                if not self._closed:
                    self.backend.disarm(fd, d)
        return n

    def flush(self) -> int:
        """Submit queued arms and disarms to the kernel now; return how many were submitted.

        Only io_uring queues them (they normally ride the next wait's
        ``io_uring_enter``); epoll arms synchronously and returns 0.  Use it
        when the kernel must see a disarm before the next round, e.g. before
        closing a listening socket whose pending poll keeps it open.  Returns
        0 after :meth:`close`.
        """
        if self._closed:
            return 0
        self._arms_since_flush = 0
        return self.backend.flush()

    # -- timers and posts -----------------------------------------------------
    def timer(self, callback, data=None) -> Timer:
        """A new, unarmed :class:`~tailreactor.timers.Timer` (reactor thread only)."""
        return Timer(self._timers, callback, data)

    def call_later_us(self, delay_us: int | float, callback, data=None) -> Timer:
        """Arm a new timer ``delay_us`` microseconds from now and return it."""
        t = self.timer(callback, data)
        t.arm_us(delay_us)
        return t

    def post(self, callback, data=None) -> None:
        """Run ``callback(data)`` on the reactor thread soon.  Any thread may call it.

        Posts run oldest first, each exactly once, at the start of the next
        round or at a drain-chunk point inside a batch.  Raises ``TypeError``
        if ``callback`` is not callable.
        """
        self._posts.post(callback, data)

    def stop(self) -> None:
        """Make :meth:`run` return after the current round.  Any thread may call it."""
        self._stopping = True
        self.backend.wake()

    # -- the loop ---------------------------------------------------------------
    def run(self) -> None:
        """Run rounds until :meth:`stop`.  Raises ``RuntimeError`` when called
        from inside a round, as :meth:`run_once` does."""
        if self._in_round:
            raise _reentered("run")
        self._thread_ident = threading.get_ident()
        try:
            while not self._stopping:
                self.run_once(None)
        finally:
            self._stopping = False

    def run_once(self, timeout_s: float | None = 0) -> int:
        """Run one round (see the module docstring); return callbacks run.

        ``timeout_s`` bounds the wait (``None``: until something happens).
        Raises ``RuntimeError`` after :meth:`close`, and when called from
        inside a round (an I/O, timer or posted callback): a round is not
        re-entrant (clause R22; asyncio refuses a nested ``run_forever`` too).
        A nested round would deliver events while the outer one holds others
        taken from the backend, and change what :meth:`dispatch_late` and
        the hot re-arm say about the callback that called it.
        """
        if self._closed:
            raise RuntimeError("reactor is closed")
        if self._in_round:
            raise _reentered("run_once")
        if self._thread_ident is None:
            self._thread_ident = threading.get_ident()
        self._in_round = True
        cut_short = True  # until the round returns (interrupts.py: what a round cut short leaves)
        try:
            if self._state.reaped:  # reaped by a round cut short before it stamped them all
                self._stamp(self._state.start_ns or self.clock())
            self._state.start_ns = 0
            ran = self._round(timeout_s)
            cut_short = False
            return ran
        finally:
            self._in_round = False
            self._end_round(cut_short)

    def _round(self, timeout_s: float | None) -> int:
        """One round: the five steps of the module docstring, in order."""
        # 1. Posts queued so far.
        drained = self._posts.pending()
        if drained:
            self._drain_posts()
            if self._closed:
                return 0  # a post closed the reactor
        # 2. Wait, never past the earliest timer, nor at all with work pending.  The earliest
        # deadline is read once: nothing runs between here and step 4 that could arm a timer.
        deadline = self._timers.next_deadline()
        self._state.reaped = self.backend.wait(self._wait_timeout(timeout_s, deadline, drained))
        self._arms_since_flush = 0  # the wait submitted them
        # 3. Stamp what became ready: one clock read for the whole batch.
        now = self._state.start_ns = self.clock()
        batch = self._stamp(now)
        # 4. Timers due now (none before the earliest deadline).
        if deadline is not None and deadline <= now:
            self._fire_timers(now)
            now = self.clock()  # step 5 starts after their callbacks
        # 5. Dispatch, from ``now``: the clock before its first delivery (no callback ran since).
        return self._dispatch(batch, now)

    def _wait_timeout(self, timeout_s: float | None, deadline: int | None, drained: bool) -> float | None:
        """Step 2's timeout: 0 with work pending, else until ``deadline`` (the earliest timer's,
        or None), at most ``timeout_s``.

        Posts are pending only if step 1 ran some (``drained``): they may have
        posted more, from this thread, which wakes nothing.  A post from
        another thread since step 1 wakes the wait itself (posts.py).
        """
        if (drained and self._posts.pending()) or self._stopping or self._state.batch:
            return 0
        if deadline is None:
            return timeout_s
        until = max(0.0, (deadline - self.clock()) / 1e9)
        return until if timeout_s is None else min(timeout_s, until)

    def _stamp(self, now: int) -> list[Event]:
        """Step 3 (and each harvest): stamp the reaped events still ``ARMED`` and append them to the batch.

        An event disarmed since it was reported is skipped: its fd may
        already belong to someone else.
        """
        state = self._state
        batch = state.batch
        for ev, revents in state.reaped:
            if ev.state == ARMED:
                ev.revents = revents
                ev.ready_ns = now
                batch.append(ev)
                ev.state = READY  # last: READY means "in the batch" (interrupts.py)
        state.reaped = ()
        return batch

    def _end_round(self, cut_short: bool) -> None:
        """Count the round, report it to the probe, and keep what it did not take for the next.

        Every round counts, however it ended.  A round that ran to its end
        took its whole batch, but for the events harvested past its bound
        (dispatch.py, "Harvesting mid-round"), which lead the next batch; one
        cut short reports the events it took, and those it left count in the
        round that takes them.
        """
        self.counters.rounds += 1
        state = self._state
        batch = state.batch
        left = carried_over(batch) if cut_short or self._due.harvest_ns else []
        if self.probe is not None:
            start = state.start_ns
            self.probe.round(len(batch) - len(left), self.clock() - start if start else 0)
        state.batch = left
        state.dropped = 0

    def _callback_failed(self, what: str, *args) -> None:
        """Count and log the ``Exception`` a callback just raised (``what % args`` names it).

        The loop goes on (clause R9).  Called from the ``except`` of each
        of the three places that run callbacks: I/O, timers and posts.
        """
        self.counters.callback_errors += 1
        log.exception(what + " raised", *args)

    def _drain_posts(self) -> None:
        """Run the posts queued so far, oldest first (see :mod:`tailreactor.posts`).

        Each post leaves the drain list as it starts (interrupts.py); posts
        made meanwhile go to the queue, for the next drain.
        """
        if not self._posts.pending():
            return
        probe = self.probe
        counters = self.counters
        items = self._posts.take()
        n = len(items)
        while n and items and not self._closed:  # a post's close() ran the rest itself
            n -= 1
            callback, data, posted_ns = items[0]
            if probe is not None:
                probe.post(self.clock() - posted_ns)
            del items[0]
            counters.posts_run += 1
            try:
                callback(data)
            except Exception:  # noqa: BLE001 (a callback's error must not stop the round)
                self._callback_failed("posted callback %r", callback)

    def _fire_timers(self, now_ns: int) -> None:
        """Fire the timers due at ``now_ns`` (armed before this pass), in deadline order."""
        counters = self.counters
        due = self._timers.take_due(now_ns)
        for entry in due:
            timer = entry.timer
            if timer is None:
                continue  # cancelled or re-armed by an earlier callback of this pass
            entry.timer = None  # fired (interrupts.py: nothing calls out from here to the callback)
            timer._entry = None
            counters.timers_fired += 1
            try:
                timer.callback(timer)
            except Exception:  # noqa: BLE001 (a callback's error must not stop the round)
                self._callback_failed("timer callback %r", timer.callback)
        due.clear()  # the pass is over (an interrupt leaves the list for take_due to restore)

    # -- shutdown -------------------------------------------------------------
    def close(self) -> None:
        """Run the posts still queued, then release the backend.  Idempotent.

        Every later :meth:`arm` or :meth:`run_once` raises ``RuntimeError``.
        """
        if self._closed:
            return
        if self._posts:
            # These posts run as in a round: one of them cannot start a round (R22).
            in_round, self._in_round = self._in_round, True
            try:
                # A drain cut short, or the one running now if a post calls close(),
                # left posts on the drain list: a drain runs those first, then another the queue.
                again = self._posts.cut_short
                self._drain_posts()
                if again:
                    self._drain_posts()
            finally:
                self._in_round = in_round
        self._closed = True
        self._running = None
        if self.probe is not None:
            # CWIST's destroy dumps the probe; ours writes the per-worker report.
            self.probe.finish(self.counters.as_dict())
        for ev in self._armed.values():
            ev.state = CANCELLED
        self._armed.clear()
        self._state.batch = []
        self._state.reaped = ()
        self.backend.close()

    def __enter__(self) -> Reactor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
