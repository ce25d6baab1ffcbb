"""Reactor loop clauses: posts (R6, R7, R17, R19) and stop (R8).

Cross-thread tests run ``reactor.run()`` on the test thread and act from
other threads once the reactor is really blocked in its wait (read from
``/proc``, not guessed with a sleep).  A watchdog ends a run that a broken
wake-up would leave blocked, so these tests fail instead of hanging.
"""

from __future__ import annotations

import threading

import pytest

from tailreactor.backends import READ
from tailreactor_conformance.harness import (
    LIVENESS_S,
    Watchdog,
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
