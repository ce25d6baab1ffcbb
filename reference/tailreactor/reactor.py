"""The reactor: one-shot arming, timers, posts and the dispatch round.

Role
----
Backend-agnostic core.  A backend (epoll, io_uring, ...) reports readiness;
everything else -- stamps, timers, posts, the dispatch policy, counters and
the optional latency probe -- is here, so every backend runs the same policy
code.  Read :meth:`Reactor._round` (what :meth:`Reactor.run_once` runs) top
to bottom: it is one round.

One round
---------
0. (Only after a round that an exception cut short: take over what it left,
   clause R21, below.)
1. **Drain posts** queued so far (oldest first).
2. **Wait** for a batch.  Timeout: 0 if posts are pending or a stop was asked,
   else the time to the earliest timer, else the caller's timeout.  On
   io_uring this wait also submits the re-arms queued in the previous round
   (one ``io_uring_enter`` per round).
3. **Stamp** every reaped event with ``ready_ns`` (one clock read per round).
4. **Fire due timers** (those armed before this pass).
5. **Dispatch** the batch in the order :mod:`tailreactor.dispatch` chooses
   (backend order, or age-based with ``CWIST_REACTOR_TAIL_US`` > 0).  Between
   callbacks: the round-budget check (once the round has run longer than
   ``CWIST_REACTOR_ROUND_BUDGET_US``, submit the queued re-arms, and again
   every budget after that) and the drain chunk (run posts every
   ``CWIST_REACTOR_DRAIN_CHUNK`` callbacks).

Threading: every method runs on the reactor thread except :meth:`post` and
:meth:`stop`, which any thread may call.  Callbacks run inline on the reactor
thread ("readiness + synchronous completion", as in CWIST); an exception in a
callback is logged with its fd and callback and the loop goes on.

An exception that is not an ``Exception`` (``KeyboardInterrupt``,
``SystemExit``) is not the callback's failure but a request to stop: it
propagates out of :meth:`run_once`.  The round loses nothing by it (clause
R21): the events of the batch not yet delivered are kept and lead the next
round's batch (that round still drains its posts and fires its due timers
first, as every round does), the rest of a timer pass goes back on the heap,
and the rest of a post drain runs first in the next drain.  asyncio's
``_run_once`` likewise leaves the rest of its ready queue for the next
iteration.  The round cut short is counted like any other (rounds,
``dispatched``, the probe), the callback that raised included.

A signal handler's ``KeyboardInterrupt`` can come wherever Python code calls
out or jumps back, and it loses nothing either: the backend keeps what its
``wait`` took from the kernel for the next ``wait``, the round stamps and
keeps what the wait returned, a timer pass and a post drain keep their rest
(their lists belong to the heap and the queue, not to a local).  A callback
counts as run once it is called: a signal as it starts is its exception.
What is left: on io_uring, the completions just taken off the ring before
the backend stores them; and two spots only a tracer can reach (marked
below).  ``tests/test_reactor_interrupts.py`` raises at every other bytecode.

Clock: ``clock`` returns integer nanoseconds (default ``time.monotonic_ns``,
CLOCK_MONOTONIC as in CWIST).  Tests inject a fake clock and advance it from
callbacks to make "slow callbacks" deterministic.
"""

from __future__ import annotations

import errno
import logging
import threading
import time

from . import config as _config
from .backends import READ, WRITE, create_backend
from .backends.base import direction_name
from .dispatch import NEVER, AgeOrder
from .events import ARMED, CANCELLED, DONE, READY, Event
from .posts import PostQueue
from .timers import Timer, TimerHeap

log = logging.getLogger("tailreactor")

#: ``Reactor._running`` while no callback runs.  An arm is the hot re-arm when
#: its fd and direction are those of ``_running`` and ``_running`` is DONE; this
#: one never is, whatever the fd (-1 is a closed socket's ``fileno()``, so the
#: fd alone could not say "none").
_NOT_RUNNING = Event(-1, 0, None, None, 0)
_NOT_RUNNING.state = CANCELLED


