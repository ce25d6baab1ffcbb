"""Reactor loop clauses: posts (R6, R7, R17, R19), stop (R8), callback
exceptions (R9, R21), I/O re-arm replaces (R18), no re-entrant round (R22).

Cross-thread tests run ``reactor.run()`` on the test thread and act from
other threads once the reactor is really blocked in its wait (read from
``/proc``, not guessed with a sleep).  A watchdog ends a run that a broken
wake-up would leave blocked, so these tests fail instead of hanging.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import capabilities
from tailreactor_conformance.harness import (
    LIVENESS_S,
    Watchdog,
    ready_if_it_sleeps,
    rule_broken,
    run_until,
    wait_until_blocked,
)


def _rescue(r, pair):
    """A rescue for a run() that never wakes: stop, then make an armed fd readable."""

    def rescue():
        r.stop()
        pair.make_readable()

    return rescue


def _arm_rescue(r, pair):
    def on_rescue(ev):
        pair.drain()
        r.arm(pair.fd, READ, on_rescue)

    r.arm(pair.fd, READ, on_rescue)


# -- R6 ------------------------------------------------------------------------
@pytest.mark.clause("R6")
def test_posts_run_fifo_exactly_once_on_the_reactor_thread(make_reactor):
    r = make_reactor()
    ran = []
    me = threading.get_ident()

    def chained(i):
        ran.append(("chain", i, threading.get_ident()))
        if i < 63:
            r.post(chained, i + 1)  # CWIST: 64 chained posts

    for i in range(64):
        r.post(lambda i: ran.append(("queued", i, threading.get_ident())), i)
    r.post(chained, 0)
    run_until(r, lambda: len(ran) >= 128)
    for _ in range(3):
        r.run_once(0)
    assert [x[:2] for x in ran[:64]] == [("queued", i) for i in range(64)]
    assert [x[:2] for x in ran[64:]] == [("chain", i) for i in range(64)]
    assert {x[2] for x in ran} == {me}


# -- R7 ------------------------------------------------------------------------
@pytest.mark.clause("R7")
def test_posts_from_8_threads_run_once_each_in_thread_order(make_reactor, pairs):
    r = make_reactor()
    (rescue,) = pairs(1)
    _arm_rescue(r, rescue)
    threads, per_thread = 8, 200
    ran = []
    me = threading.get_ident()
    reactor_tid = threading.get_native_id()

    def record(item):
        ran.append((item, threading.get_ident()))
        if len(ran) == threads * per_thread:
            r.stop()

    def poster(t):
        for k in range(per_thread):
            r.post(record, (t, k))

    def start_posters():
        wait_until_blocked(reactor_tid)  # the first post must wake a blocked run()
        for t in range(threads):
            threading.Thread(target=poster, args=(t,)).start()

    starter = threading.Thread(target=start_posters)
    starter.start()
    # 9 threads must be scheduled here: a wider bound than a single wake-up needs.
    with Watchdog(_rescue(r, rescue), timeout_s=3 * LIVENESS_S) as dog:
        r.run()
    starter.join()
    assert not dog.fired, f"run() never finished: {len(ran)} of {threads * per_thread} posts ran"
    items = [item for item, _ in ran]
    assert len(items) == len(set(items)) == threads * per_thread
    for t in range(threads):
        assert [k for (tt, k) in items if tt == t] == list(range(per_thread)), f"thread {t} out of order"
    assert {ident for _, ident in ran} == {me}


# -- R8 ------------------------------------------------------------------------
@pytest.mark.clause("R8")
def test_stop_from_another_thread_ends_a_blocked_run(make_reactor, pairs):
    r = make_reactor()
    (rescue,) = pairs(1)
    _arm_rescue(r, rescue)
    reactor_tid = threading.get_native_id()

    def stop_when_blocked():
        wait_until_blocked(reactor_tid)
        r.stop()

    stopper = threading.Thread(target=stop_when_blocked)
    stopper.start()
    # The stopper acts within LIVENESS_S (wait_until_blocked's bound, which a run that never
    # blocks reaches), and run() must end within LIVENESS_S of stop(): the rescue comes after
    # both, or a run that spins would race it and fail this clause for another rule's sake.
    with Watchdog(_rescue(r, rescue), timeout_s=2 * LIVENESS_S) as dog:
        r.run()
    stopper.join()
    assert not dog.fired, "stop() from another thread did not end run()"


# -- R9 ------------------------------------------------------------------------
@pytest.mark.clause("R9")
def test_callback_exceptions_are_logged_counted_and_the_loop_goes_on(make_reactor, pairs, clock, caplog):
    r = make_reactor(clock=clock, tail_us=0)
    a, b = pairs(2)
    ran = []

    def boom(*_):
        raise ValueError("conformance: deliberate")

    def io(ev):
        ran.append(("io", ev.data))
        if ev.data == "first":
            raise ValueError("conformance: deliberate")

    a.make_readable()
    b.make_readable()
    r.arm(a.fd, READ, io, "first")
    r.arm(b.fd, READ, io, "second")
    r.call_later_us(0, boom)
    r.call_later_us(0, lambda t: ran.append(("timer", None)))
    r.post(boom)
    r.post(lambda d: ran.append(("post", None)))
    errors_before = r.counters.callback_errors
    with caplog.at_level(logging.ERROR):
        run_until(r, lambda: len(ran) >= 4)
        r.run_once(0)
    assert sorted(ran, key=str) == sorted(
        [("io", "first"), ("io", "second"), ("timer", None), ("post", None)], key=str
    )
    logged = [rec for rec in caplog.records if rec.levelno >= logging.ERROR and rec.exc_info]
    assert len(logged) == 3, [rec.getMessage() for rec in caplog.records]
    assert r.counters.callback_errors - errors_before == 3


# -- R21 -----------------------------------------------------------------------
class Escape(BaseException):
    """Stands for KeyboardInterrupt or SystemExit: not an Exception, so it is not caught (R9)."""


@pytest.mark.clause("R21")
@pytest.mark.parametrize("kind", ["io", "timer", "post"])
def test_an_exception_that_escapes_a_callback_loses_no_other_callback(make_reactor, pairs, clock, kind):
    """The first callback of a batch, pass or drain raises a BaseException: it leaves
    run_once, and every other callback that round had taken runs in a later round, once
    (timers and posts in their order)."""
    r = make_reactor(clock=clock, tail_us=0)
    ran, escaped = [], []

    def callback(tag):
        def run(_):
            ran.append(tag)
            if not escaped:
                escaped.append(tag)
                raise Escape(tag)

        return run

    tags = ["a", "b", "c", "d"]
    ps = pairs(len(tags))
    if kind == "io":
        for p, tag in zip(ps, tags):
            p.make_readable()
            r.arm(p.fd, READ, callback(tag))
    elif kind == "timer":
        for tag in tags:
            r.call_later_us(0, callback(tag))
    else:
        for tag in tags:
            r.post(callback(tag))
    with pytest.raises(Escape):
        run_until(r, lambda: ran, max_rounds=50)
    assert ran == escaped
    run_until(r, lambda: len(ran) == len(tags), max_rounds=50)
    for _ in range(3):
        r.run_once(0)
    if kind == "io":
        assert sorted(ran) == tags  # the backend chooses the order
    else:
        assert ran == tags  # deadline order, ties in arm order (R1); posts oldest first (R6)
    assert all(r.armed(p.fd, READ) is None for p in ps)
    # The round cut short counts like any other: every callback that ran, the one that raised too.
    counted = {"io": "dispatched", "timer": "timers_fired", "post": "posts_run"}[kind]
    assert getattr(r.counters, counted) == len(tags)


@pytest.mark.clause("R21")
def test_a_round_cut_short_is_counted_and_probed_like_any_other(make_reactor, pairs, clock):
    from tailreactor_conformance.tests.test_probe_and_model import RecordingProbe

    probe = RecordingProbe()
    r = make_reactor(clock=clock, probe=probe, tail_us=1000)
    ps = pairs(3)
    ran = []

    def io(ev):
        ran.append(ev.data)
        if len(ran) == 1:
            raise Escape

    for i, p in enumerate(ps):
        p.make_readable()
        r.arm(p.fd, READ, io, i)
    clock.advance_us(5000)  # every event aged: each is elevated
    with pytest.raises(Escape):
        run_until(r, lambda: ran, max_rounds=50)
    run_until(r, lambda: len(ran) == 3, max_rounds=50)
    c = r.counters.as_dict()
    assert len(probe.dispatches) == c["dispatched"] == 3
    assert sum(d[3] for d in probe.dispatches) == c["tail_elevations"] == 3
    assert len(probe.rounds) == c["rounds"]
    assert sum(n for n, _ in probe.rounds) == 3  # each event in one round's batch size, carried or not

    # A post that escapes at the start of a round, before its wait: still a round.
    rounds_before = c["rounds"]

    def escape(_):
        raise Escape

    r.post(escape)
    with pytest.raises(Escape):
        r.run_once(0)
    assert r.counters.rounds == rounds_before + 1 == len(probe.rounds)
    assert r.counters.posts_run == len(probe.posts) == 1


@pytest.mark.clause("R21")
@pytest.mark.parametrize("where", ["timer before the batch", "post drained inside the batch"])
def test_an_escape_outside_an_io_callback_keeps_the_batch(make_reactor, pairs, clock, where):
    """The escape comes from a timer (the pass runs before the batch is dispatched) or from
    a post drained at a drain-chunk point: the I/O events of that round still run, once."""
    r = make_reactor(clock=clock, tail_us=0, drain_chunk=1)
    ps = pairs(4)
    ran = []

    def escape(_):
        ran.append("escape")
        raise Escape(where)

    def io(ev):
        ran.append(ev.data)
        if where.startswith("post") and ran == [ev.data]:
            r.post(escape)  # drained right after this callback (drain chunk 1)

    for i, p in enumerate(ps):
        p.make_readable()
        r.arm(p.fd, READ, io, i)
    if where.startswith("timer"):
        r.call_later_us(0, escape)
    with pytest.raises(Escape):
        run_until(r, lambda: "escape" in ran, max_rounds=50)
    run_until(r, lambda: len(ran) == len(ps) + 1, max_rounds=50)
    for _ in range(3):
        r.run_once(0)
    assert sorted(x for x in ran if x != "escape") == list(range(len(ps)))
    assert ran.count("escape") == 1


@pytest.mark.clause("R21")
@pytest.mark.parametrize("where", ["at the round's stamp", "halfway through the batch"])
def test_an_interrupt_right_after_the_wait_loses_no_reaped_event(
    make_reactor, make_backend, pairs, clock, where
):
    """A signal handler can raise at any bytecode, also between the wait that took a
    batch from the kernel and its dispatch.  Simulated here once the wait has returned
    events: the clock's next read (the round's stamp) raises, or walking the batch
    raises after two of its four events.  Those events were taken from the backend
    (one-shot: it will not report them again), so the reactor must keep them: each
    runs in a later round, once."""
    from tailreactor_conformance.harness import RecordingBackend

    interrupt = {"clock": False}

    class Interrupting(list):
        """The wait's result; walking it raises once, after two events."""

        def __iter__(self):
            for i, item in enumerate(list.__iter__(self)):
                if i == 2 and not interrupt.get("walked"):
                    interrupt["walked"] = True
                    raise Escape("signal")
                yield item

    class InterruptedAfterWait(RecordingBackend):
        fired = False

        def wait(self, timeout_s):
            got = super().wait(timeout_s)
            if len(got) == 4 and not self.fired:
                self.fired = True
                if where.startswith("at"):
                    interrupt["clock"] = True
                else:
                    got = Interrupting(got)
            return got

    def interrupting_clock():
        if interrupt["clock"]:
            interrupt["clock"] = False
            raise Escape("signal")
        return clock()

    rec = InterruptedAfterWait(make_backend(), gather=4)
    r = make_reactor(clock=interrupting_clock, backend=rec, tail_us=0)
    ps = pairs(4)
    ran = []
    for i, p in enumerate(ps):
        p.make_readable()
        r.arm(p.fd, READ, lambda ev: ran.append(ev.data), i)
    with pytest.raises(Escape):
        run_until(r, lambda: rec.fired, max_rounds=50)
    assert rec.fired and ran == [], "precondition: one batch of 4, interrupted before any callback"
    run_until(r, lambda: len(ran) == len(ps), max_rounds=50)
    for _ in range(3):
        r.run_once(0)
    assert sorted(ran) == list(range(len(ps)))
    assert r.counters.dispatched == len(ps)


