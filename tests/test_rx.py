"""RX-uring: arm a receive instead of a readiness poll (``CWIST_RX_URING``, issue 9).

On io_uring, ``Reactor.arm_recv(fd, buffer, callback)`` prepares one
``IORING_OP_RECV``; its completion is the readiness report *and* the data,
so the callback does not call ``recv`` (CWIST PR #187).  ``event.result`` is
the byte count, 0 at EOF, or ``-errno``.  Backends without a receive
operation (epoll, selectors) or ``CWIST_RX_URING=0`` leave ``rx_supported``
false; the HTTP server then uses readiness plus ``recv``.  Tests of the receive path
are marked ``io_uring``: skipped with the reason where the kernel refuses it.
"""

from __future__ import annotations

import errno
import socket

import pytest

from tailreactor import Config, ConfigError, Reactor
from tailreactor.backends import READ
from tailreactor.config import load as load_config


def _reactor(backend="io_uring", **attrs):
    return Reactor(backend, config=Config.default().replace(**attrs))


def _run_until(r, predicate, rounds=200):
    for _ in range(rounds):
        if predicate():
            return True
        r.run_once(0.01)
    return predicate()


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_config_accepts_0_1_auto_and_nothing_else():
    assert load_config({}).rx_uring == "auto"
    for v in ("0", "1", "auto"):
        assert load_config({"CWIST_RX_URING": v}).rx_uring == v
    with pytest.raises(ConfigError) as info:
        load_config({"CWIST_RX_URING": "yes"})
    assert "CWIST_RX_URING" in str(info.value) and "'yes'" in str(info.value)


@pytest.mark.io_uring
def test_rx_supported_on_io_uring_unless_turned_off():
    with _reactor() as r:
        assert r.rx_supported
    with _reactor(rx_uring="0") as r:
        assert not r.rx_supported
    with _reactor("epoll") as r:
        assert not r.rx_supported


def test_arm_recv_without_support_raises_a_clear_error(pair):
    with _reactor("epoll") as r:
        with pytest.raises(RuntimeError, match="CWIST_RX_URING|epoll"):
            r.arm_recv(pair[0].fileno(), bytearray(16), lambda ev: None)


@pytest.mark.io_uring
def test_completion_carries_the_data_and_runs_once(pair):
    a, b = pair
    buf = bytearray(64)
    got = []
    with _reactor() as r:
        ev = r.arm_recv(a.fileno(), memoryview(buf), lambda e: got.append((e.result, bytes(buf[: e.result]))))
        assert ev.direction == READ
        b.send(b"hello")
        assert _run_until(r, lambda: got)
        for _ in range(3):
            r.run_once(0)
        assert got == [(5, b"hello")]  # one-shot: one completion per arm
        # The data was taken by the kernel's recv: nothing is left to read.
        with pytest.raises(BlockingIOError):
            a.recv(1)


@pytest.mark.io_uring
def test_eof_completes_with_zero(pair):
    a, b = pair
    got = []
    with _reactor() as r:
        r.arm_recv(a.fileno(), bytearray(8), lambda e: got.append(e.result))
        b.shutdown(socket.SHUT_WR)
        assert _run_until(r, lambda: got)
        assert got == [0]


@pytest.mark.io_uring
def test_rearm_from_the_callback_receives_the_next_message(pair):
    a, b = pair
    buf = bytearray(64)
    got = []
    with _reactor() as r:

        def cb(e):
            got.append(bytes(buf[: e.result]))
            if len(got) < 3:
                r.arm_recv(a.fileno(), buf, cb)

        r.arm_recv(a.fileno(), buf, cb)
        for i in range(3):
            b.send(b"m%d" % i)
            assert _run_until(r, lambda i=i: len(got) > i)
        assert got == [b"m0", b"m1", b"m2"]


@pytest.mark.io_uring
def test_rearm_from_the_callback_reuses_the_delivered_event(pair):
    """As Reactor.arm does: a receive armed from the callback of the receive
    just delivered on that fd re-arms the same Event, result reset to 0."""
    from tailreactor.events import ARMED

    a, b = pair
    buf = bytearray(64)
    seen = []
    with _reactor() as r:

        def cb(e):
            seen.append((e, e.result))
            if len(seen) == 1:
                again = r.arm_recv(a.fileno(), buf, cb)
                seen.append((again, again.result, again.state))

        first = r.arm_recv(a.fileno(), buf, cb)
        b.send(b"one")
        assert _run_until(r, lambda: len(seen) == 2)
        b.send(b"three")
        assert _run_until(r, lambda: len(seen) == 3)
    assert seen == [(first, 3), (first, 0, ARMED), (first, 5)]


