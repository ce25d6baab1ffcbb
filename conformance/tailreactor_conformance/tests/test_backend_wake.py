"""Backend clause B7, wake, checked on the backend object itself: wake() from another thread, or
before the wait, ends a blocking wait, never blocks and costs no report.

B7's signals are in ``test_backend_signals.py``; a wait held open until the wake, counted for
spinning, in ``test_backend_timeout.py``.
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tailreactor.backends import READ
from tailreactor_conformance.harness import (
    LIVENESS_S,
    Watchdog,
    collect,
    wait_until_blocked,
)


# -- B7 ------------------------------------------------------------------------
def _blocking_wait(b, rescue_pair):
    """``b.wait(None)`` guarded by a watchdog that makes the rescue fd readable."""
    b.arm(rescue_pair.fd, READ, "rescue")
    with Watchdog(rescue_pair.make_readable) as dog:
        got = b.wait(None)
        dog.done()
    assert not dog.fired, "wait(None) did not return after wake(); the watchdog had to end it"
    assert "rescue" not in [tok for tok, _ in got]


@pytest.mark.clause("B7")
def test_wake_from_another_thread_ends_a_blocked_wait(make_backend, pairs):
    b = make_backend()
    (rescue,) = pairs(1)
    waiter = threading.get_native_id()

    def wake_when_blocked():
        wait_until_blocked(waiter)
        b.wake()

    t = threading.Thread(target=wake_when_blocked)
    t.start()
    try:
        _blocking_wait(b, rescue)
    finally:
        t.join()


@pytest.mark.clause("B7")
def test_wake_before_the_wait_is_not_lost(make_backend, pairs):
    b = make_backend()
    (rescue,) = pairs(1)
    t = threading.Thread(target=b.wake)
    t.start()
    t.join()  # the wake is done; nobody was waiting
    _blocking_wait(b, rescue)


@pytest.mark.clause("B7")
def test_wake_from_the_creating_thread_ends_a_wait_on_another(make_backend, pairs):
    # A reactor built on one thread and run on another (a server started in a
    # thread, stopped from main): wake() comes from the thread that created it.
    b = make_backend()
    (rescue,) = pairs(1)
    b.arm(rescue.fd, READ, "rescue")
    result: dict = {}

    def waiter():
        result["tid"] = threading.get_native_id()
        started.set()
        result["got"] = b.wait(None)

    started = threading.Event()
    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    wait_until_blocked(result["tid"])
    b.wake()
    t.join(LIVENESS_S)
    rescued = t.is_alive()
    if rescued:
        rescue.make_readable()
        t.join()
    assert not rescued, "wake() from the creating thread did not end a wait on another thread"
    assert "rescue" not in [tok for tok, _ in result["got"]]


@pytest.mark.clause("B7")
def test_wait_without_a_limit_returns_only_after_the_wake(make_backend, pairs):
    # wait(None) with nothing ready has no timeout to end it: only the wake may.
    # The waker records that it sends the wake before it does, so a wait that
    # returned with the record unset returned before any wake (a backend that
    # treats "no limit" as a poll: a reactor on it spins).
    b = make_backend()
    rescue, idle = pairs(2)
    b.arm(idle.fd, READ, "never ready")
    waiter = threading.get_native_id()
    sent, stop = threading.Event(), threading.Event()

    def wake_when_blocked():
        wait_until_blocked(waiter, stop)
        if not stop.is_set():
            sent.set()
            b.wake()

    t = threading.Thread(target=wake_when_blocked)
    t.start()
    try:
        _blocking_wait(b, rescue)
        early = not sent.is_set()
    finally:
        stop.set()
        t.join()
    assert not early, "wait(None) with nothing ready returned before wake() was called"


@pytest.mark.clause("B7")
def test_wake_never_blocks(make_backend):
    """A wake made while one is pending returns at once (a full wake channel means a wake is
    pending anyway): 10,000 wakes with no wait between them all return, and the next wait
    returns for them."""
    b = make_backend()
    done = threading.Event()

    def wakes():
        for _ in range(10_000):
            b.wake()
        done.set()

    t = threading.Thread(target=wakes, daemon=True)
    t.start()
    finished = done.wait(LIVENESS_S)
    while t.is_alive():
        b.wait(0)  # a blocked wake: empty the channel so that the thread ends
    assert finished, (
        f"10,000 wakes with no wait between them did not return within {LIVENESS_S} s: wake() blocks"
    )
    assert b.wait(LIVENESS_S) == []  # ended by the pending wake


@pytest.mark.clause("B7")
def test_a_pending_wake_costs_no_report(make_backend, pairs):
    """A wake pending beside ready armed fds: each of them is still reported, in the wait the
    wake ends or in the next (a backend that stops reading the kernel's reports at the wake
    loses the rest: one-shot, the kernel does not report them again)."""
    b = make_backend()
    ps = pairs(4)
    b.wake()  # ready first: ahead of the fds in the kernel's ready list
    for i, p in enumerate(ps):
        p.make_readable()
        b.arm(p.fd, READ, f"r{i}")
    assert collect(b, 4, extra_waits=2) == Counter({f"r{i}": 1 for i in range(4)})


# -- B7: a wake a flush sees is kept for the next wait ------------------------------
# From an event-library backend's mistake: a fresh reader's C backends on poll(2) and libev (issue 32).
@pytest.mark.clause("B7")
def test_a_wake_before_a_flush_still_ends_the_next_wait(make_backend, pairs):
    """wake(), flush(), wait(None): the wait returns (a flush that runs the library's loop
    sees the wake and must keep it for the wait, as the reactor's round-budget flush does
    between a post's wake and the round's wait).  A watchdog ends the wait within the
    liveness bound if it does not."""
    b = make_backend()
    rescue, idle, again = pairs(3)
    b.arm(idle.fd, READ, "never ready")
    b.arm(rescue.fd, READ, "rescue")
    got, fired = _woken_wait(b, rescue, flush=True)
    assert not fired, (
        f"wake() then flush() then wait(None): the wait did not return within {LIVENESS_S} s (the watchdog "
        "ended it): " + _flushed_wake_lost(b, again)
    )
    assert "rescue" not in [tok for tok, _ in got]


def _woken_wait(b, rescue, flush):
    """wake() from another thread (as a post's wake comes), then ``flush()`` if asked, then
    wait(None), which a watchdog ends by making ``rescue`` readable: (reports, whether it had to)."""
    t = threading.Thread(target=b.wake)
    t.start()
    t.join()
    if flush:
        b.flush()
    with Watchdog(rescue.make_readable) as dog:
        got = b.wait(None)
        dog.done()
    return got, dog.fired


def _flushed_wake_lost(b, rescue):
    """Which wake was lost: tried again without the flush, a wake before the wait that ends it
    says the flush took the wake; one that does not, that wake() is not kept until a wait."""
    b.arm(rescue.fd, READ, "rescue again")
    _, fired = _woken_wait(b, rescue, flush=False)
    if not fired:
        return (
            "without the flush, a wake before the wait ends it: the flush took the wake (a flush that runs "
            "the library's loop must keep the wake it sees for the next wait)"
        )
    return (
        "without the flush too, a wake made before the wait did not end it: wake() is not latched (a wake "
        "made while no wait runs must end the next wait; an event library's loop break, e.g. libevent's "
        "event_base_loopbreak, is lost when no loop runs), or the wait did not recognise it as a wake "
        "(GLib writes its wakeup itself: keep a flag that wake sets and the wait reads after every loop run)"
    )