def _wait_cut_short_at(b, k: int) -> bool:
    """``b.wait(LIVENESS_S)`` with an :class:`Escape` raised at the ``k``-th Python call or
    return (or call into C, or return from it) of this thread inside it, as a signal
    handler may raise at any of them; returns whether it was cut short."""
    counting = {"on": True, "seen": 0}

    def profile(frame, event, arg):
        if counting["on"]:
            counting["seen"] += 1
            if counting["seen"] > k:
                counting["on"] = False
                raise Escape(f"signal at event {k} of the wait")

    before = sys.getprofile()  # a profiler the suite runs under gets its hook back
    # No garbage collection inside: its callbacks (Hypothesis keeps one) would count as calls
    # of the wait, and an Escape raised in one is unraisable, a warning blamed on the backend.
    collecting = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        b.wait(LIVENESS_S)
    except Escape:
        return True
    finally:
        counting["on"] = False
        sys.setprofile(before)
        if collecting:
            gc.enable()
    return False


@pytest.mark.clause("R21")
def test_a_wait_cut_short_inside_the_backend_hands_its_reports_over_at_once(make_backend, pairs):
    """A signal handler may raise anywhere in a backend's wait, also after it took a report
    from the kernel and before it returned it; a backend that keeps such reports (so that
    they are not lost, R21) must hand them over from the next wait at once, not block for
    that wait's timeout first. One armed fd ready, the wait cut short at its k-th call or
    return, for every k the wait has; then the next wait, given a long timeout, runs while an
    fd is made ready only once the waiting thread sleeps in the kernel
    (:func:`ready_if_it_sleeps`): it may return that fd alone (it had nothing: the cut lost
    the report, or came before it), never beside the report it held."""
    k = 0
    while True:
        b = make_backend()
        ready, late = pairs(2)
        ready.make_readable()
        b.arm(ready.fd, READ, "ready")
        b.arm(late.fd, READ, "late")
        b.flush()
        if not _wait_cut_short_at(b, k):
            b.close()
            break
        got = [tok for tok, _ in ready_if_it_sleeps(lambda b=b: b.wait(LIVENESS_S), late)]
        b.close()
        assert "late" not in got or got == ["late"], (
            f"cut short at event {k}, the next wait blocked while it held a report: it returned {got}, "
            "with an fd made ready only once it slept"
        )
        k += 1
        assert k < 10_000, "a wait of more than 10,000 calls"
    assert k >= 2, f"precondition: a wait makes more than {k} calls"


