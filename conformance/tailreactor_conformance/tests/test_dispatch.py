"""Dispatch-round clauses: age-based order (R10), dispatch_late and
tail_elevations (R11), TAIL_US=0 (R12), AGE_FROM=ready (R13), round budget
(R14), drain chunk (R15).

Deterministic: a ManualClock is injected, events are armed on real
socketpairs at chosen clock values, all become ready, one round runs, and a
"slow" callback is one that advances the clock.  Backends may order a batch
differently, so expectations are computed from the order the backend
actually returned (recorded by a RecordingBackend) with the pure rule in
:func:`tailreactor_conformance.model.age_order`.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from tailreactor.backends import READ
from tailreactor.backends.base import capabilities
from tailreactor.clock import ManualClock
from tailreactor_conformance import profiles
from tailreactor_conformance.harness import Pair, RecordingBackend, reports_until, require_batch, rule_broken
from tailreactor_conformance.model import age_order
from tailreactor_conformance.strategies import AgeScenario, age_scenarios


class Round:
    """One dispatch round built from an :class:`AgeScenario`; see the module docstring."""

    def __init__(
        self, reactor, rec, clock, ps, sc: AgeScenario, slow_first_us: int = 0, staged: bool = False
    ):
        self.r, self.rec, self.clock, self.sc = reactor, rec, clock, sc
        self.log: list[tuple[int, bool]] = []
        self.delivered_at: dict[int, int] = {}  # event -> the clock when its callback started
        self.base = clock()
        self._slow_first = slow_first_us
        for i, at in enumerate(sc.arm_us):
            clock.set_ns(self.base + at * 1000)
            ev = reactor.arm(ps[i].fd, READ, self._callback, i)
            if sc.hints:
                ev.hint = sc.hints[i]  # what a size-aware policy orders by (R26)
        rec.inner.flush()  # arms reach the kernel before the fds become ready
        if staged:
            # A backend without readiness order (B9 not claimed) may report in any
            # order; the batch is built in ready order instead: each fd is made
            # ready and reaped before the next (one wait per fd, then one batch).
            for i in sc.ready_order:
                ps[i].make_readable()
                got = reports_until(rec.inner, lambda g, i=i: any(ev.data == i for ev, _ in g))
                rec.preload(got)
        else:
            rec.gather = len(sc.arm_us)
            for i in sc.ready_order:
                ps[i].make_readable()
        clock.set_ns(self.base + sc.start_us * 1000)
        self.elevations_before = reactor.counters.tail_elevations
        reactor.run_once(0)
        require_batch(rec, len(sc.arm_us))
        self.backend_order = [ev.data for ev in rec.batches[-1]]

    def _callback(self, ev):
        self.delivered_at[ev.data] = self.clock()
        self.log.append((ev.data, self.r.dispatch_late()))
        advance = self.sc.slow_us[ev.data] + (self._slow_first if len(self.log) == 1 else 0)
        self.clock.advance_us(advance)

    @property
    def order(self) -> list[int]:
        return [i for i, _ in self.log]

    @property
    def late(self) -> list[bool]:
        return [late for _, late in self.log]

    @property
    def elevations(self) -> int:
        return self.r.counters.tail_elevations - self.elevations_before

    def expected(self, *, age_from_ready: bool = False) -> list[tuple[int, bool]]:
        start = self.base + self.sc.start_us * 1000
        stamps = {
            i: start if age_from_ready else self.base + at * 1000 for i, at in enumerate(self.sc.arm_us)
        }
        advance = {i: us * 1000 for i, us in enumerate(self.sc.slow_us)}
        if self._slow_first and self.backend_order:
            # The slow-first bonus goes to whichever runs first: recompute with it.
            first = age_order(self.backend_order, stamps, self.sc.tail_us * 1000, start, advance)[0][0]
            advance[first] += self._slow_first * 1000
        return age_order(self.backend_order, stamps, self.sc.tail_us * 1000, start, advance)


@pytest.fixture
def age_round(make_reactor, make_backend, pairs, clock):
    """``age_round(scenario, slow_first_us=0, **config)`` -> a finished :class:`Round`."""

    def run(sc: AgeScenario, slow_first_us: int = 0, *, in_ready_order: bool = False, **attrs) -> Round:
        """``in_ready_order``: the scenario needs the batch in ready order; a backend
        that does not declare ``ordered`` gets it built for it (``staged``)."""
        rec = RecordingBackend(make_backend())
        attrs.setdefault("tail_us", sc.tail_us)
        r = make_reactor(clock=clock, backend=rec, **attrs)
        staged = in_ready_order and not capabilities(rec.inner).ordered
        return Round(r, rec, clock, pairs(len(sc.arm_us)), sc, slow_first_us, staged=staged)

    return run


# Aged at round start (T = 1000 us): events 0, 1, 2; the fds become ready youngest first.
ROUND_START = AgeScenario(
    arm_us=(0, 100, 900, 1500, 1900, 2000),
    ready_order=(5, 4, 3, 2, 1, 0),
    tail_us=1000,
    start_us=2000,
    slow_us=(0,) * 6,
)
# Nothing aged at round start; the first callback takes 300 us, after which event 0 is aged.
PER_DELIVERY = AgeScenario(
    arm_us=(0, 800, 850, 900), ready_order=(3, 2, 1, 0), tail_us=1000, start_us=900, slow_us=(0,) * 4
)


def require_oldest_not_first(rnd) -> None:
    """Fail a PER_DELIVERY test when the backend reported the oldest event first.

    The fds become ready youngest first, so a backend that keeps readiness
    order (clause B9) reports event 0 last and it can age behind the slow
    first callback.  A backend that declares ``ordered`` and reports it first
    breaks B9 (only an ``ordered`` backend gets here): the test fails naming
    B9, the rule the backend broke, not R10/R11's rule.  (A backend that does not declare ``ordered`` gets the batch
    built in ready order, ``in_ready_order=True``, so the scenario runs.)
    """
    if rnd.backend_order[0] == 0:
        rule_broken(
            "B9",
            f"the fds became ready youngest first, and the backend, which declares "
            f"ordered, reported the oldest first (order {rnd.backend_order})",
        )


# -- R10 -----------------------------------------------------------------------
@pytest.mark.clause("R10")
def test_events_aged_at_round_start_run_first_oldest_first(age_round):
    rnd = age_round(ROUND_START)
    rest = [i for i in rnd.backend_order if i not in (0, 1, 2)]
    assert rnd.order == [0, 1, 2] + rest


@pytest.mark.clause("R10")
def test_event_aged_behind_a_slow_callback_runs_next(age_round):
    rnd = age_round(PER_DELIVERY, slow_first_us=300, in_ready_order=True)
    require_oldest_not_first(rnd)
    first = rnd.backend_order[0]
    rest = [i for i in rnd.backend_order if i not in (first, 0)]
    assert rnd.order == [first, 0] + rest


@pytest.mark.clause("R10")
def test_age_order_matches_the_rule_for_any_round(fresh_reactor, make_backend):
    @profiles.current()
    @given(sc=age_scenarios())
    def check(sc):
        clock = ManualClock()
        rec = RecordingBackend(make_backend())
        r = fresh_reactor(clock=clock, backend=rec, tail_us=sc.tail_us)
        ps = [Pair() for _ in sc.arm_us]
        try:
            rnd = Round(r, rec, clock, ps, sc)
            assert rnd.order == [i for i, _ in rnd.expected()], (sc, rnd.backend_order)
        finally:
            r.close()
            for p in ps:
                p.close()

    check()


# -- R11 -----------------------------------------------------------------------
@pytest.mark.clause("R11")
def test_dispatch_late_is_true_only_for_aged_events_and_counted(age_round):
    rnd = age_round(ROUND_START)
    # Per event, not per position: where each runs is R10's business.
    assert dict(rnd.log) == {0: True, 1: True, 2: True, 3: False, 4: False, 5: False}
    assert rnd.elevations == 3
    assert not rnd.r.dispatch_late()  # outside any callback


@pytest.mark.clause("R11")
def test_dispatch_late_for_an_event_aged_behind_a_slow_callback(age_round):
    rnd = age_round(PER_DELIVERY, slow_first_us=300, in_ready_order=True)
    require_oldest_not_first(rnd)
    assert dict(rnd.log) == {0: True, 1: False, 2: False, 3: False}  # per event (order: R10)
    assert rnd.elevations == 1


@pytest.mark.clause("R11")
def test_dispatch_late_is_false_in_timers_and_posts(make_reactor, pairs, clock):
    r = make_reactor(clock=clock, tail_us=1000)
    (p,) = pairs(1)
    seen = []
    r.arm(
        p.fd,
        READ,
        lambda ev: (
            seen.append(("io", r.dispatch_late())),
            r.post(lambda d: seen.append(("post", r.dispatch_late()))),
            r.call_later_us(0, lambda t: seen.append(("timer", r.dispatch_late()))),
        ),
    )
    p.make_readable()
    clock.advance_us(5000)  # aged
    for _ in range(3):
        r.run_once(0)
    assert sorted(seen) == [("io", True), ("post", False), ("timer", False)]


@pytest.mark.clause("R11")
def test_dispatch_late_is_false_in_a_post_drained_inside_the_batch(make_reactor, make_backend, pairs, clock):
    """A post drained between two elevated callbacks is not one of them.  Where in the
    batch it is drained is R15's business: three events, and the post must only run
    before the last."""
    rec = RecordingBackend(make_backend(), gather=3)
    r = make_reactor(clock=clock, backend=rec, tail_us=1000, drain_chunk=1)
    ps = pairs(3)
    seen = []

    def io(ev):
        seen.append(("io", r.dispatch_late()))
        if len(seen) == 1:
            r.post(lambda d: seen.append(("post", r.dispatch_late())))

    for p in ps:
        r.arm(p.fd, READ, io)
        p.make_readable()
    clock.advance_us(5000)  # all aged
    r.run_once(0)
    require_batch(rec, 3)
    if ("post", False) in seen[:-1] or ("post", True) in seen[:-1]:
        assert seen.count(("io", True)) == 3 and ("post", False) in seen, seen
    else:
        rule_broken("R15", f"with drain_chunk=1 the post was not drained inside the batch of 3 ({seen})")


@pytest.mark.clause("R11")
def test_dispatch_late_and_elevations_match_the_rule_for_any_round(fresh_reactor, make_backend):
    @profiles.current()
    @given(sc=age_scenarios())
    def check(sc):
        clock = ManualClock()
        rec = RecordingBackend(make_backend())
        r = fresh_reactor(clock=clock, backend=rec, tail_us=sc.tail_us)
        ps = [Pair() for _ in sc.arm_us]
        try:
            rnd = Round(r, rec, clock, ps, sc)
            # Late exactly when the event had aged past T when its callback ran, in
            # whatever order the events ran (the order is R10's business): under R10's
            # rule an event that has aged is never passed over for one that has not.
            want = {
                i: rnd.delivered_at[i] - (rnd.base + sc.arm_us[i] * 1000) >= sc.tail_us * 1000
                for i, _ in rnd.log
            }
            assert dict(rnd.log) == want, (sc, rnd.backend_order, rnd.order)
            assert rnd.elevations == sum(want.values())
        finally:
            r.close()
            for p in ps:
                p.close()

    check()


# -- R12 -----------------------------------------------------------------------
@pytest.mark.clause("R12")
def test_tail_us_zero_keeps_backend_order_and_never_elevates(age_round):
    old = AgeScenario(
        arm_us=(0, 1000, 2000, 3000, 4000),
        ready_order=(4, 3, 2, 1, 0),
        tail_us=0,
        start_us=10_000_000,
        slow_us=(5000,) * 5,
    )  # ages of seconds, slow callbacks
    rnd = age_round(old)
    assert rnd.order == rnd.backend_order
    assert rnd.late == [False] * 5
    assert rnd.elevations == 0


# -- R13 -----------------------------------------------------------------------
AGE_FROM_READY = AgeScenario(
    arm_us=(0, 1, 2, 3), ready_order=(3, 2, 1, 0), tail_us=1000, start_us=10_000, slow_us=(0,) * 4
)  # armed 10 ms ago, ready only now


@pytest.mark.clause("R13")
def test_age_from_ready_ignores_how_long_ago_an_event_was_armed(age_round):
    rnd = age_round(AGE_FROM_READY, age_from="ready")
    assert rnd.order == rnd.backend_order
    assert rnd.late == [False] * 4 and rnd.elevations == 0


@pytest.mark.clause("R13")
def test_age_from_ready_ties_keep_backend_order_when_aged(age_round):
    rnd = age_round(AGE_FROM_READY, slow_first_us=2000, age_from="ready")
    # After the slow first callback every remaining event is aged by the same
    # amount: they are elevated (3 elevations), in backend order.  The flags
    # dispatch_late() shows are R11's business; the count is the reactor's.
    assert rnd.order == rnd.backend_order
    assert rnd.order == [i for i, _ in rnd.expected(age_from_ready=True)]
    assert rnd.elevations == 3


class Escape(BaseException):
    """Stands for KeyboardInterrupt: not an Exception, so it leaves run_once (R21)."""


@pytest.mark.clause("R13")
def test_age_from_ready_a_carried_event_keeps_its_ready_stamp(make_reactor, make_backend, pairs, clock):
    """An event carried over from a round cut short (R21) was first seen ready in that round:
    under AGE_FROM=ready its age still counts from then.  So in the next round it is aged
    as soon as the threshold has passed since, and runs elevated, ahead of an event
    reaped in that round (not aged)."""
    rec = RecordingBackend(make_backend(), gather=2)
    r = make_reactor(clock=clock, backend=rec, tail_us=1000, age_from="ready")
    ps = pairs(3)
    log = []
    elevations = [r.counters.tail_elevations]

    def callback(ev):
        # Elevated: tail_elevations went up for this callback (dispatch_late() is R11's).
        now = r.counters.tail_elevations
        log.append((ev.data, now > elevations[-1], ev.ready_ns))
        elevations.append(now)
        if len(log) == 1:
            raise Escape  # cuts round 1 short: the other event is carried over

    for i in (0, 1):
        r.arm(ps[i].fd, READ, callback, i)
    rec.inner.flush()
    for i in (0, 1):
        ps[i].make_readable()
    with pytest.raises(Escape):
        r.run_once(0)
    require_batch(rec, 2)
    first_seen = log[0][2]
    clock.advance_us(2000)  # round 2 starts 2 ms after round 1
    r.arm(ps[2].fd, READ, callback, 2)
    rec.inner.flush()
    ps[2].make_readable()
    r.run_once(0)
    carried = 1 - log[0][0]
    if carried not in [e for e, _, _ in log[1:]]:
        rule_broken("R21", f"the event carried over from the round cut short never ran ({log})")
    fields = "(event, elevated, ready_ns)"
    assert log[1] == (carried, True, first_seen), (
        f"the carried event {carried} must keep ready_ns {first_seen} (round 1) and run first, "
        f"elevated: got {log[1]} {fields}"
    )
    assert log[2] == (2, False, first_seen + 2_000_000), (
        f"the event reaped in round 2 is not aged: got {log[2]} {fields}"
    )


# -- R14 -----------------------------------------------------------------------
def _rearming_round(make_reactor, make_backend, pairs, clock, budget_us):
    rec = RecordingBackend(make_backend(), gather=4)
    r = make_reactor(clock=clock, backend=rec, tail_us=0, round_budget_us=budget_us)
    ps = pairs(4)

    def callback(ev):
        rec.note_callback()
        r.arm(ev.fd, READ, callback)  # a queued re-arm (the data stays: ready again)
        clock.advance_us(600)  # a slow callback: the round overruns 1000 us after two

    for p in ps:
        p.make_readable()
        r.arm(p.fd, READ, callback)
    rec.flushes.clear()
    r.run_once(0)
    require_batch(rec, 4)
    return [seen for seen, _ in rec.flushes if 0 < seen < 4]  # flushes between callbacks


@pytest.mark.clause("R14")
def test_round_over_budget_submits_queued_rearms_before_the_next_callback(
    make_reactor, make_backend, pairs, clock
):
    mid_round = _rearming_round(make_reactor, make_backend, pairs, clock, budget_us=1000)
    # After 2 callbacks the round has run 1200 us > 1000 us with re-arms queued.
    assert 2 in mid_round, f"flushes between callbacks at {mid_round}; expected one before the 3rd"
    assert not [s for s in mid_round if s < 2], "flushed before the round overran its budget"


@pytest.mark.clause("R14")
def test_round_budget_zero_never_flushes_mid_round(make_reactor, make_backend, pairs, clock):
    assert _rearming_round(make_reactor, make_backend, pairs, clock, budget_us=0) == []


# -- R15 -----------------------------------------------------------------------
BATCH = 32


def _posting_round(make_reactor, make_backend, pairs, chunk, post_in=lambda k: k == 1):
    """One round of BATCH ready events (one batch, gathered however the backend
    splits it); the k-th callback (from 1) posts when ``post_in(k)``.  Returns the
    round's sequence (``("io", k)`` and ``("post", k)``: posted by callback k), the
    sequence after one more round, and the drains counted."""
    rec = RecordingBackend(make_backend(), gather=BATCH)
    r = make_reactor(backend=rec, tail_us=0, drain_chunk=chunk)
    ps = pairs(BATCH)
    seq = []

    def callback(ev):
        k = sum(1 for kind, _ in seq if kind == "io") + 1
        seq.append(("io", k))
        if post_in(k):
            r.post(lambda d, k=k: seq.append(("post", k)))

    for p in ps:
        p.make_readable()
        r.arm(p.fd, READ, callback)
    drains_before = r.counters.drain_chunk_drains
    r.run_once(0)
    require_batch(rec, BATCH)
    in_round = list(seq)
    r.run_once(0)
    return in_round, seq, r.counters.drain_chunk_drains - drains_before


@pytest.mark.clause("R15")
def test_post_made_during_a_batch_runs_within_drain_chunk_callbacks(make_reactor, make_backend, pairs):
    in_round, _, drains = _posting_round(make_reactor, make_backend, pairs, chunk=8)
    assert ("post", 1) in in_round, "the post waited for the next round"
    between = in_round.index(("post", 1)) - 1  # callbacks after the posting one
    assert between <= 8, f"the post ran after {between} more callbacks (DRAIN_CHUNK=8)"
    assert drains >= 1


@pytest.mark.clause("R15")
@pytest.mark.parametrize("chunk", [1, 2, 3, 8])
def test_posts_are_drained_after_exactly_every_nth_callback(make_reactor, make_backend, pairs, chunk):
    """Every callback posts: the posts run after callbacks N, 2N, 3N, ... and
    nowhere else, each after the callback that made it (so one made by callback
    k runs after at most N-1 more).  A period of N+1, or a count that restarts
    at each drain's first post, passes a looser bound."""
    in_round, _, drains = _posting_round(make_reactor, make_backend, pairs, chunk, post_in=lambda k: True)
    drained_after = []
    pending = []
    last_io = 0
    for kind, k in in_round:
        if kind == "io":
            last_io = k
        elif not drained_after or drained_after[-1] != last_io:
            drained_after.append(last_io)
        if kind == "post":
            pending.append((k, last_io))
    want = list(range(chunk, BATCH + 1, chunk))
    assert drained_after == want, (
        f"DRAIN_CHUNK={chunk}: posts ran after callbacks {drained_after}, "
        f"expected after every {chunk}th: {want}"
    )
    late = [(k, at) for k, at in pending if not k <= at < k + chunk]
    assert not late, f"posts (made by callback, ran after callback) outside the period: {late}"
    assert drains == len(want)


@pytest.mark.clause("R15")
def test_drain_chunk_zero_runs_the_post_at_the_next_round(make_reactor, make_backend, pairs):
    in_round, seq, drains = _posting_round(make_reactor, make_backend, pairs, chunk=0)
    assert in_round == [("io", k) for k in range(1, BATCH + 1)]
    assert seq == in_round + [("post", 1)]
    assert drains == 0
