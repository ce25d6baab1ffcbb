"""One-shot arming, disarm, closed fds, EOF, callback errors, use after close."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from limits import require_fds
from tailreactor import READ, WRITE


def test_one_shot_delivered_once_until_rearmed(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    b.send(b"data")  # already present when armed: must be delivered
    calls = []
    r.arm(a.fileno(), READ, calls.append)
    for _ in range(3):
        r.run_once(0.05)
    assert len(calls) == 1, "one-shot: unread data must not be delivered again until re-armed"
    assert calls[0].revents & 1  # POLLIN
    r.arm(a.fileno(), READ, calls.append)
    r.run_once(1.0)
    assert len(calls) == 2


def test_disarm_means_never_delivered(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    calls = []
    r.arm(a.fileno(), READ, calls.append)
    r.run_once(0)
    assert r.disarm(a.fileno()) == 1
    b.send(b"x")
    for _ in range(3):
        r.run_once(0.02)
    assert calls == []
    assert r.disarm(a.fileno()) == 0


def test_disarm_by_earlier_callback_of_same_batch(make_reactor, socketpairs):
    """Two ready fds; each callback disarms and closes the other: exactly one runs."""
    r = make_reactor()
    (a1, b1), (a2, b2) = socketpairs(2)
    ran = []
    fds = [a1.fileno(), a2.fileno()]

    def cb(ev):
        ran.append(ev.fd)
        other = fds[1] if ev.fd == fds[0] else fds[0]
        r.disarm(other)

    for fd in fds:
        r.arm(fd, READ, cb)
    b1.send(b"x")
    b2.send(b"x")
    r.run_once(1.0)
    r.run_once(0.02)
    assert len(ran) == 1


def test_rearm_same_direction_replaces(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    calls = []
    r.arm(a.fileno(), READ, lambda ev: calls.append("old"))
    r.arm(a.fileno(), READ, lambda ev: calls.append("new"))
    b.send(b"x")
    r.run_once(1.0)
    r.run_once(0.02)
    assert calls == ["new"]


def test_write_arm_and_read_arm_on_same_fd(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    calls = []
    r.arm(a.fileno(), WRITE, lambda ev: calls.append("w"))
    r.arm(a.fileno(), READ, lambda ev: calls.append("r"))
    r.run_once(1.0)
    assert calls == ["w"]  # writable now, nothing to read
    b.send(b"x")
    r.run_once(1.0)
    assert calls == ["w", "r"], "the read interest survived the write report"


def test_eof_reaches_read_callback(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    got = []
    r.arm(a.fileno(), READ, lambda ev: got.append(a.recv(10)))
    b.close()
    r.run_once(1.0)
    assert got == [b""]


def test_arming_closed_fd_raises_ebadf(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    fd = os.dup(a.fileno())
    os.close(fd)
    with pytest.raises(OSError) as info:
        r.arm(fd, READ, print)
    assert info.value.errno == errno.EBADF
    assert f"fd {fd}" in str(info.value)
    assert r.armed(fd, READ) is None


def test_bad_direction(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    with pytest.raises(ValueError, match="READ"):
        r.arm(a.fileno(), 3, print)


def test_callback_exception_logged_with_fd_and_loop_continues(make_reactor, socketpairs, caplog):
    r = make_reactor()
    (a1, b1), (a2, b2) = socketpairs(2)
    ok = []

    def boom(ev):
        raise ValueError("broken callback")

    r.arm(a1.fileno(), READ, boom)
    r.arm(a2.fileno(), READ, ok.append)
    b1.send(b"x")
    b2.send(b"x")
    with caplog.at_level(logging.ERROR, logger="tailreactor"):
        r.run_once(1.0)
        r.run_once(0.02)
    assert len(ok) == 1
    assert r.counters.callback_errors == 1
    assert f"fd {a1.fileno()}" in caplog.text and "broken callback" in caplog.text


def test_use_after_close_raises(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    r.close()
    with pytest.raises(RuntimeError, match="closed"):
        r.arm(a.fileno(), READ, print)
    with pytest.raises(RuntimeError, match="closed"):
        r.run_once(0)


def test_many_fds_armed_at_once(make_reactor, socketpairs):
    require_fds(2 * 1100)  # more than a stock soft limit of 1024
    r = make_reactor()
    pairs = socketpairs(1100)
    seen = set()
    for a, b in pairs:
        r.arm(a.fileno(), READ, lambda ev: seen.add(ev.fd))
        b.send(b"x")
    rounds = 0
    while len(seen) < len(pairs) and rounds < 50:
        r.run_once(1.0)
        rounds += 1
    assert len(seen) == len(pairs)


def test_flush_submits_queued_arms_now(make_reactor, socketpairs, backend_name):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    r.arm(a.fileno(), READ, print)
    n = r.flush()
    assert n == (1 if backend_name == "io_uring" else 0)  # epoll arms synchronously
    assert r.flush() == 0  # nothing queued any more
    r.close()
    assert r.flush() == 0  # after close: nothing to submit, no error


def test_rearm_from_own_callback_reuses_the_delivered_event_restamped(make_reactor, clock, socketpairs):
    """An arm of the same fd and direction from the callback of the event just
    delivered re-arms that Event object (as CWIST re-arms its per-fd event):
    new callback and data, ``armed_ns`` = the clock at the re-arm, ``ready_ns``
    and ``revents`` 0, ``ARMED``.  It is delivered again, to the new callback."""
    from tailreactor.events import ARMED, DONE

    r = make_reactor(clock=clock)
    ((a, b),) = socketpairs(1)
    b.send(b"x")  # never read: every arm fires at once
    seen = []

    def second(ev):
        seen.append(("second", ev, ev.data, ev.armed_ns, ev.state))

    def first(ev):
        seen.append(("first", ev, ev.data, ev.armed_ns, ev.state))
        clock.advance_us(30)
        again = r.arm(a.fileno(), READ, second, "d2")
        seen.append(("rearm", again, again.data, again.armed_ns, again.state, again.ready_ns, again.revents))

    ev1 = r.arm(a.fileno(), READ, first, "d1")
    armed1 = ev1.armed_ns
    clock.advance_us(100)
    r.run_once(1.0)
    r.run_once(1.0)
    assert [s[0] for s in seen] == ["first", "rearm", "second"]
    assert seen[0][1:] == (ev1, "d1", armed1, DONE)
    assert seen[1][1] is ev1, "same fd and direction from its own callback: the delivered Event is re-armed"
    assert seen[1][2:] == ("d2", armed1 + 130_000, ARMED, 0, 0)
    assert seen[2][1] is ev1 and seen[2][2] == "d2" and seen[2][3] == armed1 + 130_000
    assert ev1.revents & 1  # delivered again, with the bits of its second report


def test_arm_from_elsewhere_or_other_direction_gets_a_new_event(make_reactor, clock, socketpairs):
    """Only that re-arm reuses the Event: an arm of the other direction from
    the callback, of another fd, or from outside any callback gets a new one,
    and the delivered Event stays DONE."""
    from tailreactor.events import DONE

    r = make_reactor(clock=clock)
    (a, b), (c, d) = socketpairs(2)
    b.send(b"x")
    got = {}

    def cb(ev):
        got["write"] = r.arm(a.fileno(), WRITE, lambda e: None)
        got["other_fd"] = r.arm(c.fileno(), READ, lambda e: None)

    ev = r.arm(a.fileno(), READ, cb)
    r.run_once(1.0)
    assert got["write"] is not ev and got["other_fd"] is not ev
    assert ev.state == DONE
    outside = r.arm(a.fileno(), READ, lambda e: None)
    assert outside is not ev and ev.state == DONE


def test_arm_from_own_callback_after_close_raises(make_reactor, socketpairs):
    """The hot re-arm skips the closed check: close() must turn it off, so a
    callback that closes the reactor and then re-arms its fd gets RuntimeError."""
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    b.send(b"x")
    raised = []

    def cb(ev):
        r.close()
        try:
            r.arm(ev.fd, READ, cb)
        except RuntimeError as exc:
            raised.append(str(exc))

    r.arm(a.fileno(), READ, cb)
    r.run_once(1.0)
    assert raised == ["reactor is closed"]


def test_second_arm_from_own_callback_replaces_the_rearmed_event(make_reactor, socketpairs):
    """Two arms of the same fd and direction from its callback: the first
    re-arms the delivered Event in place, the second replaces it (a new Event;
    the first is cancelled and never runs)."""
    from tailreactor.events import CANCELLED

    r = make_reactor()
    ((a, b),) = socketpairs(1)
    b.send(b"x")  # never read: every arm fires at once
    calls, got = [], {}

    def cb(ev):
        calls.append("cb")
        got["first"] = r.arm(ev.fd, READ, lambda e: calls.append("first"))
        got["second"] = r.arm(ev.fd, READ, lambda e: calls.append("second"))

    ev = r.arm(a.fileno(), READ, cb)
    r.run_once(1.0)
    assert got["first"] is ev and got["second"] is not ev
    assert ev.state == CANCELLED and r.armed(a.fileno(), READ) is got["second"]
    r.run_once(1.0)
    assert calls == ["cb", "second"]


def test_arm_from_a_post_drained_inside_the_batch_gets_a_new_event(make_reactor, socketpairs):
    """A post that runs between two callbacks (drain chunk 1) and arms the fd
    the previous callback ran for is not that callback: a new Event, and the
    delivered one stays DONE."""
    from tailreactor.events import DONE

    r = make_reactor(drain_chunk=1, tail_us=0)
    (a, b), (c, d) = socketpairs(2)
    b.send(b"x")
    d.send(b"x")
    delivered, got = [], {}

    def cb(ev):
        delivered.append(ev)
        if len(delivered) == 1:
            r.post(lambda _: got.setdefault("post", r.arm(ev.fd, READ, lambda e: None)))

    r.arm(a.fileno(), READ, cb)
    r.arm(c.fileno(), READ, cb)
    assert r.run_once(1.0) == 2
    assert "post" in got, "precondition: the post ran inside the batch"
    assert got["post"] is not delivered[0] and delivered[0].state == DONE


# fd -1 is what a closed socket's fileno() returns; the reactor's "no callback is
# running" state must never take it for the fd of a running callback (fresh-eyes review).
def test_arming_fd_minus_one_raises_ebadf(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    a.close()
    with pytest.raises(OSError) as info:
        r.arm(a.fileno(), READ, lambda e: None)  # a closed socket's fileno() is -1
    assert info.value.errno == errno.EBADF and "-1" in str(info.value)


def test_fd_minus_one_gets_the_same_checks_as_any_fd(make_reactor):
    r = make_reactor()
    with pytest.raises(ValueError):
        r.arm(-1, 7, lambda e: None)
    r.close()
    with pytest.raises(RuntimeError):
        r.arm(-1, READ, lambda e: None)


def test_a_callback_that_closes_the_reactor_then_arms_fd_minus_one_leaves_its_event_alone(
    make_reactor, socketpairs
):
    from tailreactor.events import DONE

    r = make_reactor()
    (a, b), (c, d) = socketpairs(2)
    c.close()
    b.send(b"x")
    out = []

    def cb(ev):
        r.close()
        with pytest.raises(RuntimeError):
            r.arm(c.fileno(), READ, lambda e: None)
        out.append((ev.state, ev.callback is cb))

    r.arm(a.fileno(), READ, cb)
    r.run_once(1.0)
    assert out == [(DONE, True)]


def test_a_nested_round_is_refused_with_a_message_saying_what_to_do(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    b.send(b"x")
    msgs = []

    def cb(ev):
        for call in (lambda: r.run_once(0), r.run):
            with pytest.raises(RuntimeError) as info:
                call()
            msgs.append(str(info.value))

    r.arm(a.fileno(), READ, cb)
    assert r.run_once(1.0) == 1
    assert msgs[0].startswith("run_once() called from a callback") and msgs[1].startswith("run() called")
    assert all("not re-entrant" in m and "post()" in m for m in msgs)