@pytest.mark.clause("R21")
def test_a_report_held_by_a_wait_cut_short_is_handed_over_at_once_when_its_fd_is_no_longer_ready(
    make_backend, pairs
):
    """The test above with the held report's readiness gone before the next wait (its data
    read by another reader of the file). Over a level-triggered kernel the fd still ready
    ends the next wait by itself, so a backend that waits for its timeout first while it
    holds a report passes the test above; here nothing but the late fd, made ready only once
    the waiting thread sleeps, can end it: the next wait returns the report it held at once,
    or (it held none) the late fd alone."""
    k = 0
    while True:
        b = make_backend()
        ready, late = pairs(2)
        ready.make_readable()
        b.arm(ready.fd, READ, "ready")
        b.arm(late.fd, READ, "late")
        b.flush()
        if not _wait_cut_short_at(b, k):
            b.close()
            break
        ready.drain()  # the readiness behind a report the wait may hold is gone
        got = [tok for tok, _ in ready_if_it_sleeps(lambda b=b: b.wait(LIVENESS_S), late)]
        b.close()
        assert "late" not in got or got == ["late"], (
            f"cut short at event {k}, its fd drained, the next wait blocked while it held a report: "
            f"it returned {got}, with an fd made ready only once it slept"
        )
        k += 1
        assert k < 10_000, "a wait of more than 10,000 calls"
    assert k >= 2, f"precondition: a wait makes more than {k} calls"


