"""Probe counts (R16) and agreement with the pure model (R20).

R16 uses a recording probe passed as ``Reactor(probe=...)``: it needs only the
probe *interface* (dispatch, post, round, finish), so it holds for any
reactor.  A second test checks the shipped ``tailreactor.probe.LatencyProbe``
when that module exists (it may land after the reactor).

R20 runs Hypothesis programs and a RuleBasedStateMachine on a real reactor,
real socketpairs and a ManualClock, checking every callback against
:class:`tailreactor_conformance.model.Model`.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from tailreactor.backends import READ
from tailreactor.clock import ManualClock
from tailreactor_conformance import machine, profiles
from tailreactor_conformance.driver import Driver
from tailreactor_conformance.harness import run_until
from tailreactor_conformance.strategies import programs


class RecordingProbe:
    def __init__(self):
        self.dispatches, self.posts, self.rounds, self.finished = [], [], [], []

    def dispatch(self, queue_arm_ns, queue_ready_ns, svc_ns, elevated):
        self.dispatches.append((queue_arm_ns, queue_ready_ns, svc_ns, elevated))

    def post(self, delay_ns):
        self.posts.append(delay_ns)

    def round(self, batch_size, round_ns):
        self.rounds.append((batch_size, round_ns))

    def finish(self, counters=None):
        self.finished.append(counters)


def _probe_workload(r, clock, pairs):
    a, b = pairs(2)
    r.arm(a.fd, READ, lambda ev: clock.advance_us(100))
    clock.advance_us(2000)  # `a` is aged (T = 1000 us) when it runs
    r.arm(b.fd, READ, lambda ev: None)
    a.make_readable()
    b.make_readable()
    r.post(lambda d: None)
    r.post(lambda d: None)
    run_until(r, lambda: r.counters.dispatched >= 2)
    r.run_once(0)


# -- R16 -----------------------------------------------------------------------
@pytest.mark.clause("R16")
def test_probe_sees_every_callback_post_and_round(make_reactor, pairs, clock):
    probe = RecordingProbe()
    r = make_reactor(clock=clock, probe=probe, tail_us=1000)
    _probe_workload(r, clock, pairs)
    c = r.counters.as_dict()
    assert len(probe.dispatches) == c["dispatched"] == 2
    assert sum(d[3] for d in probe.dispatches) == c["tail_elevations"] == 1
    aged = [d for d in probe.dispatches if d[3]][0]
    assert aged[0] >= 2_000_000, f"queue delay since arm of the aged event: {aged[0]} ns"
    assert all(d[0] >= d[1] >= 0 and d[2] >= 0 for d in probe.dispatches)
    assert len(probe.posts) == c["posts_run"] == 2
    assert len(probe.rounds) == c["rounds"]
    assert sum(n for n, _ in probe.rounds) == 2
    assert probe.finished == []
    r.close()
    assert len(probe.finished) == 1 and probe.finished[0]["dispatched"] == 2
    r.close()
    assert len(probe.finished) == 1


@pytest.mark.clause("R16")
def test_shipped_latency_probe_counts_match_the_reactor(make_reactor, pairs, clock, capsys):
    from tailreactor.probe import LatencyProbe

    r = make_reactor(clock=clock, latency_probe=True, tail_us=1000)
    assert isinstance(r.probe, LatencyProbe)
    _probe_workload(r, clock, pairs)
    p, c = r.probe, r.counters
    assert (p.dispatched, p.tail_elevations, p.posts, p.rounds) == (
        c.dispatched,
        c.tail_elevations,
        c.posts_run,
        c.rounds,
    )
    r.close()
    assert p.reactor_counters == c.as_dict()
    assert "[latency-probe]" in capsys.readouterr().err


# -- R20 -----------------------------------------------------------------------
@pytest.mark.clause("R20")
def test_random_programs_agree_with_the_model(fresh_reactor):
    @profiles.current()
    @given(program=programs())
    def check(program):
        clock = ManualClock()
        d = Driver(fresh_reactor(clock=clock), clock)
        try:
            for step in program:
                d.do(*step)
                d.check()
        finally:
            d.reactor.close()
            d.close_sockets()

    check()


@pytest.mark.clause("R20")
def test_state_machine_agrees_with_the_model(fresh_reactor):
    machine.run(lambda clock: fresh_reactor(clock=clock), profiles.current())
