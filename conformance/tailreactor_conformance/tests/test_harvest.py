"""Harvesting mid-round (issue 24): events that became ready during a round join it (R23),
the round still ends (R24), and nothing is lost or run twice (R25); R17's
no-starvation with harvesting on is in test_loop_posts_and_stop.py.

Deterministic: a ManualClock is injected and a "slow" callback advances it,
so "the round has run H" is exact.  The events a callback makes ready are
real: it writes to a socketpair whose other end was armed long ago.  The
harvest is optional (``backend.harvest``); on a backend without one these
clauses skip with the reason.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor_conformance.harness import (
    LIVENESS_S,
    RecordingBackend,
    collect,
    ready_if_it_sleeps,
    rule_broken,
    run_until,
)


def harvesting(make_backend) -> RecordingBackend:
    """A recorded backend of the kind under test, or skip: it has no harvest()."""
    b = make_backend()
    if not callable(getattr(b, "harvest", None)):
        pytest.skip(
            f"backend {getattr(b, 'name', type(b).__name__)} has no harvest() (optional): "
            f"CWIST_REACTOR_HARVEST_US does nothing on it"
        )
    return RecordingBackend(b)


class MidRound:
    """One round of three events A, B, C armed at 2000 us and ready at its start (2100 us),
    plus OLD (armed at 0) and YOUNG (armed at 2050), which the first callback makes
    ready after taking 600 us.  ``chain``: OLD's callback takes 600 us more and makes
    OLD2 (armed at 0) ready."""

    def __init__(self, reactor, rec, clock, ps, chain=False):
        self.r, self.rec, self.clock = reactor, rec, clock
        self.log: list[tuple[str, bool, int]] = []  # (name, dispatch_late(), ready_ns - base)
        self.chain = chain
        self.ps = dict(zip(("old", "old2", "young", "a", "b", "c"), ps))
        self.base = base = clock()
        for name, at in (("old", 0), ("old2", 0), ("a", 2000), ("b", 2000), ("c", 2000), ("young", 2050)):
            clock.set_ns(base + at * 1000)
            reactor.arm(self.ps[name].fd, READ, self.callback, name)
        rec.inner.flush()  # the arms reach the kernel before anything is ready
        for name in ("a", "b", "c"):
            self.ps[name].make_readable()
        clock.set_ns(base + 2100 * 1000)
        rounds = reactor.counters.rounds
        reactor.run_once(0)
        assert reactor.counters.rounds == rounds + 1
        assert rec.batches and sorted(ev.data for ev in rec.batches[-1]) == ["a", "b", "c"], (
            f"precondition: A, B and C in the round's batch, got {rec.batches}"
        )
        self.batch = [ev.data for ev in rec.batches[-1]]
        self.harvested = [ev.data for h in rec.harvests for ev in h]

    def callback(self, ev):
        self.ps[ev.data].drain()
        self.log.append((ev.data, self.r.dispatch_late(), ev.ready_ns - self.base))
        if len(self.log) == 1:
            self.clock.advance_us(600)  # the round has now run 600 us > H = 500 us
            self.ps["old"].make_readable()
            self.ps["young"].make_readable()
        elif ev.data == "old" and self.chain:
            self.clock.advance_us(600)  # 1200 us: a second harvest is due at 500 + 600 us
            self.ps["old2"].make_readable()

    @property
    def order(self) -> list[str]:
        return [name for name, _, _ in self.log]


@pytest.fixture
def mid_round(make_reactor, make_backend, pairs, clock):
    """``mid_round(chain=False, **config)`` -> a finished :class:`MidRound`."""

    def run(chain=False, **attrs) -> MidRound:
        rec = harvesting(make_backend)
        r = make_reactor(clock=clock, backend=rec, **attrs)
        return MidRound(r, rec, clock, pairs(6), chain)

    return run


# -- R23 -----------------------------------------------------------------------
@pytest.mark.clause("R23")
def test_an_old_event_readied_mid_round_runs_in_it_before_younger_events(mid_round):
    rnd = mid_round(tail_us=1000, harvest_us=500)
    first, second, third = rnd.batch
    # At 2700 us OLD (armed at 0) is aged; B and C (armed at 2000) and YOUNG are not.
    assert rnd.order == [first, "old", second, third, "young"], (rnd.order, rnd.batch, rnd.harvested)
    assert [late for _, late, _ in rnd.log] == [False, True, False, False, False]


@pytest.mark.clause("R23")
def test_a_harvested_event_is_stamped_ready_when_it_was_harvested(mid_round):
    rnd = mid_round(tail_us=1000, harvest_us=500)
    ready = {name: at for name, _, at in rnd.log}
    assert ready["old"] == ready["young"] == 2_700_000, ready  # the clock at the harvest, not 2100 us
    assert all(ready[n] == 2_100_000 for n in ("a", "b", "c")), ready


@pytest.mark.clause("R23")
def test_harvesting_again_every_harvest_us(mid_round):
    rnd = mid_round(chain=True, tail_us=1000, harvest_us=500)
    first, second, third = rnd.batch
    assert rnd.order == [first, "old", "old2", second, third, "young"], (rnd.order, rnd.harvested)


@pytest.mark.clause("R23")
def test_with_tail_us_zero_harvested_events_follow_in_backend_order(mid_round):
    rnd = mid_round(tail_us=0, harvest_us=500)
    assert sorted(rnd.harvested) == ["old", "young"], rnd.harvested
    assert rnd.order == rnd.batch + rnd.harvested
    assert not any(late for _, late, _ in rnd.log)


@pytest.mark.clause("R23")
def test_harvest_us_zero_adds_nothing_to_a_round(mid_round):
    rnd = mid_round(tail_us=1000, harvest_us=0)
    assert rnd.order == rnd.batch
    assert rnd.rec.harvests == []
    run_until(rnd.r, lambda: len(rnd.log) == 5)
    assert sorted(rnd.order[3:]) == ["old", "young"]  # the next round's


@pytest.mark.clause("R23")
def test_a_harvest_takes_what_is_ready_then_without_blocking(make_backend, pairs):
    """The harvest takes the events ready *then* (base.py: without blocking): with nothing
    ready it returns at once, empty. Shown by an fd made ready only once the harvesting
    thread sleeps in the kernel (:func:`ready_if_it_sleeps`): a harvest that blocks (a poll
    with a timeout of 1 instead of 0) returns it."""
    b = harvesting(make_backend)
    idle, late = pairs(2)
    b.arm(idle.fd, READ, "never ready")
    b.arm(late.fd, READ, "late")
    b.flush()
    assert b.wait(0) == []  # the round's wait
    for _ in range(3):
        got = ready_if_it_sleeps(lambda: b.harvest(8), late)
        assert got == [], f"a harvest with nothing ready blocked: it returned {got}, ready only once it slept"
    b.disarm(idle.fd, READ)
    b.disarm(late.fd, READ)


# -- R24 -----------------------------------------------------------------------
def _flood(make_reactor, make_backend, pairs, clock, cap=400, **attrs):
    """Four fds that stay readable and re-arm from their callbacks, each callback 200 us
    long, harvest every 100 us: every harvest finds them ready again.  The first
    callback arms a timer due at once and posts.  Returns the log of the first rounds
    ('io', 'timer', 'post', and '|' at each round's end) and the first round's batch size."""
    rec = harvesting(make_backend)
    r = make_reactor(clock=clock, backend=rec, harvest_us=100, **attrs)
    ps = pairs(4)
    log = []

    def io(ev):
        log.append("io")
        clock.advance_us(200)
        if log.count("io") == 1:
            r.call_later_us(0, lambda t: log.append("timer"))
            r.post(lambda d: log.append("post"))
        if log.count("io") < cap:  # only a round that never ends gets here; keeps it finite
            r.arm(ev.fd, READ, io)

    for p in ps:
        p.make_readable()
        r.arm(p.fd, READ, io)
    rec.inner.flush()
    for _ in range(3):
        r.run_once(0)
        log.append("|")
    return log, len(rec.batches[0]) if rec.batches else 0


@pytest.mark.clause("R24")
def test_a_round_takes_at_most_as_many_more_events_as_its_wait_returned(
    make_reactor, make_backend, pairs, clock
):
    log, batch = _flood(make_reactor, make_backend, pairs, clock, tail_us=0, drain_chunk=0)
    assert batch == 4, f"precondition: the four fds in the first round's batch, got {batch}"
    first = log[: log.index("|")]
    if first.count("io") <= batch:
        rule_broken("R23", f"nothing was harvested in the first round ({first})")
    assert first.count("io") <= 2 * batch, f"the round ran {first.count('io')} callbacks, batch {batch}"


@pytest.mark.clause("R24")
def test_a_timer_due_during_a_harvesting_round_fires_at_the_next_rounds_start(
    make_reactor, make_backend, pairs, clock
):
    log, _ = _flood(make_reactor, make_backend, pairs, clock, tail_us=1000, drain_chunk=0)
    rounds = " ".join(log).split(" | ")
    assert log.index("timer") > log.index("|"), f"the timer fired inside the round it became due in: {log}"
    assert log[: log.index("timer")].count("io") <= 8, f"the timer waited for more than two batches: {log}"
    assert rounds[1].split()[:2] in (["post", "timer"], ["timer", "post"]), log
    assert rounds[1].split()[2] == "io", log  # both before the second round's I/O


@pytest.mark.clause("R24")
def test_posts_run_within_drain_chunk_callbacks_in_a_harvesting_round(
    make_reactor, make_backend, pairs, clock
):
    log, _ = _flood(make_reactor, make_backend, pairs, clock, tail_us=1000, drain_chunk=2)
    first = log[: log.index("|")]
    assert "post" in first and first.index("post") <= 3, log  # posted by the 1st callback, run after the 2nd


# -- R25 -----------------------------------------------------------------------
@pytest.mark.clause("R25")
@pytest.mark.parametrize("tail_us", [0, 1000])
def test_every_harvested_event_runs_exactly_once(make_reactor, make_backend, pairs, clock, tail_us):
    """12 fds armed long ago; 4 ready at round start; the first callback makes the other 8
    ready, more than the round may harvest (4: how many is R24's rule, not this one's).  Each callback reads its byte and re-arms
    the same event, so a report made twice would run it again, with nothing to read."""
    rec = harvesting(make_backend)
    r = make_reactor(clock=clock, backend=rec, tail_us=tail_us, harvest_us=100)
    ps = pairs(12)
    runs: Counter = Counter()
    empty = []

    def io(ev):
        i = ev.data
        runs[i] += 1
        if not ps[i].drain():
            empty.append(i)
        clock.advance_us(300)
        if sum(runs.values()) == 1:
            for p in ps[4:]:
                p.make_readable()
        r.arm(ev.fd, READ, io, i)

    for i, p in enumerate(ps):
        r.arm(p.fd, READ, io, i)
    rec.inner.flush()
    clock.advance_us(5000)
    for p in ps[:4]:
        p.make_readable()
    r.run_once(0)
    assert len(rec.batches[0]) == 4, f"precondition: 4 events in the first batch, got {rec.batches}"
    run_until(r, lambda: len(runs) == 12)
    for _ in range(3):
        r.run_once(0)
    assert runs == Counter({i: 1 for i in range(12)}), f"runs per fd {dict(runs)}; harvests {rec.harvests}"
    assert empty == [], f"events run with nothing to read (reported twice): {empty}"


@pytest.mark.clause("R25")
def test_a_harvest_returns_at_most_its_bound_also_for_write_tokens(make_backend, pairs):
    """The harvest's bound (the reactor passes what the round may still add, R24) is kept
    whatever is ready: one fd ready both ways with READ and WRITE armed, and three more
    readable, harvested one at a time: no harvest returns more than one report, and every
    token is reported exactly once by the harvests and the waits after them."""
    b = harvesting(make_backend)
    both, *more = pairs(4)
    both.make_readable()
    b.arm(both.fd, READ, "both read")
    b.arm(both.fd, WRITE, "both write")
    for i, p in enumerate(more):
        p.make_readable()
        b.arm(p.fd, READ, f"read {i}")
    b.flush()
    expected = Counter(["both read", "both write", "read 0", "read 1", "read 2"])
    seen: Counter = Counter()
    sizes = []
    deadline = time.monotonic() + LIVENESS_S
    while sum(seen.values()) < len(expected) and time.monotonic() < deadline:
        got = b.harvest(1)
        sizes.append(len(got))
        seen.update(tok for tok, _ in got)
    assert max(sizes) <= 1, f"harvest(1) returned {max(sizes)} reports (sizes {sizes}; reports {dict(seen)})"
    seen += collect(b, len(expected) - sum(seen.values()), extra_waits=2)
    assert seen == expected, dict(seen)
    b.disarm(both.fd, WRITE)


@pytest.mark.clause("R25")
def test_a_harvest_bound_of_hundreds_is_kept(make_backend, pairs):
    """The same bound where it is large, as a reactor with a large batch passes it: 301 fds
    ready both ways with READ and WRITE armed, harvest(300) returns at most 300 reports, and
    every token is reported exactly once by the harvests and the waits after them (a bound
    compared by identity, not value, holds in CPython only up to 256, its cached small ints)."""
    from tailreactor_conformance.tests._backend_helpers import _raise_nofile

    n, bound = 301, 300
    _raise_nofile(2 * n + 256)
    b = harvesting(make_backend)
    ps = pairs(n)
    for i, p in enumerate(ps):
        p.make_readable()
        b.arm(p.fd, READ, f"read {i}")
        b.arm(p.fd, WRITE, f"write {i}")
    b.flush()
    expected = Counter(f"{d} {i}" for i in range(n) for d in ("read", "write"))
    seen: Counter = Counter()
    sizes = []
    deadline = time.monotonic() + LIVENESS_S
    while sum(seen.values()) < len(expected) and time.monotonic() < deadline:
        got = b.harvest(bound)
        sizes.append(len(got))
        seen.update(tok for tok, _ in got)
    assert max(sizes) <= bound, f"harvest({bound}) returned {max(sizes)} reports with {n} fds ready both ways"
    seen += collect(b, len(expected) - sum(seen.values()), extra_waits=2)
    assert seen == expected, f"reported other than once: {dict((seen - expected) + (expected - seen))}"


@pytest.mark.clause("R25")
def test_what_a_harvest_leaves_the_next_wait_returns_at_once(make_backend, pairs):
    """Events ready beyond the harvest's bound run in a later round: the next wait returns
    them, at once (base.py: what the harvest leaves, the next wait returns). Three fds ready,
    a harvest takes one; the next wait, given a long timeout, must not block while it holds
    the other two: an fd made ready only once the waiting thread sleeps in the kernel
    (:func:`ready_if_it_sleeps`) is not in what it returns. A backend that keeps the
    completions it peeked and blocks anyway returns that fd too."""
    b = harvesting(make_backend)
    ps = pairs(3)
    (late,) = pairs(1)
    for i, p in enumerate(ps):
        p.make_readable()
        b.arm(p.fd, READ, i)
    b.arm(late.fd, READ, "late")
    b.flush()
    taken = []
    deadline = time.monotonic() + LIVENESS_S
    while not taken and time.monotonic() < deadline:
        taken = b.harvest(1)
    if not taken:
        rule_broken("R23", f"three armed fds ready for {LIVENESS_S} s, and no harvest took one")
    got = ready_if_it_sleeps(lambda: b.wait(LIVENESS_S), late)
    tokens = [tok for tok, _ in got]
    assert "late" not in tokens, (
        "the wait after a harvest that left two events ready blocked before it handed them over: it returned "
        f"{tokens}, with an fd made ready only once it slept"
    )
    rest = Counter(tok for tok, _ in taken) + Counter(tokens)
    rest += collect(b, 3 - sum(rest.values()), extra_waits=2)
    rest.pop("late", None)
    assert rest == Counter({0: 1, 1: 1, 2: 1}), dict(rest)