def _interrupted_rounds(
    make_reactor, backend, clock, pairs, interrupt, read_clock=None, arm_write=False, **knobs
):
    """Arm 4 readable pairs on ``backend``; run rounds until ``interrupt`` (armed by the
    test) has raised once, then until every event ran.  Callbacks advance ``clock`` (a
    ManualClock); the reactor reads ``read_clock`` (default ``clock``); with ``arm_write``
    each arms its fd for WRITE once (so re-arms are queued).  Returns (raised,
    deliveries by pair index, reactor)."""
    r = make_reactor(clock=read_clock or clock, backend=backend, **knobs)
    ps = pairs(4)
    ran = []

    def io(ev):
        ran.append(ev.data)
        clock.advance_us(800)  # a slow callback: the round passes its budget, events age
        if arm_write:
            r.arm(ev.fd, WRITE, lambda e: None)

    for i, p in enumerate(ps):
        p.make_readable()
        r.arm(p.fd, READ, io, i)
    raised = False
    for _ in range(50):
        try:
            r.run_once(0)
        except Escape:
            raised = True
        if len(ran) >= len(ps) and not interrupt.get("armed"):
            break
    for _ in range(3):
        r.run_once(0)
    return raised, ran, r


@pytest.mark.clause("R21")
def test_an_interrupt_at_any_clock_read_of_a_round_loses_nothing(make_reactor, make_backend, pairs, clock):
    """Signal handlers run when Python code calls out; the clock is one such call the
    reactor makes all through a round (stamp, age checks, budget).  Raise at the k-th
    clock read after the wait returned, for every k the round has: each event still
    runs exactly once, and later rounds run normally."""
    from tailreactor_conformance.harness import RecordingBackend

    k = 0
    while True:
        interrupt = {"armed": False, "reads": 0}

        class Arming(RecordingBackend):
            """Arms the interrupt for the round whose wait returns the events, that round only."""

            def wait(self, timeout_s, interrupt=interrupt):  # this iteration's interrupt
                if interrupt["armed"]:  # the round ended with fewer than k+1 reads: no interrupt
                    interrupt["armed"] = False
                    interrupt["done"] = True
                got = super().wait(timeout_s)
                if got and "done" not in interrupt:
                    interrupt["armed"] = True
                return got

        def interrupting_clock(k=k, interrupt=interrupt):
            if interrupt["armed"]:
                if interrupt["reads"] == k:
                    interrupt["armed"] = False
                    interrupt["done"] = True
                    raise Escape(f"signal at clock read {k}")
                interrupt["reads"] += 1
            return clock()

        raised, ran, r = _interrupted_rounds(
            make_reactor,
            Arming(make_backend()),
            clock,
            pairs,
            interrupt,
            read_clock=interrupting_clock,
            tail_us=1000,
            round_budget_us=1000,
        )
        assert sorted(ran) == [0, 1, 2, 3], f"interrupt at clock read {k}: ran {ran}"
        one_a_wait = capabilities(r.backend.inner).max_batch == 1
        r.close()
        if not raised:
            break  # k is past the last read of the round: every read has been tried
        interrupt["armed"] = False
        k += 1
    # A round reads the clock at its stamp and before each delivery but the first (whose clock is the
    # stamp: no callback ran since): more than twice when it holds the 4 events, once when the backend
    # hands out one event a wait (max_batch 1).
    need = 1 if one_a_wait else 3
    assert k >= need, f"precondition: a round of 4 slow callbacks reads the clock more than {k} times"


