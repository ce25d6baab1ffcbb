"""test_reactor_tail: age-based dispatch, dispatch_late, tail_elevations (CWIST #375, made exact).

Deterministic: a ManualClock is injected; events are armed at chosen clock
values on real socketpairs (data written before the round so every event is in
one batch), and "slow callbacks" advance the clock.  The backend is wrapped in
the conformance suite's recorder, which only remembers the order it returned
events in, so the test can compare dispatch order with backend order.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from limits import open_socketpairs
from tailreactor import READ, Config, Reactor
from tailreactor.backends import create_backend
from tailreactor.clock import ManualClock
from tailreactor.dispatch import NEVER
from tailreactor.events import ARMED, READY
from tailreactor.policies.age import AgeOrder
from tailreactor_conformance.harness import RecordingBackend

T_US = 1000  # threshold used by these tests (us)


class ShuffledBackend(RecordingBackend):
    """A RecordingBackend that returns each batch in the order of ``rank`` (fd -> rank), when set:
    a real backend reports fds in the order they became ready, which these tests would otherwise
    tie to the order of the stamps."""

    rank: dict | None = None

    def wait(self, timeout_s):
        got = self.inner.wait(timeout_s)
        if self.rank is not None:
            got = sorted(got, key=lambda pair: self.rank[pair[0].fd])
        if got:
            self.batches.append([tok for tok, _ in got])
        return got


def make(backend_name, clock, **attrs):
    cfg = Config.default().replace(**{"tail_us": T_US, **attrs})
    rec = ShuffledBackend(create_backend(backend_name))
    return Reactor(rec, config=cfg, clock=clock), rec


def arm_pairs(r, pairs, clock, arm_at_us, log, slow_us=None, times=None, rearm=()):
    """Arm pair i's read end at clock offset arm_at_us[i] (us from now); log (name, late) on delivery.

    ``times`` (optional list) receives the clock value at each delivery.  The
    callbacks of the pairs in ``rearm`` re-arm their own fd first (which
    re-arms the delivered Event in place), as the HTTP server does.
    """
    times = [] if times is None else times
    base = clock()
    events = {}
    order = sorted(range(len(pairs)), key=lambda i: arm_at_us[i])
    for i in order:
        clock.set_ns(base + arm_at_us[i] * 1000)
        a, b = pairs[i]
        b.send(b"x")

        def cb(ev, name=i):
            log.append((name, r.dispatch_late()))
            times.append(clock())
            if name in rearm:
                r.arm(ev.fd, READ, cb)
            if slow_us:
                clock.advance_us(slow_us.get(name, 0))

        events[i] = r.arm(a.fileno(), READ, cb)
    return events


def run_round(r):
    ran = r.run_once(1.0)
    assert ran, "the batch was expected in one round"
    return ran


def test_aged_at_round_start_goes_first_and_sees_dispatch_late(backend_name, clock, socketpairs):
    r, rec = make(backend_name, clock)
    pairs = socketpairs(4)
    log = []
    # pair 2 armed 5000 us before the others: aged (>= 1000 us) when the round starts.
    arm_pairs(r, pairs, clock, [5000, 5000, 0, 5000], log)
    run_round(r)
    assert log[0] == (2, True)
    assert all(late is False for _, late in log[1:])
    assert r.counters.tail_elevations == 1
    r.close()


def test_an_event_that_ages_behind_a_slow_timer_is_elevated_at_the_rounds_first_delivery(
    backend_name, clock, socketpairs
):
    """Step 4's timers are callbacks too: the first delivery after them checks the age at the
    clock after them, not at the round's stamp taken before them.  The event is young when the
    round starts and aged once the timer has run; it is delivered elevated, as the one event of
    the round and as one of two."""
    for n in (1, 2):
        r, _ = make(backend_name, clock)
        pairs = socketpairs(n)
        log = []
        arm_pairs(r, pairs, clock, [0] * n, log)
        r.call_later_us(0, lambda t: clock.advance_us(T_US))  # due now; runs T_US long
        clock.advance_us(T_US // 2)  # the events are half aged when the round starts
        assert r.run_once(1.0) == n
        assert log[0] == (0, True), (n, log)
        assert r.counters.tail_elevations == n
        r.close()


def test_young_events_keep_backend_order(backend_name, clock, socketpairs):
    r, rec = make(backend_name, clock)
    pairs = socketpairs(5)
    log = []
    events = arm_pairs(r, pairs, clock, [9000, 9000, 0, 9000, 9000], log)
    run_round(r)
    backend_order = [next(i for i, e in events.items() if e is tok) for tok in rec.batches[0]]
    assert [name for name, _ in log] == [2] + [i for i in backend_order if i != 2]
    r.close()


def check_policy(log, times, stamps_us, base_ns, backend_order, t_us=T_US):
    """The policy, stated as an oracle: before each delivery at time t, if any remaining event
    is aged (t - stamp >= T) the oldest aged one runs elevated; else the next in backend order."""
    remaining = list(backend_order)
    for (name, late), t in zip(log, times):
        age = {e: (t - base_ns) / 1000 - stamps_us[e] for e in remaining}
        aged = [e for e in remaining if age[e] >= t_us]
        if aged:
            expected = min(aged, key=lambda e: (stamps_us[e], remaining.index(e)))
            assert (name, late) == (expected, True), (log, times)
        else:
            assert (name, late) == (remaining[0], False), (log, times)
        remaining.remove(name)
    assert not remaining


def test_event_aging_behind_slow_callbacks_goes_next(backend_name, clock, socketpairs):
    """Pair 0 is 800 us old at round start (not aged); each callback takes 300 us, so pair 0
    crosses 1000 us after the first callback and runs next, elevated, ahead of younger events."""
    r, rec = make(backend_name, clock)
    pairs = socketpairs(6)
    log, times = [], []
    stamps = [0, 800, 800, 800, 800, 800]
    base = clock()
    events = arm_pairs(r, pairs, clock, stamps, log, slow_us={i: 300 for i in range(6)}, times=times)
    run_round(r)
    backend_order = [next(i for i, e in events.items() if e is tok) for tok in rec.batches[0]]
    check_policy(log, times, stamps, base, backend_order)
    assert [n for n, _ in log].index(0) <= 1
    if backend_order[0] != 0:
        assert log[1] == (0, True) and r.counters.tail_elevations >= 1
    r.close()


# backend_name, the one function-scoped fixture, is a constant: nothing to reset between examples.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_policy_matches_oracle_for_random_stamps_and_slow_callbacks(backend_name, data):
    from tailreactor.clock import ManualClock

    n = data.draw(st.integers(1, 8), label="events")
    stamps = data.draw(st.lists(st.integers(0, 3000), min_size=n, max_size=n), label="arm_at_us")
    slow = data.draw(st.lists(st.integers(0, 800), min_size=n, max_size=n), label="callback_us")
    # How long after the last arm the round starts: past the threshold, every
    # event has aged before the first delivery (a reactor a round behind).
    lag = data.draw(st.integers(0, 2 * T_US), label="round_starts_after_us")
    rank = data.draw(st.permutations(range(n)), label="backend_order")
    rearm = {i for i in range(n) if data.draw(st.booleans(), label=f"event_{i}_rearms_itself")}
    clock = ManualClock()
    r, rec = make(backend_name, clock)
    # Each example closes what it opened: 300 examples would otherwise hold 4800 fds.
    with contextlib.closing(r), open_socketpairs(n) as pairs:
        rec.rank = {pairs[i][0].fileno(): k for k, i in enumerate(rank)}
        log, times = [], []
        base = clock()
        events = arm_pairs(
            r, pairs, clock, stamps, log, slow_us=dict(enumerate(slow)), times=times, rearm=rearm
        )
        clock.advance_us(lag)
        run_round(r)
        backend_order = [next(i for i, e in events.items() if e is tok) for tok in rec.batches[0]]
        check_policy(log, times, stamps, base, backend_order)
        assert r.counters.tail_elevations == sum(late for _, late in log)


def test_several_aged_events_oldest_first_and_elevations_counted(backend_name, clock, socketpairs):
    r, rec = make(backend_name, clock)
    pairs = socketpairs(5)
    log = []
    # armed at 0, 100, 200 us (all aged at 5000), two fresh ones at 5000.
    arm_pairs(r, pairs, clock, [200, 5000, 0, 100, 5000], log)
    run_round(r)
    assert log[:3] == [(2, True), (3, True), (0, True)]
    assert sorted(n for n, _ in log[3:]) == [1, 4]
    assert all(not late for _, late in log[3:])
    assert r.counters.tail_elevations == 3
    r.close()


def test_all_aged_at_round_start_run_oldest_first_ties_in_backend_order_and_skip_disarmed(
    backend_name, clock, socketpairs
):
    """The overload case (a reactor a round behind): every event of the batch has aged
    before the first delivery.  All run elevated, oldest first, equal stamps in backend
    order, and an event an earlier callback disarms never runs."""
    r, rec = make(backend_name, clock)
    pairs = socketpairs(6)
    log = []
    stamps = [300, 0, 300, 100, 0, 200]
    events = arm_pairs(r, pairs, clock, stamps, log)
    victim = pairs[5][0].fileno()  # stamp 200: would run fourth or later

    def disarm_victim_then_log(ev, cb=events[1].callback):
        r.disarm(victim)
        cb(ev)

    events[1].callback = disarm_victim_then_log  # stamp 0: runs first or second
    clock.advance_us(5 * T_US)  # everything is 5 ms old or more
    run_round(r)
    backend_order = [next(i for i, e in events.items() if e is tok) for tok in rec.batches[0]]
    by_age = sorted((i for i in backend_order if i != 5), key=lambda i: (stamps[i], backend_order.index(i)))
    assert log == [(i, True) for i in by_age]
    assert r.counters.tail_elevations == 5 == r.counters.dispatched
    r.close()


def test_an_event_rearmed_in_place_mid_round_does_not_hide_an_aged_one(backend_name, clock, socketpairs):
    """Found by a fresh-eyes review.  T = 1000 us; stamps Z 0, P 300, Q 400, X 600, Y 700,
    R 990; the round starts at 1000 with backend order X R Z P Q Y.  Z is aged and runs;
    X is not and runs next in backend order, re-arms itself (which re-stamps the same Event
    to 1000) and takes 800 us.  At 1800 P, Q and Y have aged and must all run before R.
    The age order must not read X's new stamp: that once made it look like the run ended
    at X, and R ran before Y."""
    names = ["Z", "P", "Q", "X", "Y", "R"]
    stamps = [0, 300, 400, 600, 700, 990]
    backend_order = [3, 5, 0, 1, 2, 4]  # X R Z P Q Y
    r, rec = make(backend_name, clock)
    pairs = socketpairs(6)
    rec.rank = {pairs[i][0].fileno(): k for k, i in enumerate(backend_order)}
    log, times = [], []
    base = clock()
    for i in sorted(range(6), key=stamps.__getitem__):
        clock.set_ns(base + stamps[i] * 1000)
        pairs[i][1].send(b"x")

        def cb(ev, i=i):
            log.append((i, r.dispatch_late()))
            times.append(clock())
            if names[i] == "X":
                r.arm(ev.fd, READ, cb)  # the HTTP re-arm: the same Event, re-stamped
                clock.advance_us(800)

        r.arm(pairs[i][0].fileno(), READ, cb)
    clock.set_ns(base + T_US * 1000)
    run_round(r)
    assert [names[i] for i, _ in log] == ["Z", "X", "P", "Q", "Y", "R"]
    check_policy(log, times, stamps, base, backend_order)
    r.close()


def test_tail_us_zero_is_backend_order_and_no_elevation(backend_name, clock, socketpairs):
    r, rec = make(backend_name, clock, tail_us=0)
    pairs = socketpairs(6)
    log = []
    events = arm_pairs(
        r, pairs, clock, [50000, 0, 30000, 10000, 40000, 20000], log, slow_us={i: 5000 for i in range(6)}
    )
    run_round(r)
    backend_order = [next(i for i, e in events.items() if e is tok) for tok in rec.batches[0]]
    assert [n for n, _ in log] == backend_order
    assert all(not late for _, late in log)
    assert r.counters.tail_elevations == 0
    r.close()


@pytest.mark.parametrize(
    "age_from,expected",
    [
        ("ready", [("idle", False), ("fresh", False)]),  # ready only now: not aged
        ("arm", [("idle", True), ("fresh", False)]),  # CWIST's definition: the old arm stamp counts
    ],
)
def test_idle_keep_alive_connection_aged_only_under_age_from_arm(
    backend_name, clock, socketpairs, age_from, expected
):
    """Armed long ago (an idle keep-alive connection), ready only now."""
    r, rec = make(backend_name, clock, age_from=age_from)
    (a, b), (c, d) = socketpairs(2)
    log = []
    r.arm(a.fileno(), READ, lambda ev: log.append(("idle", r.dispatch_late())))
    clock.advance_us(60_000)
    r.arm(c.fileno(), READ, lambda ev: log.append(("fresh", r.dispatch_late())))
    b.send(b"x")
    d.send(b"x")
    run_round(r)
    if age_from == "ready":
        log.sort(key=lambda item: item[0] != "idle")  # both young: backend order decides, not the policy
    assert log == expected
    assert r.counters.tail_elevations == sum(late for _, late in expected)
    r.close()


def test_age_from_ready_still_elevates_behind_slow_callbacks(backend_name, clock, socketpairs):
    r, rec = make(backend_name, clock, age_from="ready")
    pairs = socketpairs(3)
    log = []
    arm_pairs(r, pairs, clock, [0, 0, 0], log, slow_us={0: 2000, 1: 2000, 2: 2000})
    run_round(r)
    # After the first 2000 us callback, both remaining events are aged (same stamp): the
    # second and third deliveries are elevations, in backend order.
    assert [late for _, late in log] == [False, True, True]
    assert r.counters.tail_elevations == 2
    r.close()


def test_age_from_ready_slow_timers_age_the_batch_before_its_first_delivery(backend_name, clock, socketpairs):
    """A round's timers run after its batch is stamped ready and before it is dispatched
    (reactor.py, steps 3-5): timers that take TAIL_US or more age every event of the batch,
    so under AGE_FROM=ready all of them run elevated, in backend order (docs: "The policy")."""
    r, rec = make(backend_name, clock, age_from="ready")
    pairs = socketpairs(2)
    log = []
    events = arm_pairs(r, pairs, clock, [0, 0], log)
    r.call_later_us(0, lambda _timer: clock.advance_us(T_US))  # a slow timer, due this round
    run_round(r)
    backend_order = [next(i for i, e in events.items() if e is ev) for ev in rec.batches[-1]]
    assert log == [(i, True) for i in backend_order]
    assert r.counters.tail_elevations == 2 and r.counters.timers_fired == 1
    r.close()


def test_dispatch_late_is_false_outside_callbacks(backend_name, clock, socketpairs):
    r, rec = make(backend_name, clock)
    pairs = socketpairs(1)
    log = []
    arm_pairs(r, pairs, clock, [0], log)
    clock.advance_us(5000)
    run_round(r)
    assert log == [(0, True)]
    assert r.dispatch_late() is False
    r.close()


@pytest.mark.io_uring
def test_both_backends_same_order_for_same_stamps(socketpairs):
    """Distinct stamps, all aged: the order is fully decided by the policy, on any backend."""
    orders = {}
    for name in ("epoll", "io_uring"):
        from tailreactor.clock import ManualClock

        clock = ManualClock()
        r, rec = make(name, clock)
        pairs = socketpairs(8)
        log = []
        arm_pairs(r, pairs, clock, [70, 10, 50, 30, 0, 60, 20, 40], log)
        clock.advance_us(10_000)
        run_round(r)
        orders[name] = [n for n, _ in log]
        r.close()
    assert orders["epoll"] == orders["io_uring"] == [4, 1, 6, 3, 7, 2, 5, 0]


def test_threshold_is_inclusive(backend_name, clock, socketpairs):
    """Age exactly CWIST_REACTOR_TAIL_US counts as aged ("passed" = >=); 1 ns less does not."""
    r, rec = make(backend_name, clock)
    (a, b), (c, d) = socketpairs(2)
    log = []
    r.arm(a.fileno(), READ, lambda ev: log.append(("exact", r.dispatch_late())))
    clock.advance_ns(1)
    r.arm(c.fileno(), READ, lambda ev: log.append(("younger", r.dispatch_late())))
    clock.advance_ns(T_US * 1000 - 1)
    b.send(b"x")
    d.send(b"x")
    run_round(r)
    assert log == [("exact", True), ("younger", False)]
    r.close()


def test_an_event_whose_aging_time_is_at_the_end_of_the_clock_is_not_lost(backend_name, socketpairs):
    """aged_at == NEVER means "nothing left to take" to the reactor, so an event that ages
    exactly at NEVER (stamp + threshold == 2**63; only an injected clock gets there) must
    not be mistaken for that: it was left READY and never delivered (fresh-eyes review,
    issue 9; on 0df781a too)."""
    clock = ManualClock(NEVER - T_US * 1000 - 2000)
    r, _ = make(backend_name, clock)
    pairs = socketpairs(3)
    log = []
    arm_pairs(r, pairs, clock, [0, 1, 2], log)  # the third ages at exactly NEVER
    clock.advance_us(T_US - 1)  # the first two have aged (the second exactly), the third not yet
    assert run_round(r) == 3
    assert log == [(0, True), (1, True), (2, False)]
    r.close()


def test_an_event_whose_aging_time_is_clamped_to_last_is_delivered_in_backend_order(
    backend_name, socketpairs
):
    """At a clock of LAST an event armed just before has an aging time clamped to LAST: the
    walk asks for a run (now >= aged_at), gets none (the event has not aged), and must then
    deliver it in backend order, not ask again forever (a walk that switched to the empty run
    and back looped here)."""
    from tailreactor.dispatch import LAST

    clock = ManualClock(LAST - 1000)
    r, _ = make(backend_name, clock)
    ((a, b),) = socketpairs(1)
    log = []
    r.arm(a.fileno(), READ, lambda ev: log.append(r.dispatch_late()))
    b.send(b"x")
    clock.set_ns(LAST)
    assert run_round(r) == 1
    assert log == [False]
    r.close()


def test_with_the_policy_off_a_clock_past_the_end_is_still_served(backend_name, socketpairs):
    """With CWIST_REACTOR_TAIL_US=0 there is no age order: a clock at or past NEVER (an
    injected one) must not make the walk ask for runs.  It raised AttributeError every
    round and never delivered the event (second review, issue 9)."""
    clock = ManualClock(NEVER)
    r, _ = make(backend_name, clock, tail_us=0)
    ((a, b),) = socketpairs(1)
    log = []
    r.arm(a.fileno(), READ, lambda ev: log.append(r.dispatch_late()))
    b.send(b"x")
    assert run_round(r) == 1
    assert log == [False]
    r.close()


def test_an_unknown_age_from_is_refused_before_any_reactor_is_built():
    """Config.replace checks CWIST_REACTOR_AGE_FROM as load does: raised from inside every
    round, a bad value would stick the reactor."""
    with pytest.raises(
        ValueError, match="CWIST_REACTOR_AGE_FROM='armed' is invalid: accepted one of arm, ready"
    ):
        Config.default().replace(tail_us=T_US, age_from="armed")


class _Ev:
    """A stand-in for an Event in AgeOrder's unit tests: ``state`` and an arm stamp that counts its reads."""

    reads: list = []

    def __init__(self, name, stamp_ns):
        self.name, self._stamp, self.state = name, stamp_ns, READY

    @property
    def armed_ns(self):
        self.reads.append(self.name)
        return self._stamp


