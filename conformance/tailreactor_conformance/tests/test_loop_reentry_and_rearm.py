"""Reactor loop clauses: a round is not re-entrant (R22), and arming an armed direction
replaces its event (R18).
"""

from __future__ import annotations

import pytest

from tailreactor.backends import READ
from tailreactor_conformance.harness import (
    Watchdog,
    rule_broken,
    run_until,
)


# -- R22 -----------------------------------------------------------------------
@pytest.mark.clause("R22")
@pytest.mark.parametrize("kind", ["io", "timer", "post"])
def test_run_once_from_inside_a_round_raises_and_the_round_goes_on(make_reactor, pairs, clock, kind):
    """A round is not re-entrant: run_once() (or run()) called from a callback raises
    RuntimeError at once, which that callback sees; the outer round then goes on as if
    nothing had happened (the other callbacks run, the caller's dispatch_late() and
    re-arm are unchanged)."""
    r = make_reactor(clock=clock, tail_us=1000)
    ps = pairs(2)
    seen = []

    def nested(_):
        for call in (lambda: r.run_once(0), r.run):
            # A reactor that lets run() nest would block in it: the watchdog stops it.
            with Watchdog(r.stop):
                try:
                    call()
                except RuntimeError as exc:
                    seen.append(("refused", str(exc)))
                else:
                    seen.append("ran a nested round")

    def io(ev):
        if kind == "io" and not seen:
            late_before = r.dispatch_late()
            nested(ev)
            seen.append(("late unchanged", r.dispatch_late() == late_before))
        seen.append(("io", ev.data))

    for i, p in enumerate(ps):
        p.make_readable()
        r.arm(p.fd, READ, io, i)
    if kind == "timer":
        r.call_later_us(0, nested)
    elif kind == "post":
        r.post(nested)
    clock.advance_us(5000)  # aged: the I/O callbacks run elevated
    run_until(r, lambda: len([x for x in seen if x[0] == "io"]) == 2, max_rounds=50)
    refusals = [x for x in seen if x[0] == "refused"]
    assert "ran a nested round" not in seen
    assert len(refusals) == 2, seen
    assert all(msg for _, msg in refusals), "RuntimeError without a message saying why"
    if kind == "io":
        assert ("late unchanged", True) in seen
    assert sorted(x[1] for x in seen if x[0] == "io") == [0, 1]
    r.run_once(0)  # and the reactor still runs rounds afterwards


@pytest.mark.clause("R22")
def test_a_post_that_close_drains_cannot_run_a_round(make_reactor, pairs):
    """close() runs the posts still queued (R19); one of them calling run_once() gets
    RuntimeError, and no I/O callback runs inside close()."""
    r = make_reactor()
    (p,) = pairs(1)
    p.make_readable()
    io = []
    r.arm(p.fd, READ, lambda ev: io.append(ev.fd))
    seen = []

    def nested(_):
        try:
            r.run_once(0)
        except RuntimeError as exc:
            seen.append(("refused", bool(str(exc))))
        else:
            seen.append("ran a round inside close()")

    r.post(nested)
    r.close()
    if not seen:
        rule_broken("R19", "close() ran no queued post")
    assert seen == [("refused", True)] and io == []


# -- R18 -----------------------------------------------------------------------
@pytest.mark.clause("R18")
def test_arming_an_armed_direction_replaces_the_event(make_reactor, pairs):
    r = make_reactor()
    (p,) = pairs(1)
    ran = []
    r.arm(p.fd, READ, lambda ev: ran.append("first"))
    r.arm(p.fd, READ, lambda ev: ran.append("second"))
    p.make_readable()
    run_until(r, lambda: ran)
    for _ in range(3):
        r.run_once(0)
    assert ran == ["second"]


@pytest.mark.clause("R18")
def test_rearming_an_event_already_in_the_batch_replaces_it(make_reactor, make_backend, pairs):
    """Two events in one batch; the first callback arms the other fd's direction again:
    the event it replaces must not run, in this round or later, and the new one runs
    once, in a later round (the fd is still readable)."""
    from tailreactor_conformance.harness import RecordingBackend, require_batch

    rec = RecordingBackend(make_backend(), gather=2)
    r = make_reactor(backend=rec, tail_us=0)
    x, y = pairs(2)
    other = {"x": y, "y": x}
    ran = []

    def callback(ev):
        ran.append(ev.data)
        if len(ran) == 1:
            victim = other[ev.data]
            r.arm(victim.fd, READ, lambda e: ran.append("replacement"))

    for name, p in (("x", x), ("y", y)):
        p.make_readable()
        r.arm(p.fd, READ, callback, name)
    r.run_once(0)
    require_batch(rec, 2, which=0)
    in_round = list(ran)
    run_until(r, lambda: len(ran) >= 2, max_rounds=50)
    for _ in range(3):
        r.run_once(0)
    assert len(in_round) == 1, f"the replaced event ran in the batch: {in_round}"
    assert ran[1:] == ["replacement"], ran
