"""Backend clause B17 (optional: backends with a receive operation), checked on the backend
object itself: a receive reports its byte count once, zero at EOF, minus errno on failure.
"""

from __future__ import annotations

import errno
import socket

import pytest

from tailreactor.backends import READ
from tailreactor_conformance.harness import (
    LIVENESS_S,
    reports,
)


# -- B17 (optional: backends with a receive operation) -------------------------
def _recv_backend(make_backend):
    b = make_backend()
    if not hasattr(b, "arm_recv"):
        pytest.skip(f"{getattr(b, 'name', type(b).__name__)} has no arm_recv (optional, RX-uring)")
    return b


@pytest.mark.clause("B17")
def test_receive_reports_its_byte_count_once_with_the_data_in_the_buffer(make_backend, pairs):
    b = _recv_backend(make_backend)
    ps = pairs(8)
    bufs = [bytearray(32) for _ in ps]
    for i, (p, buf) in enumerate(zip(ps, bufs)):
        b.arm_recv(p.fd, buf, i)
    for i, p in enumerate(ps):
        p.make_readable(b"m%d" % i)
    got = reports(b, len(ps))
    assert sorted(got) == [(i, len(b"m%d" % i)) for i in range(len(ps))]
    for i, buf in enumerate(bufs):
        assert bytes(buf[: len(b"m%d" % i)]) == b"m%d" % i
    assert all(p.drain() == b"" for p in ps), "the kernel's receive must take the bytes it reports"


@pytest.mark.clause("B17")
def test_receive_reports_zero_at_eof(make_backend, pairs):
    b = _recv_backend(make_backend)
    (p,) = pairs(1)
    b.arm_recv(p.fd, bytearray(8), "eof")
    p.peer.shutdown(socket.SHUT_WR)
    assert reports(b, 1) == [("eof", 0)]


@pytest.mark.clause("B17")
def test_disarmed_receive_is_never_reported_and_takes_nothing(make_backend, pairs):
    b = _recv_backend(make_backend)
    (p,) = pairs(1)
    b.arm_recv(p.fd, bytearray(8), "cancelled")
    b.flush()
    b.disarm(p.fd, READ)
    b.flush()
    b.wait(0)
    p.make_readable(b"later")
    assert reports(b, 0) == []
    assert p.drain() == b"later"


@pytest.mark.clause("B17")
def test_arming_read_replaces_a_pending_receive(make_backend, pairs):
    b = _recv_backend(make_backend)
    (p,) = pairs(1)
    b.arm_recv(p.fd, bytearray(8), "recv")
    b.flush()
    b.wait(0)  # the receive is pending in the kernel
    b.arm(p.fd, READ, "poll")
    b.flush()
    b.wait(0)  # its cancel is processed before any byte arrives
    p.make_readable(b"x")
    got = reports(b, 1)
    assert [t for t, _ in got] == ["poll"]
    assert p.drain() == b"x"


@pytest.mark.clause("B17")
def test_a_receive_that_fails_reports_minus_errno(make_backend):
    """A receive the kernel fails reports ``-errno`` (B17), never ERR: a receive's result is a
    byte count, so a positive ERR bit would read as bytes received. A TCP reset (linger 0)
    fails the pending receive with ECONNRESET."""
    b = _recv_backend(make_backend)
    with socket.create_server(("127.0.0.1", 0)) as srv:
        cli = socket.create_connection(srv.getsockname(), timeout=LIVENESS_S)
        acc, _ = srv.accept()
        with cli:
            cli.setblocking(False)
            b.arm_recv(cli.fileno(), bytearray(8), "reset")
            b.flush()
            acc.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            acc.close()  # linger 0: RST, the receive fails with ECONNRESET
            got = reports(b, 1)
            b.disarm(cli.fileno(), READ)
    assert got == [("reset", -errno.ECONNRESET)], got