@pytest.mark.parametrize(
    "backend_order", [[0, 1, 2, 3, 4, 5], [1, 3, 4, 0, 5, 2]], ids=["shuffled", "in-age-order"]
)
def test_age_order_runs_oldest_first_also_after_a_rearm_in_place(backend_order):
    """Runs are oldest first, ties in backend order, whether or not the batch came in age
    order.  Event 4 runs in backend order before anything ages and is re-armed in place,
    which re-stamps it: the order must still serve the others right (the caller skips 4,
    no longer READY)."""
    stamps_us = [500, 0, 900, 0, 300, 700]
    batch = [_Ev(i, stamps_us[i] * 1000) for i in backend_order]
    age = AgeOrder(batch, "arm", T_US * 1000)
    assert age.aged_at == T_US * 1000  # the oldest stamp (0) plus the threshold
    four = next(ev for ev in batch if ev.name == 4)
    four.state, four._stamp = ARMED, 10_000_000  # ran, then Reactor.arm re-armed it in place
    runs = [age.take_aged(t * 1000) for t in (1000, 1300, 1300, 1500, 1900)]
    ready = [[ev.name for ev in run if ev.state == READY] for run in runs]
    assert ready == [[1, 3], [], [], [0], [5, 2]]
    # Nothing READY is left to hand out (4 may still come, under its new stamp, and is skipped).
    assert all(ev.state != READY for ev in age.take_aged(NEVER - 1))