@pytest.mark.clause("R21")
def test_an_interrupt_in_a_mid_round_flush_loses_nothing(make_reactor, make_backend, pairs, clock):
    """The round-budget flush calls into the backend between two callbacks; an interrupt
    there keeps the event that was about to run."""
    from tailreactor_conformance.harness import RecordingBackend

    interrupt = {"armed": True}

    class InterruptedFlush(RecordingBackend):
        def flush(self):
            if interrupt["armed"]:
                interrupt["armed"] = False
                raise Escape("signal in flush")
            return super().flush()

    # gather=4: the four events in one round, also on a backend that caps its batch (B10)
    raised, ran, r = _interrupted_rounds(
        make_reactor,
        InterruptedFlush(make_backend(), gather=4),
        clock,
        pairs,
        interrupt,
        arm_write=True,
        tail_us=0,
        round_budget_us=1000,
    )
    if not raised:
        rule_broken("R14", "re-arms queued and the round past its budget, yet no flush ran mid-round")
    assert sorted(ran) == [0, 1, 2, 3]


@pytest.mark.clause("R21")
@pytest.mark.parametrize("k", [0, 1, 3])
def test_a_signal_between_two_posts_of_a_drain_loses_none(make_reactor, clock, k):
    """A drain calls out between two posts (the probe, the clock), where a signal handler
    can raise.  Simulated: the probe raises before the k-th post of four.  The posts not
    yet started go back to the front of the queue: each post runs once, in order."""
    from tailreactor_conformance.tests.test_probe_and_model import RecordingProbe

    class InterruptedProbe(RecordingProbe):
        fired = False

        def post(self, delay_ns):
            if len(self.posts) == k and not self.fired:
                self.fired = True
                raise Escape("signal between posts")
            super().post(delay_ns)

    probe = InterruptedProbe()
    r = make_reactor(clock=clock, probe=probe)
    ran = []
    for i in range(4):
        r.post(ran.append, i)
    with pytest.raises(Escape):
        r.run_once(0)
    assert ran == list(range(k))
    for _ in range(3):
        r.run_once(0)
    assert ran == [0, 1, 2, 3]
    assert r.counters.posts_run == 4


