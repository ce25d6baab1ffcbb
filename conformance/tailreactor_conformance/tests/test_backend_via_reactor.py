"""Backend clauses checked through the reactor: B4, the in-batch half of B5, B12, B13.

A batch is what one ``wait`` returned.  The tests below need two events in
the same batch; they check that precondition on a RecordingBackend and say so
if a backend split the batch (then the scenario could not be built).
"""

from __future__ import annotations

import os
import socket

import pytest

from tailreactor.backends import READ
from tailreactor_conformance.harness import RecordingBackend, require_batch, rule_broken, run_until


def _one_batch(rec: RecordingBackend, n: int) -> None:
    """The round's batch held ``n`` events (built with ``gather=n``), else skip naming B1/B10."""
    require_batch(rec, n, which=0)


# -- B4 ------------------------------------------------------------------------
@pytest.mark.clause("B4")
@pytest.mark.parametrize("how", ["disarm", "disarm-and-close"])
def test_event_disarmed_by_an_earlier_callback_of_the_batch_never_runs(
    make_reactor, make_backend, pairs, how
):
    rec = RecordingBackend(make_backend(), gather=2)
    r = make_reactor(backend=rec, tail_us=0)
    x, y = pairs(2)
    other = {"x": y, "y": x}
    ran = []

    def callback(ev):
        ran.append(ev.data)
        if len(ran) == 1:  # the first callback of the batch retires the other fd
            victim = other[ev.data]
            r.disarm(victim.fd)
            if how == "disarm-and-close":
                victim.ours.close()

    for name, p in (("x", x), ("y", y)):
        p.make_readable()
        r.arm(p.fd, READ, callback, name)
    run_until(r, lambda: ran)
    for _ in range(3):
        r.run_once(0)
    _one_batch(rec, 2)
    assert len(ran) == 1, f"callbacks ran: {ran} (the second was disarmed by the first)"


