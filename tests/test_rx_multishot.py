"""RX-uring on a multishot receive: a keep-alive request costs a completion and no submission.

For a buffer larger than ``io_uring.MULTISHOT_BYTES`` (the bench server's
connection buffer is), the io_uring backend keeps one multishot
``IORING_OP_RECV`` with provided buffers running per fd instead of preparing
a receive per arm.  The reactor still sees one-shot receives: one report per
``arm_recv``, bytes in the caller's buffer, in order, none lost; what the
kernel receives while the fd is not armed waits in the backend for the next
arm.  Real sockets, real io_uring.
"""

from __future__ import annotations

import socket

import pytest

from tailreactor import Config, Reactor
from tailreactor.backends import io_uring

pytestmark = pytest.mark.io_uring

BIG = io_uring.MULTISHOT_BYTES * 2


def _reactor():
    return Reactor("io_uring", config=Config.default())


def _run_until(r, predicate, rounds=500):
    for _ in range(rounds):
        if predicate():
            return True
        r.run_once(0.01)
    return predicate()


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_a_keep_alive_exchange_costs_no_submission_per_request(pair):
    # More exchanges than the provided-buffer group holds: its buffers are recycled.
    a, b = pair
    buf = bytearray(BIG)
    got = []
    with _reactor() as r:
        def cb(e):
            got.append(bytes(buf[:e.result]))
            r.arm_recv(a.fileno(), buf, cb)
        r.arm_recv(a.fileno(), buf, cb)
        b.send(b"m0")
        assert _run_until(r, lambda: len(got) == 1)
        sqes = r.backend.stats()["sqe"]
        n = io_uring.MULTISHOT_BUFFERS + 20
        for i in range(1, n):
            b.send(b"m%d" % i)
            assert _run_until(r, lambda: len(got) == i + 1)
        assert got == [b"m%d" % i for i in range(n)]
        assert r.backend.stats()["sqe"] == sqes


def test_bytes_received_while_not_armed_wait_for_the_next_arms_in_order(pair):
    a, b = pair
    buf = bytearray(BIG)
    got = []
    with _reactor() as r:
        def cb(e):
            got.append(bytes(buf[:e.result]))  # no re-arm
        r.arm_recv(a.fileno(), buf, cb)
        b.send(b"first")
        assert _run_until(r, lambda: len(got) == 1)
        for word in (b"one", b"two", b"three"):  # the fd is not armed: nothing is reported
            b.send(word)
            for _ in range(5):
                r.run_once(0.01)
        assert got == [b"first"]
        while len(got) < 10 and b"".join(got) != b"firstonetwothree":
            before = len(got)
            r.arm_recv(a.fileno(), buf, cb)
            assert _run_until(r, lambda: len(got) == before + 1)  # one report per arm
        assert b"".join(got) == b"firstonetwothree"


def test_a_report_never_fills_the_buffer(pair):
    # So a caller that reads the socket itself after a full buffer (the HTTP connection does)
    # never reads past bytes the ring already holds.
    a, b = pair
    buf = bytearray(BIG)
    data = bytes(range(256)) * 40
    got = []
    with _reactor() as r:
        def cb(e):
            got.append(e.result)
            if e.result > 0:
                parts.append(bytes(buf[:e.result]))
                r.arm_recv(a.fileno(), buf, cb)
        parts: list[bytes] = []
        r.arm_recv(a.fileno(), buf, cb)
        b.sendall(data)
        assert _run_until(r, lambda: sum(map(len, parts)) == len(data))
        assert b"".join(parts) == data
        assert max(got) < len(buf)


def test_eof_is_reported_once_after_the_data(pair):
    a, b = pair
    buf = bytearray(BIG)
    got = []
    with _reactor() as r:
        def cb(e):
            got.append(bytes(buf[:e.result]) if e.result > 0 else e.result)
            if e.result > 0:
                r.arm_recv(a.fileno(), buf, cb)
        r.arm_recv(a.fileno(), buf, cb)
        b.send(b"last words")
        b.shutdown(socket.SHUT_WR)
        assert _run_until(r, lambda: got and got[-1] == 0)
        assert got == [b"last words", 0]


def test_disarm_drops_the_receive_and_a_later_arm_gets_later_bytes(pair):
    a, b = pair
    buf = bytearray(BIG)
    got = []
    with _reactor() as r:
        def cb(e):
            got.append(bytes(buf[:e.result]))
        r.arm_recv(a.fileno(), buf, cb)
        b.send(b"before")
        assert _run_until(r, lambda: got == [b"before"])
        r.disarm(a.fileno())
        for _ in range(3):
            r.run_once(0.01)
        r.arm_recv(a.fileno(), buf, cb)
        b.send(b"after")
        assert _run_until(r, lambda: len(got) == 2)
        assert got == [b"before", b"after"]