@pytest.mark.io_uring
def test_disarm_cancels_a_pending_receive(pair):
    a, b = pair
    got = []
    with _reactor() as r:
        r.arm_recv(a.fileno(), bytearray(8), lambda e: got.append(e.result))
        r.run_once(0)  # submitted
        assert r.disarm(a.fileno(), READ) == 1
        r.run_once(0)  # the cancel is submitted before the data comes
        b.send(b"late")
        for _ in range(5):
            r.run_once(0.01)
        assert got == []
        assert a.recv(8) == b"late"  # the cancelled receive took nothing


@pytest.mark.io_uring
def test_arm_recv_on_a_closed_fd_raises_ebadf():
    with _reactor() as r:
        s = socket.socket()  # after the ring, so the ring cannot take the closed number
        number = s.fileno()
        s.close()
        with pytest.raises(OSError) as info:
            r.arm_recv(number, bytearray(8), lambda e: None)
        assert info.value.errno == errno.EBADF


@pytest.mark.io_uring
def test_received_events_are_stamped_and_counted_like_others(pair):
    a, b = pair
    seen = []
    with _reactor() as r:
        r.arm_recv(
            a.fileno(), bytearray(8), lambda e: seen.append((e.armed_ns > 0, e.ready_ns >= e.armed_ns))
        )
        b.send(b"x")
        assert _run_until(r, lambda: seen)
        assert seen == [(True, True)]
        assert r.counters.dispatched == 1


# -- the HTTP server on both read paths ---------------------------------------------------
@pytest.mark.parametrize("rx", ["auto", "0"])
@pytest.mark.io_uring
def test_http_keep_alive_and_pipelining_on_both_read_paths(rx):
    from http_helpers import ServerThread, connect, get, read_responses

    with ServerThread("io_uring", rx_uring=rx) as srv:
        with connect(srv.port) as c:
            for _ in range(5):
                c.sendall(get("/"))
                assert [r.status for r in read_responses(c, 1)] == [200]
            c.sendall(get("/") * 20)  # pipelined: one receive may carry them all
            assert [r.status for r in read_responses(c, 20)] == [200] * 20
            # The connection read the way the knob says (read from the test thread
            # between requests: the reactor is waiting in the kernel then).
            (conn,) = srv.listener.connections.values()
            assert conn._rx is (rx != "0")
            assert conn.stats.requests == 25


@pytest.mark.io_uring
def test_arm_recv_refuses_an_empty_buffer(pair):
    # Its completion would say 0, which means EOF (found by a fresh-eyes user test).
    with _reactor() as r:
        with pytest.raises(ValueError, match="empty"):
            r.arm_recv(pair[0].fileno(), bytearray(0), lambda e: None)
        assert r.armed(pair[0].fileno(), READ) is None


@pytest.mark.io_uring
def test_a_pipeline_longer_than_the_rx_buffer_is_read_as_one_readiness_read_would():
    from http_helpers import ServerThread, connect, get, read_responses
    from tailreactor.http.connection import RX_BYTES

    with ServerThread("io_uring", http_batch=1024, http_yield_batch=1024) as srv:
        with connect(srv.port) as c:
            raw = b"".join(get(f"/user/{i}") for i in range(200))
            assert len(raw) > 2 * RX_BYTES
            c.sendall(raw)
            assert [r.body for r in read_responses(c, 200)] == [str(i).encode() for i in range(200)]
            (conn,) = srv.listener.connections.values()
            assert conn._rx and conn.stats.requests == 200


@pytest.mark.io_uring
def test_second_arm_recv_from_the_callback_replaces_the_rearmed_receive(pair):
    """As for arm(): the first arm_recv from the callback re-arms the delivered
    Event, a second replaces it (the first is cancelled and never runs).  The
    next bytes are sent once the kernel has the cancel (flush): a receive
    replaced before that may take bytes already queued (``Reactor.arm_recv``)."""
    from tailreactor.events import CANCELLED

    a, b = pair
    buf, buf2 = bytearray(64), bytearray(64)
    calls, got = [], {}
    with _reactor() as r:

        def cb(ev):
            calls.append(("cb", bytes(buf[: ev.result])))
            got["first"] = r.arm_recv(ev.fd, buf, lambda e: calls.append("first"))
            got["second"] = r.arm_recv(
                ev.fd, buf2, lambda e: calls.append(("second", bytes(buf2[: e.result])))
            )

        ev = r.arm_recv(a.fileno(), buf, cb)
        b.send(b"one")
        assert _run_until(r, lambda: len(calls) == 1)
        assert got["first"] is ev and got["second"] is not ev and ev.state == CANCELLED
        assert r.armed(a.fileno(), READ) is got["second"]
        r.flush()
        b.send(b"two")
        assert _run_until(r, lambda: len(calls) == 2), calls
    assert calls == [("cb", b"one"), ("second", b"two")]


@pytest.mark.io_uring
def test_arm_recv_after_close_raises_runtimeerror_whatever_the_buffer():
    r = _reactor()
    r.close()
    for buf in (bytearray(0), bytearray(8)):
        with pytest.raises(RuntimeError, match="closed"):
            r.arm_recv(5, buf, lambda e: None)