def _reentered(method: str) -> RuntimeError:
    return RuntimeError(f"{method}() called from a callback of the round in progress: a round is not "
                        f"re-entrant (clause R22); return from the callback, or post() the work")


def _negative_fd(fd: int) -> OSError:
    return OSError(errno.EBADF, f"cannot arm fd {fd}: not an open file descriptor "
                                f"(a closed socket's fileno() is -1)")

__all__ = ["Reactor", "Counters", "READ", "WRITE"]


class Counters:
    """Always-on, cheap counters of one reactor (plain ints).

    ``rounds``: rounds run; ``dispatched``: I/O callbacks run;
    ``tail_elevations``: callbacks run because their event aged past
    ``CWIST_REACTOR_TAIL_US`` (the seed's probe counter); ``timers_fired``;
    ``posts_run``; ``round_budget_flushes``: mid-round submits of queued
    re-arms; ``drain_chunk_drains``: post drains inside a batch;
    ``callback_errors``: callbacks that raised.  A round cut short by an
    exception that escapes a callback (clause R21) is counted like any
    other: its round, and every callback that ran, the one that raised too.
    """

    __slots__ = ("rounds", "dispatched", "tail_elevations", "timers_fired", "posts_run",
                 "round_budget_flushes", "drain_chunk_drains", "callback_errors")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class Reactor:
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
        environment (raises :class:`~tailreactor.config.ConfigError`).  An
        ``age_from`` that is not one of ``CWIST_REACTOR_AGE_FROM``'s choices
        (``Config.replace`` does not check) raises ``ConfigError`` too.
    clock:
        Callable returning monotonic nanoseconds.
    probe:
        Optional latency probe (:mod:`tailreactor.probe`); ``None`` creates one
        when ``config.latency_probe`` is set.
    worker:
        Worker index (0-based) this reactor serves; tags the probe report.
    """

    def __init__(self, backend=None, *, config=None, clock=time.monotonic_ns, probe=None, worker=0):
        self.config = config if config is not None else _config.load()
        age_from = _config.knob("CWIST_REACTOR_AGE_FROM")
        if self.config.age_from not in age_from.choices:
            # Config.replace() does not re-validate, and from inside a round this
            # would raise every round (dispatch.AgeOrder): refuse it here, once.
            raise _config.ConfigError(age_from.name, self.config.age_from, age_from.accepted())
        if backend is None or isinstance(backend, str):
            backend = create_backend(backend or self.config.backend)
        self.backend = backend
        self.clock = clock
        self.counters = Counters()
        self._armed: tuple[dict[int, Event], dict[int, Event]] = ({}, {})  # by direction - 1
        self._timers = TimerHeap(clock)
        self._thread_ident: int | None = None
        self._posts = PostQueue(backend.wake, lambda: self._thread_ident, clock)
        self._stopping = False
        self._late = False
        self._closed = False
        self._in_round = False  # run_once is running (R22: it must not nest)
        self._arms_since_flush = 0
        # Events of a batch cut short by an escaping exception (R21): still
        # READY, at the head of the next round's batch.
        self._carried: list[Event] = []
        # The state of the round running now, or of one cut short: see _round.
        self._cut: list | None = None
        # Policy knobs, in ns, read once: the hot path must not re-parse config.
        self._tail_ns = self.config.tail_us * 1000
        self._budget_ns = self.config.round_budget_us * 1000
        self._drain_chunk = self.config.drain_chunk
        self._age_from = self.config.age_from  # the stamp age counts from (dispatch.py)
        self._rx = self.config.rx_uring != "0" and hasattr(backend, "arm_recv")
        # A backend may offer rearm(): arm from inside the callback of the event
        # just reported for that fd, which it may do cheaper (epoll: no
        # epoll_ctl).
        self._rearm = getattr(backend, "rearm", None) or backend.arm
        # The event whose callback runs now (arm re-arms it in place), or
        # _NOT_RUNNING, which no arm can take for it.
        self._running: Event = _NOT_RUNNING
        if probe is None and self.config.latency_probe:
            from .probe import LatencyProbe
            probe = LatencyProbe(backend=self.backend_name, worker=worker, config=self.config)
        self.probe = probe

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
        return self._armed[direction - 1].get(fd)

    # -- arming ---------------------------------------------------------------
    def arm(self, fd: int, direction: int, callback, data=None) -> Event:
        """Arm ``fd`` one-shot for ``READ`` or ``WRITE``; return the :class:`Event`.

        ``callback(event)`` runs once when the fd is ready (or already is); arm
        again from the callback to keep listening.  That re-arm (same fd and
        direction, from the callback of the event just delivered) returns the
        delivered Event itself, re-armed: new callback and data, a fresh
        ``armed_ns``, ``ready_ns`` and ``revents`` 0 -- one allocation less
        per request (CWIST likewise recycles a fired event's slot through a
        pool); read the event before re-arming.  Every other arm returns a new Event.  Arming a direction
        that is armed already replaces the earlier event (it will not run).  Raises
        ``OSError(EBADF)`` for a closed fd, ``ValueError`` for a bad direction,
        ``RuntimeError`` after :meth:`close`.
        """
        ev = self._running
        if fd == ev.fd and ev.direction == direction and ev.state == DONE:
            # The hot re-arm, from the callback of the event just delivered for
            # this fd and direction: re-arm that Event, re-stamped, instead of
            # allocating one (CWIST recycles fired event slots through a pool).
            # Nothing else can be armed for it: the Event left its table when it
            # was delivered, and every arm of it since would have come here.
            # Outside callbacks and after close() _running is _NOT_RUNNING, so
            # the checks below are not needed here (a bad direction never
            # equals ev.direction).
            ev.callback = callback
            ev.data = data
            ev.armed_ns = self.clock()
            ev.ready_ns = ev.revents = 0
            ev.state = ARMED
            self._rearm(fd, direction, ev)
            self._armed[direction - 1][fd] = ev
            self._arms_since_flush += 1
            return ev
        if self._closed:
            raise RuntimeError("reactor is closed")
        if direction != READ and direction != WRITE:
            raise ValueError(f"direction must be READ (1) or WRITE (2), got {direction!r}")
        if fd < 0:
            raise _negative_fd(fd)
        ev = Event(fd, direction, callback, data, self.clock())
        if fd == self._running.fd:  # its own callback, another direction or a second arm
            self._rearm(fd, direction, ev)
        else:
            self.backend.arm(fd, direction, ev)
        table = self._armed[direction - 1]
        old = table.get(fd)
        if old is not None:
            old.state = CANCELLED
        table[fd] = ev
        self._arms_since_flush += 1
        return ev

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
        callback (the same Event, ``result`` 0 again), like any other.  Raises
        ``RuntimeError`` when :attr:`rx_supported` is false, ``ValueError`` for
        an empty buffer, ``OSError(EBADF)`` for a closed fd.  A receive that is
        replaced or disarmed before the kernel processes its cancel may still
        take bytes, already queued or arriving, and they are lost with it: do
        that only when closing.  Source: CWIST PR #187 (``CWIST_RX_URING``).
        """
        if not self._rx:
            raise RuntimeError(f"arm_recv needs a backend with a receive operation and CWIST_RX_URING "
                               f"not 0; backend {self.backend_name}, "
                               f"CWIST_RX_URING={self.config.rx_uring}: arm READ and recv instead")
        if self._closed:
            raise RuntimeError("reactor is closed")
        if not len(buffer):
            raise ValueError("arm_recv needs a non-empty buffer: its result 0 would read as EOF")
        # The rest mirrors arm() with the backend's arm_recv.  They share no
        # helper on purpose: arm is the hot path, and a Python call costs
        # about 1 % of an HTTP request here (benchmarks/README.md).
        ev = self._running
        if fd == ev.fd and ev.direction == READ and ev.state == DONE:
            ev.callback = callback  # the hot re-arm of the Event just delivered, as in arm()
            ev.data = data
            ev.armed_ns = self.clock()
            ev.ready_ns = ev.revents = 0
            ev.state = ARMED
            self.backend.arm_recv(fd, buffer, ev)
            self._armed[READ - 1][fd] = ev
            self._arms_since_flush += 1
            return ev
        if fd < 0:
            raise _negative_fd(fd)
        ev = Event(fd, READ, callback, data, self.clock())
        self.backend.arm_recv(fd, buffer, ev)
        table = self._armed[READ - 1]
        old = table.get(fd)
        if old is not None:
            old.state = CANCELLED
        table[fd] = ev
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
                ev = self._armed[d - 1].pop(fd, None)
                if ev is not None:
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
        try:
            return self._round(timeout_s)
        finally:
            self._in_round = False

    def _round(self, timeout_s: float | None) -> int:
        """One round: the five steps of the module docstring, in order."""
        clock = self.clock
        probe = self.probe

        # 0. A round that an exception which is not an Exception cut short (R21)
        #    left its batch in self._cut: what it did not deliver leads this one.
        if self._cut is not None:
            self._recover()

        # 1. Posts queued so far.
        if self._posts:
            try:
                self._drain_posts()
            except BaseException:  # cut short before its wait (R21): still a round, of no events
                self.counters.rounds += 1
                if probe is not None:
                    probe.round(0, 0)
                raise
            if self._closed:  # a post closed the reactor: the round ends without waiting
                self.counters.rounds += 1
                if probe is not None:
                    probe.round(0, 0)
                return 0

        # 2. Wait.  Never sleep past the earliest timer or over pending posts.
        timeout = timeout_s
        if self._posts or self._stopping or self._carried:
            timeout = 0
        else:
            deadline = self._timers.next_deadline()
            if deadline is not None:
                until = max(0.0, (deadline - clock()) / 1e9)
                timeout = until if timeout is None else min(timeout, until)
        # Once the wait returns, the backend has forgotten what it reaped
        # (one-shot): from then on an exception must not lose it.  A signal
        # handler's KeyboardInterrupt can come whenever Python code calls out,
        # also before the batch is whole, and a second one while the first is
        # handled.  So the round keeps its state on the reactor, in self._cut,
        # from the wait until it ends, and handles no exception itself: the
        # next round takes over what it left (_recover, step 0).
        batch: list[Event] = self._carried  # cut short last round: they keep their stamps and lead
        # [batch, how many of it were carried, what the wait reaped, round start, stamped]
        cut = self._cut = [batch, len(batch), None, 0, False]
        self._carried = []
        reaped = None
        round_start = 0
        ran = 0
        try:
            # Between wait's return and this store nothing calls out: only a tracer
            # can raise there, and the reaped list would be lost with it.
            reaped = cut[2] = self.backend.wait(timeout)
            self._arms_since_flush = 0  # the wait submitted them
            # 3. Stamp what became ready.  Skip events disarmed since they were
            #    reported (their fd may already belong to someone else).
            round_start = cut[3] = clock()
            for ev, revents in reaped:
                if ev.state == ARMED:
                    ev.state = READY
                    ev.revents = revents
                    ev.ready_ns = round_start
                    batch.append(ev)
            cut[4] = True
            # 4. Timers due now (each counted in timers_fired as it runs).
            if self._timers.next_deadline() is not None:
                self._fire_timers(round_start)
            # 5. Dispatch.
            ran = self._dispatch(batch, round_start) if batch else 0
            self._cut = None  # the round ended: nothing left to take over
        finally:
            if reaped is not None:  # a wait that raised ends no round
                self.counters.rounds += 1
                if probe is not None:
                    # A round cut short reports the events it took; the rest count in the next.
                    end = clock()
                    taken = len(batch) if self._cut is None else sum(ev.state != READY for ev in batch)
                    probe.round(taken, end - (round_start or end))
        return ran

    def _recover(self) -> None:
        """Take over what a round cut short left in ``_cut`` (clause R21).

        Its events still ``READY`` lead this round's batch, in their order,
        with their stamps.  Idempotent: an interrupt here leaves ``_cut`` for
        the next round to try again, and replaces, not adds to, ``_carried``
        (which, if set, is already part of that batch).
        """
        batch, n_carried, reaped, round_start, stamped = self._cut
        if reaped is not None and not stamped:
            batch = self._stamp_the_rest(n_carried, batch, reaped, round_start)
        carried = [ev for ev in batch if ev.state == READY]
        # A READY event is in its table (disarm and re-arm take it out as they
        # cancel it), except one interrupted between leaving its table and its
        # callback's start in _dispatch: only a tracer or debugger can raise
        # there.  Put it back, or this round could not dispatch it.
        for ev in carried:
            self._armed[ev.direction - 1].setdefault(ev.fd, ev)
        self._carried = carried
        self._cut = None

    def _stamp_the_rest(self, n_carried: int, batch: list[Event], reaped, round_start: int) -> list[Event]:
        """The round was interrupted while stamping: stamp what it had not reached.

        No callback has run yet, so the reaped events still ``ARMED`` are the
        ones not reached, and those ``READY`` the ones stamped (an interrupt
        between stamping one and appending it leaves it out of ``batch``, so
        the batch is rebuilt: the carried events, then the reaped ones in
        backend order).
        """
        now = round_start or self.clock()
        for ev, revents in reaped:
            if ev.state == ARMED:
                ev.state = READY
                ev.revents = revents
                ev.ready_ns = now
        return batch[:n_carried] + [ev for ev, _ in reaped if ev.state == READY]

    def _dispatch(self, batch: list[Event], round_start: int) -> int:
        # The order (dispatch.py): backend order, walked here with a cursor,
        # except that runs of aged events go first.  Between runs, `aged_at`
        # is the clock value before which no remaining event can have aged,
        # so the check is one comparison; NEVER when age-based dispatch is off.
        tail_ns = self._tail_ns
        age = None
        aged_at = NEVER
        if tail_ns > 0:
            age = AgeOrder(batch, self._age_from, tail_ns)
            aged_at = age.aged_at
        budget_ns = self._budget_ns
        # The first mid-round submit is due once the round has used its budget; after a
        # submit the next is due a budget later, so a long round costs one extra
        # io_uring_enter per budget interval, not one per callback.
        flush_due = round_start + budget_ns
        # Posts run after every drain_chunk-th callback: at ran == drain_at (-1: never).
        drain_chunk = self._drain_chunk
        drain_at = drain_chunk or -1
        probe = self.probe
        clock = self.clock
        # Read the clock per delivery only when something needs it.
        timed = tail_ns > 0 or budget_ns > 0 or probe is not None
        counters = self.counters
        tables = self._armed
        n = len(batch)
        i = 0  # the backend-order cursor
        run: list[Event] = []  # the run of aged events being walked, oldest first
        r = m = 0  # its cursor and length
        ran = 0
        now = round_start
        # try/finally: a round cut short by an escaping exception (R21) counts what it ran.
        try:
            while True:
                if timed:
                    now = clock()
                # Between runs, and some event may have aged.  `age is not None` comes
                # last: only a clock at or past NEVER reaches it with the policy off.
                if r >= m and now >= aged_at and age is not None:
                    run = age.take_aged(now)
                    r, m = 0, len(run)
                    aged_at = age.aged_at
                    if aged_at == NEVER:
                        i = n  # every event is taken or gone: backend order has nothing left
                if r < m:
                    ev = run[r]
                    r += 1
                    elevated = True
                else:
                    if i >= n:
                        break
                    ev = batch[i]
                    i += 1
                    elevated = False
                if ev.state != READY:
                    continue  # ran in a run, or disarmed or re-armed by an earlier callback
                if now > flush_due and budget_ns and self._arms_since_flush:
                    if self.backend.flush():
                        counters.round_budget_flushes += 1
                    self._arms_since_flush = 0
                    flush_due = now + budget_ns
                # From here to the callback's start nothing calls out, so no signal
                # handler can run in between (R21): the event is either still READY
                # (an interrupt keeps it for the next round) or its callback runs.
                # A READY event is still the one its table holds: disarm and re-arm
                # both mark it CANCELLED when they take it out.
                del tables[ev.direction - 1][ev.fd]
                ev.state = DONE
                if elevated:
                    counters.tail_elevations += 1
                if probe is not None:
                    # Before the callback: a re-arm from it re-stamps this Event.
                    queued_ns, ready_for_ns = now - ev.armed_ns, now - ev.ready_ns
                # What arm() and dispatch_late() read about the callback running
                # now.  Nothing else runs between two deliveries, so they are
                # cleared only where other code runs: before a drain of posts
                # and when the walk ends (below).
                self._late = elevated
                self._running = ev
                callback = ev.callback
                ran += 1  # counted before it runs: one that raises anything still ran (R21)
                try:
                    callback(ev)
                except Exception:
                    counters.callback_errors += 1
                    log.exception("callback %r for fd %d (%s) raised", callback, ev.fd,
                                  direction_name(ev.direction))
                finally:
                    if probe is not None:
                        probe.dispatch(queued_ns, ready_for_ns, clock() - now, elevated)
                if ran == drain_at:
                    drain_at += drain_chunk
                    if self._posts:
                        self._late = False
                        self._running = _NOT_RUNNING
                        counters.drain_chunk_drains += 1
                        self._drain_posts()
        finally:
            self._late = False
            self._running = _NOT_RUNNING  # the last one holds its callback, and so its owner, alive
            counters.dispatched += ran
        return ran

    def _drain_posts(self) -> None:
        """Run the posts queued so far, oldest first (see :mod:`tailreactor.posts`)."""
        probe = self.probe
        counters = self.counters
        items = self._posts.take()
        # Each post leaves the drain list only as it starts: an exception that is not
        # an Exception (a post's, or a signal handler's between two posts) leaves the
        # rest there, and the next drain runs them first (R21).
        n = len(items)  # posts made meanwhile go to the queue: the next drain runs them
        while n and items and not self._closed:  # a post's close() ran the rest itself
            n -= 1
            callback, data, posted_ns = items[0]
            if probe is not None:
                probe.post(self.clock() - posted_ns)
            # From here to the callback's start nothing calls out.
            del items[0]
            counters.posts_run += 1
            try:
                callback(data)
            except Exception:
                counters.callback_errors += 1
                log.exception("posted callback %r raised", callback)

    def _fire_timers(self, now_ns: int) -> None:
        """Fire the timers due at ``now_ns`` (armed before this pass), in deadline order."""
        counters = self.counters
        due = self._timers.take_due(now_ns)
        for entry in due:
            timer = entry[2]
            if timer is None:
                continue  # cancelled or re-armed by an earlier callback of this pass
            # Fired.  From here to the callback's start nothing calls out, so no
            # signal handler can run in between (R21): the entry is either still
            # on the pass list, unfired (an interrupt puts it back on the heap),
            # or its callback runs.
            entry[2] = None
            timer._entry = None
            counters.timers_fired += 1
            try:
                timer.callback(timer)
            except Exception:
                counters.callback_errors += 1
                log.exception("timer callback %r raised", timer.callback)
        # Done.  An exception that escaped above left the pass list as it was: the next
        # pass (take_due) puts what did not fire back on the heap first.
        due.clear()

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
        self._running = _NOT_RUNNING  # an arm from the callback that closed us must not take the hot path
        if self.probe is not None:
            # CWIST's destroy dumps the probe; ours writes the per-worker report.
            self.probe.finish(self.counters.as_dict())
        for table in self._armed:
            for ev in table.values():
                ev.state = CANCELLED
            table.clear()
        self._carried = []
        self._cut = None
        self.backend.close()

    def __enter__(self) -> "Reactor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