# -- B5 (inside a batch) -------------------------------------------------------
@pytest.mark.clause("B5")
def test_fd_number_reused_inside_a_batch_gets_no_stale_event(make_reactor, make_backend, pairs):
    rec = RecordingBackend(make_backend(), gather=2)
    r = make_reactor(backend=rec, tail_us=0)
    x, y, fresh = pairs(3)
    other = {"x": y, "y": x}
    ran = []
    reused = []

    def callback(ev):
        ran.append(ev.data)
        if len(ran) == 1:
            victim = other[ev.data]
            r.disarm(victim.fd)
            number = victim.ours.detach()
            os.dup2(fresh.ours.fileno(), number)  # close the victim; its number now names `fresh`
            reused.append(socket.socket(fileno=number))
            r.arm(number, READ, lambda e: ran.append("new registration"), None)

    for name, p in (("x", x), ("y", y)):
        p.make_readable()
        r.arm(p.fd, READ, callback, name)
    try:
        run_until(r, lambda: ran)
        for _ in range(3):
            r.run_once(0)
        _one_batch(rec, 2)
        assert len(ran) == 1, f"the old registration's event ran: {ran}"
        fresh.make_readable()  # now the new registration has something to report
        run_until(r, lambda: len(ran) > 1)
        r.run_once(0)
        assert ran[1:] == ["new registration"], (
            f"an fd disarmed and closed inside a batch, its number reused at once (dup2) for another "
            f"socket and armed, which then became readable: callbacks ran {ran[1:]}, not the new "
            "arming's once. The arming of the number's new file was not registered, or not reported "
            "(a backend or library that keeps the closed file's record for the number, e.g. libev "
            "without ev_io_set, sees no change and registers nothing)"
        )
    finally:
        for s in reused:
            r.disarm(s.fileno())
            s.close()


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt from a signal handler: not an Exception, so it leaves run_once (R21)."""


@pytest.mark.clause("B5")
def test_a_carried_over_event_rearming_its_reused_number_registers_the_new_file(
    make_reactor, make_backend, pairs
):
    """One batch of x and y. The first callback closes the other's file without disarm (the
    caller's bug the header has a backend survive), puts a fresh socket on its number, and is
    cut short (R21): the other's event is carried over to the next round, which waits again
    before it runs it. Its callback re-arms READ on its own number -- from its own callback
    (the reactor's ``rearm``), but after a later wait than the one that reported it, and the
    number names another file since. The header's rule: a later arm of a reused number
    registers the new file. A backend whose cheap re-arm skips the system call for a report
    of an older wait (when any callback in between could have closed the fd) never reports it."""
    rec = RecordingBackend(make_backend(), gather=2)
    r = make_reactor(backend=rec, tail_us=0)
    x, y, fresh = pairs(3)
    other = {"x": y, "y": x}
    ran = []
    reused = []

    def callback(ev):
        ran.append(ev.data)
        if len(ran) == 1:
            number = other[ev.data].ours.detach()
            os.dup2(fresh.ours.fileno(), number)  # closes the other's file, armed; its number names `fresh`
            reused.append(socket.socket(fileno=number))
            raise _Interrupt("signal")
        if ev.data != "new":  # the carried-over event
            r.arm(ev.fd, READ, callback, "new")

    for name, p in (("x", x), ("y", y)):
        p.make_readable()
        r.arm(p.fd, READ, callback, name)
    try:
        with pytest.raises(_Interrupt):
            run_until(r, lambda: ran, max_rounds=50)
        _one_batch(rec, 2)
        run_until(r, lambda: len(ran) >= 2, max_rounds=50)
        if len(ran) < 2:
            rule_broken("R21", f"the event left by a round cut short never ran (ran {ran})")
        fresh.make_readable()  # the new file, on the re-armed number, has something to report
        run_until(r, lambda: "new" in ran)
        assert "new" in ran, (
            f"the reused number re-armed from a carried-over event's callback was never reported: {ran}"
        )
    finally:
        for s in reused:
            r.disarm(s.fileno())
            s.close()


# -- B12 (through the reactor) -------------------------------------------------
@pytest.mark.clause("B12")
def test_callback_that_rearms_itself_runs_again_in_a_later_round(make_reactor, pairs):
    r = make_reactor()
    (p,) = pairs(1)
    p.make_readable()  # never read: ready again the moment it is re-armed
    rounds_seen = []
    round_no = [0]

    def callback(ev):
        rounds_seen.append(round_no[0])
        if len(rounds_seen) < 5:
            r.arm(ev.fd, READ, callback)

    r.arm(p.fd, READ, callback)
    for _ in range(50):
        if len(rounds_seen) >= 5:
            break
        round_no[0] += 1
        r.run_once(0.01)
    for _ in range(3):
        round_no[0] += 1
        r.run_once(0)
    assert len(rounds_seen) == 5, f"ran {len(rounds_seen)} times, expected 5 (one per arming)"
    assert len(set(rounds_seen)) == 5, f"ran twice in one round: {rounds_seen}"


@pytest.mark.clause("B12")
def test_callback_can_arm_another_fd(make_reactor, pairs):
    r = make_reactor()
    a, b = pairs(2)
    a.make_readable()
    b.make_readable()
    ran = []
    r.arm(a.fd, READ, lambda ev: (ran.append("a"), r.arm(b.fd, READ, lambda e: ran.append("b"))))
    run_until(r, lambda: len(ran) >= 2)
    r.run_once(0)
    assert ran == ["a", "b"]


# -- B13 (through the reactor) -------------------------------------------------
@pytest.mark.clause("B13")
def test_reactor_use_after_close_raises(make_reactor, pairs):
    r = make_reactor()
    (p,) = pairs(1)
    r.arm(p.fd, READ, lambda ev: None)
    r.close()
    with pytest.raises(RuntimeError):
        r.arm(p.fd, READ, lambda ev: None)
    with pytest.raises(RuntimeError):
        r.run_once(0)
    r.close()  # idempotent