@pytest.mark.parametrize("shape", ["in-age-order", "reversed"])
def test_age_order_reads_stamps_only_while_it_is_built(shape):
    """Every stamp is read while the round's age order is built, before any callback runs
    (a callback's re-arm in place re-stamps its Event), never by take_aged, and at most
    twice per event (issue 9: the policy's cost; eea632b read each three times)."""
    batch = [_Ev(i, s * 1000) for i, s in enumerate([0, 0, 300, 500, 700, 900])]
    if shape == "reversed":
        batch.reverse()
    _Ev.reads = []
    age = AgeOrder(batch, "arm", T_US * 1000)
    built = sorted(_Ev.reads)
    runs = [[ev.name for ev in age.take_aged(t * 1000)] for t in (1000, 1300, 1900)]
    # Oldest first; 0 and 1 tie at stamp 0 and keep backend order.
    assert runs == ([[0, 1], [2], [3, 4, 5]] if shape == "in-age-order" else [[1, 0], [2], [3, 4, 5]])
    assert sorted(_Ev.reads) == built, "take_aged read a stamp"
    assert set(built) == {0, 1, 2, 3, 4, 5} and len(built) <= 2 * 6, built


def test_age_order_rejects_an_unknown_stamp_name():
    """Only "arm" and "ready" name a stamp (CWIST_REACTOR_AGE_FROM); anything else is an
    error, not silently "arm"."""
    with pytest.raises(ValueError, match="age_from must be 'arm' or 'ready', got 'armed'"):
        AgeOrder([], "armed", T_US * 1000)


def test_age_order_from_ready_reads_the_ready_stamp():
    class Ready:
        def __init__(self, name, ready_ns):
            self.name, self.ready_ns, self.armed_ns, self.state = name, ready_ns, 0, READY

    batch = [Ready("b", 2_000_000), Ready("a", 1_000_000)]
    age = AgeOrder(batch, "ready", T_US * 1000)
    assert age.aged_at == 2_000_000
    assert [ev.name for ev in age.take_aged(3_000_000)] == ["a", "b"]