# -- R22 -----------------------------------------------------------------------
@pytest.mark.clause("R22")
@pytest.mark.parametrize("kind", ["io", "timer", "post"])
def test_run_once_from_inside_a_round_raises_and_the_round_goes_on(make_reactor, pairs, clock, kind):
    """A round is not re-entrant: run_once() (or run()) called from a callback raises
    RuntimeError at once, which that callback sees; the outer round then goes on as if
    nothing had happened (the other callbacks run, the caller's dispatch_late() and
    re-arm are unchanged)."""
    r = make_reactor(clock=clock, tail_us=1000)
    ps = pairs(2)
    seen = []

    def nested(_):
        for call in (lambda: r.run_once(0), r.run):
            # A reactor that lets run() nest would block in it: the watchdog stops it.
            with Watchdog(r.stop):
                try:
                    call()
                except RuntimeError as exc:
                    seen.append(("refused", str(exc)))
                else:
                    seen.append("ran a nested round")

    def io(ev):
        if kind == "io" and not seen:
            late_before = r.dispatch_late()
            nested(ev)
            seen.append(("late unchanged", r.dispatch_late() == late_before))
        seen.append(("io", ev.data))

    for i, p in enumerate(ps):
        p.make_readable()
        r.arm(p.fd, READ, io, i)
    if kind == "timer":
        r.call_later_us(0, nested)
    elif kind == "post":
        r.post(nested)
    clock.advance_us(5000)  # aged: the I/O callbacks run elevated
    run_until(r, lambda: len([x for x in seen if x[0] == "io"]) == 2, max_rounds=50)
    refusals = [x for x in seen if x[0] == "refused"]
    assert "ran a nested round" not in seen
    assert len(refusals) == 2, seen
    assert all(msg for _, msg in refusals), "RuntimeError without a message saying why"
    if kind == "io":
        assert ("late unchanged", True) in seen
    assert sorted(x[1] for x in seen if x[0] == "io") == [0, 1]
    r.run_once(0)  # and the reactor still runs rounds afterwards


@pytest.mark.clause("R22")
def test_a_post_that_close_drains_cannot_run_a_round(make_reactor, pairs):
    """close() runs the posts still queued (R19); one of them calling run_once() gets
    RuntimeError, and no I/O callback runs inside close()."""
    r = make_reactor()
    (p,) = pairs(1)
    p.make_readable()
    io = []
    r.arm(p.fd, READ, lambda ev: io.append(ev.fd))
    seen = []

    def nested(_):
        try:
            r.run_once(0)
        except RuntimeError as exc:
            seen.append(("refused", bool(str(exc))))
        else:
            seen.append("ran a round inside close()")

    r.post(nested)
    r.close()
    if not seen:
        rule_broken("R19", "close() ran no queued post")
    assert seen == [("refused", True)] and io == []


# -- R17 -----------------------------------------------------------------------
@pytest.mark.clause("R17")
def test_self_reposting_post_cannot_starve_io_or_timers(make_reactor, pairs):
    r = make_reactor()
    (p,) = pairs(1)
    cap = 20_000  # only a broken reactor gets here; keeps the test finite
    count = [0]
    seen = {}

    def again(_):
        count[0] += 1
        if count[0] < cap:
            r.post(again)

    r.post(again)
    p.make_readable()
    r.arm(p.fd, READ, lambda ev: seen.setdefault("io", count[0]))
    r.call_later_us(0, lambda t: seen.setdefault("timer", count[0]))
    rounds = run_until(r, lambda: len(seen) == 2, max_rounds=10)
    assert len(seen) == 2, f"after {rounds} rounds: ran {seen}, the post ran {count[0]} times"
    assert seen["io"] <= 3 and seen["timer"] <= 3, (
        f"the post ran {seen} times before the I/O callback and the timer"
    )


