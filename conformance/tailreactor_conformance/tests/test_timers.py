"""Reactor timer clauses R1-R5 (CWIST test_reactor_timer.c), on a ManualClock.

The clock moves only when the test says so, so "never early" is checked
exactly (one microsecond before the deadline) and no test sleeps.  One test
of R2 uses the real monotonic clock: a timer's callback must not run before
its deadline on the reactor's own clock.
"""

from __future__ import annotations

import pytest

from tailreactor_conformance.harness import run_until


def _recorder(fired, clock):
    return lambda t: fired.append((t.data, clock()))


# -- R1 ------------------------------------------------------------------------
@pytest.mark.clause("R1")
def test_due_timers_fire_in_deadline_order_ties_in_arm_order(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    for ms in (40, 10, 30, 5, 20):  # CWIST's out-of-order set
        r.call_later_us(ms * 1000, _recorder(fired, clock), ms)
    r.call_later_us(15_000, _recorder(fired, clock), "tie-1")
    r.call_later_us(15_000, _recorder(fired, clock), "tie-2")
    clock.advance_us(50_000)
    r.run_once(0)
    assert [name for name, _ in fired] == [5, 10, "tie-1", "tie-2", 20, 30, 40]


@pytest.mark.clause("R1")
def test_a_rearmed_timer_ties_after_a_timer_armed_before_its_rearm(make_reactor, clock):
    # Ties fire in arm order, and a re-arm is an arm: a timer re-armed to a deadline
    # another timer already holds fires after that one, not in its first arm's place.
    r = make_reactor(clock=clock)
    fired = []
    first = r.timer(_recorder(fired, clock), "re-armed")
    first.arm_us(15_000)
    r.timer(_recorder(fired, clock), "armed once").arm_us(15_000)
    first.arm_us(15_000)  # same clock: the same deadline, armed last
    clock.advance_us(15_000)
    r.run_once(0)
    assert [name for name, _ in fired] == ["armed once", "re-armed"]


# -- R2 ------------------------------------------------------------------------
@pytest.mark.clause("R2")
def test_timer_does_not_fire_one_microsecond_early(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    t0 = clock()
    r.call_later_us(1000, _recorder(fired, clock), "t")
    clock.advance_us(999)
    r.run_once(0)
    assert fired == []
    clock.advance_us(1)
    r.run_once(0)
    assert fired == [("t", t0 + 1_000_000)]


@pytest.mark.clause("R2")
def test_timers_due_at_different_times_fire_in_their_own_rounds(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    deadlines = {}
    for ms in (40, 10, 30, 5, 20):
        deadlines[ms] = r.call_later_us(ms * 1000, _recorder(fired, clock), ms).deadline_ns
    for _ in range(50):
        clock.advance_us(1000)
        r.run_once(0)
    assert [name for name, _ in fired] == [5, 10, 20, 30, 40]
    assert all(at >= deadlines[name] for name, at in fired), fired


@pytest.mark.clause("R2")
def test_timer_on_the_real_clock_never_runs_before_its_deadline(make_reactor):
    r = make_reactor()  # the reactor's default monotonic clock
    fired = []
    armed_at = r.clock()
    r.call_later_us(20_000, lambda t: fired.append(r.clock()), None)
    run_until(r, lambda: fired, timeout_s=0.05)
    assert fired, "the timer never fired"
    assert fired[0] - armed_at >= 20_000_000, f"fired {(fired[0] - armed_at) / 1e6:.3f} ms after arming"


@pytest.mark.clause("R2")
def test_timer_does_not_fire_one_nanosecond_early(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    deadline = clock() + 1_000_000
    r.timer(_recorder(fired, clock), "t").arm_at_ns(deadline)
    clock.set_ns(deadline - 1)
    r.run_once(0)
    assert fired == []
    clock.set_ns(deadline)
    r.run_once(0)
    assert fired == [("t", deadline)]


# -- R3 ------------------------------------------------------------------------
@pytest.mark.clause("R3")
def test_cancelled_timer_never_fires(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    t = r.call_later_us(1000, _recorder(fired, clock), "cancelled")
    keep = r.call_later_us(1000, _recorder(fired, clock), "kept")
    t.cancel()
    assert not t.armed and keep.armed
    clock.advance_us(5000)
    r.run_once(0)
    r.run_once(0)
    assert [name for name, _ in fired] == ["kept"]


@pytest.mark.clause("R3")
def test_timer_cancelled_by_an_earlier_callback_of_the_same_pass_never_fires(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []
    victims = []

    def first(t):
        fired.append("first")
        victims[0].cancel()

    r.call_later_us(1000, first)
    victims.append(r.call_later_us(1000, _recorder(fired, clock), "victim"))  # same deadline, later
    clock.advance_us(1000)
    r.run_once(0)
    r.run_once(0)
    assert fired == ["first"]
    assert not victims[0].armed


# -- R4 ------------------------------------------------------------------------
@pytest.mark.clause("R4")
@pytest.mark.parametrize("first_us,second_us", [(1000, 50_000), (50_000, 1000)], ids=["later", "earlier"])
def test_rearming_replaces_the_deadline(make_reactor, clock, first_us, second_us):
    r = make_reactor(clock=clock)
    fired = []
    start = clock()
    t = r.timer(_recorder(fired, clock), "t")
    t.arm_us(first_us)
    t.arm_us(second_us)  # replaces: fires once, at the new deadline
    for _ in range(60):
        clock.advance_us(1000)
        r.run_once(0)
    # Once, at the new deadline: its round is the first at or after it.  Exactly
    # when, to the microsecond, is R2's business; here it must not be the old one.
    assert [name for name, _ in fired] == ["t"], fired
    assert t.deadline_ns == start + second_us * 1000
    assert abs(fired[0][1] - t.deadline_ns) < abs(first_us - second_us) * 1000 // 2, fired
    assert not t.armed


# -- R5 ------------------------------------------------------------------------
@pytest.mark.clause("R5")
def test_self_rearming_timer_fires_once_per_round(make_reactor, clock):
    r = make_reactor(clock=clock)
    left = [5]  # CWIST: a 5x self re-arming timer ends at 0
    per_round = []

    def tick(t):
        left[0] -= 1
        per_round[-1] += 1
        if left[0]:
            t.arm_us(0)  # due at once, but not in this pass

    r.call_later_us(0, tick)
    for _ in range(8):
        per_round.append(0)
        r.run_once(0)
    assert left == [0]
    assert per_round == [1, 1, 1, 1, 1, 0, 0, 0]


@pytest.mark.clause("R5")
def test_timer_armed_by_a_timer_waits_for_the_next_pass(make_reactor, clock):
    r = make_reactor(clock=clock)
    fired = []

    def parent(t):
        fired.append("parent")
        r.call_later_us(0, lambda t2: fired.append("child"))

    r.call_later_us(0, parent)
    r.run_once(0)
    assert fired == ["parent"]
    r.run_once(0)
    assert fired == ["parent", "child"]
