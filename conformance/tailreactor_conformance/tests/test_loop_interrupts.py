"""Reactor loop clause R21 at any point of a wait or a round: a wait cut short inside the
backend hands its reports over, and an interrupt at any clock read, in a mid-round flush or
between two posts of a drain loses nothing.
"""

from __future__ import annotations

import gc
import sys

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import capabilities
from tailreactor_conformance.harness import (
    LIVENESS_S,
    ready_if_it_sleeps,
    rule_broken,
)
from tailreactor_conformance.tests._loop_helpers import Escape


# -- R21 -----------------------------------------------------------------------
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