@pytest.mark.clause("R17")
def test_with_harvesting_fds_that_stay_ready_cannot_starve_timers(make_reactor, make_backend, pairs, clock):
    """With CWIST_REACTOR_HARVEST_US on, a round whose callbacks re-arm fds that stay ready
    finds them again at every harvest: the round must still end, so that a timer that
    became due in it fires in the next round.  A self-re-posting post runs beside them."""
    backend = make_backend()
    if not callable(getattr(backend, "harvest", None)):
        pytest.skip(f"backend {getattr(backend, 'name', '?')} has no harvest() (optional)")
    r = make_reactor(clock=clock, backend=backend, harvest_us=100)
    ps = pairs(2)
    cap = 2_000  # only a reactor whose round never ends gets here; keeps the test finite
    io = [0]
    posts = [0]
    seen = {}

    def again(_):
        # Bounded by its own count, not by I/O: a reactor that drains posts until none is
        # left runs no I/O meanwhile, and its close() drains them again (R19).
        posts[0] += 1
        if posts[0] < cap:
            r.post(again)

    def on_io(ev):
        io[0] += 1
        clock.advance_us(200)
        if io[0] == 1:
            r.call_later_us(0, lambda t: seen.setdefault("timer", io[0]))
        if io[0] < cap:
            r.arm(ev.fd, READ, on_io)

    r.post(again)
    for p in ps:
        p.make_readable()
        r.arm(p.fd, READ, on_io)
    rounds = run_until(r, lambda: "timer" in seen, max_rounds=10)
    assert posts[0] <= rounds + 1, f"the self-re-posting post ran {posts[0]} times in {rounds} rounds"
    assert "timer" in seen, f"after {rounds} rounds the timer has not fired; I/O ran {io[0]} times"
    assert seen["timer"] <= 4, (
        f"the timer waited for {seen['timer']} I/O callbacks; a round of a batch "
        f"of 2 takes at most 2 more by harvesting"
    )


# -- R18 -----------------------------------------------------------------------
@pytest.mark.clause("R18")
def test_arming_an_armed_direction_replaces_the_event(make_reactor, pairs):
    r = make_reactor()
    (p,) = pairs(1)
    ran = []
    r.arm(p.fd, READ, lambda ev: ran.append("first"))
    r.arm(p.fd, READ, lambda ev: ran.append("second"))
    p.make_readable()
    run_until(r, lambda: ran)
    for _ in range(3):
        r.run_once(0)
    assert ran == ["second"]


@pytest.mark.clause("R18")
def test_rearming_an_event_already_in_the_batch_replaces_it(make_reactor, make_backend, pairs):
    """Two events in one batch; the first callback arms the other fd's direction again:
    the event it replaces must not run, in this round or later, and the new one runs
    once, in a later round (the fd is still readable)."""
    from tailreactor_conformance.harness import RecordingBackend, require_batch

    rec = RecordingBackend(make_backend(), gather=2)
    r = make_reactor(backend=rec, tail_us=0)
    x, y = pairs(2)
    other = {"x": y, "y": x}
    ran = []

    def callback(ev):
        ran.append(ev.data)
        if len(ran) == 1:
            victim = other[ev.data]
            r.arm(victim.fd, READ, lambda e: ran.append("replacement"))

    for name, p in (("x", x), ("y", y)):
        p.make_readable()
        r.arm(p.fd, READ, callback, name)
    r.run_once(0)
    require_batch(rec, 2, which=0)
    in_round = list(ran)
    run_until(r, lambda: len(ran) >= 2, max_rounds=50)
    for _ in range(3):
        r.run_once(0)
    assert len(in_round) == 1, f"the replaced event ran in the batch: {in_round}"
    assert ran[1:] == ["replacement"], ran


# -- R19 -----------------------------------------------------------------------
@pytest.mark.clause("R19")
def test_close_runs_the_posts_still_queued(make_reactor):
    r = make_reactor()
    ran = []
    for i in range(3):
        r.post(ran.append, i)
    r.close()
    assert ran == [0, 1, 2]
    r.close()
    assert ran == [0, 1, 2]
