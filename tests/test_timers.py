"""Timers: deadline order, never early, cancel, re-arm, self re-arm (manual clock)."""

from __future__ import annotations

import pytest


def test_fire_in_deadline_order_ties_in_arm_order(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    for name, delay in [("c", 300), ("a", 100), ("b", 200), ("b2", 200)]:
        r.call_later_us(delay, lambda t: fired.append(t.data), name)
    clock.advance_us(1000)
    r.run_once(0)
    assert fired == ["a", "b", "b2", "c"]
    assert r.counters.timers_fired == 4


def test_never_early(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    r.call_later_us(100, lambda t: fired.append(1))
    clock.advance_us(99)
    r.run_once(0)
    assert fired == []
    clock.advance_ns(999)
    r.run_once(0)
    assert fired == []
    clock.advance_ns(1)
    r.run_once(0)
    assert fired == [1]


def test_cancel_and_cancel_by_earlier_callback_of_same_pass(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    t1 = r.call_later_us(50, lambda t: fired.append("t1"))
    t1.cancel()
    assert not t1.armed
    victim = r.call_later_us(200, lambda t: fired.append("victim"))
    r.call_later_us(100, lambda t: (fired.append("killer"), victim.cancel()))
    clock.advance_us(500)
    r.run_once(0)
    r.run_once(0)
    assert fired == ["killer"]


def test_rearm_replaces_deadline(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    t = r.call_later_us(100, lambda t: fired.append(clock()))
    t.arm_us(500)
    clock.advance_us(200)
    r.run_once(0)
    assert fired == [] and t.armed
    clock.advance_us(300)
    r.run_once(0)
    r.run_once(0)
    assert len(fired) == 1 and not t.armed


def test_self_rearm_runs_once_per_pass(make_reactor, clock):
    """A timer re-arming itself with delay 0 fires once per round, never spins."""
    r = make_reactor(clock=clock)
    count = []

    def again(t):
        count.append(1)
        t.arm_us(0)

    r.call_later_us(0, again)
    for _ in range(5):
        r.run_once(0)
    assert len(count) == 5


def test_timer_armed_by_callback_waits_for_next_pass(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    r.call_later_us(
        10, lambda t: (fired.append("first"), r.call_later_us(0, lambda t2: fired.append("second")))
    )
    clock.advance_us(10)
    r.run_once(0)
    assert fired == ["first"]
    r.run_once(0)
    assert fired == ["first", "second"]


def test_negative_delay_is_rejected(make_reactor):
    r = make_reactor()
    with pytest.raises(ValueError, match="delay must be >= 0"):
        r.call_later_us(-1, lambda t: None)


def test_wait_is_bounded_by_next_timer_real_clock(make_reactor):
    """With the real clock, run_once(None) returns once the timer is due instead of blocking."""
    r = make_reactor()
    fired = []
    r.call_later_us(20_000, lambda t: fired.append(t.deadline_ns))
    while not fired:
        r.run_once(None)
    assert r.clock() >= fired[0]


def test_cancelled_timers_do_not_pile_up(make_reactor, clock):
    """Connection churn cancels many long timers; the heap must not keep them all until they expire."""
    r = make_reactor(clock=clock)
    keep = r.call_later_us(1_000_000, lambda t: None)
    for _ in range(10_000):
        r.call_later_us(15_000_000, lambda t: None).cancel()
    heap = r._timers
    assert len(heap) == 1
    assert len(heap._heap) <= 2 * 64 + 2  # storage bounded by the live timers, not by the churn
    fired = []
    keep.callback = lambda t: fired.append(1)
    clock.advance_us(1_000_000)
    r.run_once(0)
    assert fired == [1]


def test_dead_count_stays_exact_when_a_pass_cancels_a_due_timer_and_compacts(make_reactor, clock):
    """The heap counts its dead entries to know when to compact.  A callback of a pass that
    cancels a timer due later in the same pass (off the heap by then), and then triggers a
    compaction, must not leave the count off (the fresh-eyes review found it at -1)."""
    r = make_reactor(clock=clock)
    heap = r._timers
    ran = []
    later = {}

    def first(t):
        ran.append("first")
        later["t"].cancel()  # due in this pass, already taken off the heap
        churn = [r.timer(lambda t: None) for _ in range(300)]
        for t in churn:
            t.arm_us(10_000_000)
        for t in churn:
            t.cancel()
        r.timer(lambda t: None).arm_us(10_000_000)  # a push after many cancels: compaction

    r.call_later_us(0, first)
    later["t"] = r.call_later_us(0, lambda t: ran.append("cancelled one"))
    r.call_later_us(0, lambda t: ran.append("last"))
    r.run_once(0)
    assert ran == ["first", "last"]
    assert heap.dead == sum(1 for item in heap._heap if item[2].timer is None)


def test_counting_the_timers_from_a_timer_callback_does_not_disturb_its_pass(make_reactor, clock):
    """len() and next_deadline() of the heap while a pass runs read only: len counts the
    timers not fired yet, and the rest of the pass still fires in the same round, in order."""
    r = make_reactor(clock=clock)
    fired, seen = [], []

    def cb(t):
        fired.append(t.data)
        seen.append(len(r._timers))
        r._timers.next_deadline()  # reads too: the reactor's own question before a wait

    for name in "ABC":
        r.call_later_us(0, cb, name)
    r.call_later_us(10_000, cb, "later")
    r.run_once(0)
    assert fired == ["A", "B", "C"]
    assert seen == [3, 2, 1]  # the ones of the pass not yet fired, and "later"
