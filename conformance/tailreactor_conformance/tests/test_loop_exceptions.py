"""Reactor loop clauses: callback exceptions (R9), and an exception that is not an
Exception escaping an I/O, timer or posted callback, or raised right after the wait, loses
no other callback (R21).  The wait and the round interrupted at any point are in
test_loop_interrupts.py.
"""

from __future__ import annotations

import logging

import pytest

from tailreactor.backends import READ
from tailreactor_conformance.harness import (
    run_until,
)
from tailreactor_conformance.tests._loop_helpers import Escape


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
