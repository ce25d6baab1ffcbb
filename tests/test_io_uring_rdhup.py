"""WRITE after the peer's half-close, send buffer full (issue 41's B15 finding on io_uring).

The peer's ``shutdown(SHUT_WR)`` makes our socket RDHUP, which is READ's
readiness, not WRITE's: with the send buffer full, an armed WRITE must not be
reported, and re-armed it must not spin.  io_uring's POLL_ADD always watches
RDHUP (the kernel adds it to every poll's mask), so a one-shot WRITE poll
completes at once with RDHUP alone, and again at once when re-armed; the
backend must take such a completion as no report and go on waiting for room
(module docstring of ``tailreactor.backends.io_uring``, "A WRITE poll and the
peer's half-close").  Counted, not timed: the waits have a timeout so that a
backend that spins shows it as reports and completions, not as time.  Then the
same over an interrupt at any bytecode of those waits (R21), and in the HTTP
server: a client that half-closes and stops reading while answers are pending.
"""

from __future__ import annotations

import socket

import pytest

from limits import socketpair_list
from tailreactor.backends import WRITE, create_backend
from tailreactor.backends.base import OUT
from tailreactor_conformance.harness import fill_send_buffer
from test_reactor_interrupts import WAIT_TRACED, Interrupter, _wait_window

BACKENDS = [
    "epoll",
    pytest.param("io_uring", marks=pytest.mark.io_uring),
    "selectors",
]  # as tests/conftest.py

#: Waits a spinning backend would turn into as many reports.
WAITS = 6


@pytest.fixture(params=BACKENDS)
def backend(request):
    b = create_backend(request.param)
    yield b
    b.close()


def _half_closed_and_full(socketpairs):
    """(ours, peer) from ``socketpairs``: our send buffer full, the peer's writing side shut
    (RDHUP for us)."""
    ((ours, peer),) = socketpairs(1)
    fill_send_buffer(ours)
    peer.shutdown(socket.SHUT_WR)
    return ours, peer


def _drain(sock: socket.socket) -> None:
    while True:
        try:
            if not sock.recv(1 << 20):
                return
        except BlockingIOError:
            return


def _completions(b) -> int:
    """Completions io_uring took off its ring so far; 0 for the other backends (no ring)."""
    return b.stats().get("cqe", 0) if b.name == "io_uring" else 0


def _rounds(b, fd: int, token: str) -> list[tuple[str, int]]:
    """WAITS waits of 10 ms, each report re-armed as the reactor does: what was reported."""
    got = []
    for _ in range(WAITS):
        for tok, rev in b.wait(0.01):
            got.append((tok, rev))
            b.arm(fd, WRITE, tok)
    return got


def test_write_after_the_peers_half_close_is_not_reported_until_room_and_does_not_spin(backend, socketpairs):
    b = backend
    ours, peer = _half_closed_and_full(socketpairs)
    fd = ours.fileno()
    b.arm(fd, WRITE, "write")
    got = _rounds(b, fd, "write")
    assert got == [], (
        f"{b.name}: reported {', '.join(f'{t} (revents {r:#x})' for t, r in got)} over {WAITS} "
        f"waits: the peer's shutdown (RDHUP alone) made no room in a full send buffer"
    )
    # io_uring: the one-shot poll's RDHUP completion and the multishot's first leg, no more.
    assert _completions(b) <= 2, f"{_completions(b)} completions over {WAITS} waits: the WRITE poll spins"

    b.arm(fd, WRITE, "write 2")  # re-armed while armed: replaces the wait for room
    before = _completions(b)
    assert _rounds(b, fd, "write 2") == []
    # io_uring: the replaced poll's -ECANCELED, the new one-shot's RDHUP, the new multishot's first leg.
    assert _completions(b) - before <= 3, "the re-armed WRITE poll spins"

    _drain(peer)  # room again
    got = b.wait(1.0)
    assert [t for t, _ in got] == ["write 2"] and got[0][1] & OUT, got
    assert b.wait(0.01) == [] and b.wait(0.01) == []  # reported once; a one-shot arming is over

    # The arming's wait for room ended with its report (io_uring: its multishot cancelled):
    # more room made and taken gives no completion and no report.
    settled = _completions(b)
    for _ in range(3):
        ours.send(b"x" * 4096)
        _drain(peer)
        assert b.wait(0.01) == []
    assert _completions(b) == settled, "the reported arming's poll still completes: not cancelled"


def test_a_disarmed_write_waiting_for_room_after_the_peers_half_close_stays_quiet(backend, socketpairs):
    b = backend
    ours, peer = _half_closed_and_full(socketpairs)
    fd = ours.fileno()
    b.arm(fd, WRITE, "write")
    assert _rounds(b, fd, "write") == []
    b.disarm(fd, WRITE)
    assert b.wait(0.01) == []  # io_uring: the cancel and its -ECANCELED
    settled = _completions(b)
    _drain(peer)  # room: nothing armed to report it
    assert b.wait(0.01) == [] and b.wait(0.01) == []
    assert _completions(b) == settled, "the disarmed WRITE's poll still completes: not cancelled"
    b.arm(fd, WRITE, "again")  # armed anew with room: reported once
    assert [t for t, _ in b.wait(1.0)] == ["again"]
    assert b.wait(0.01) == []


# -- an interrupt at any bytecode of the wait for room (clause R21) ------------------
# As tests/test_reactor_interrupts.py's sweep of the backend's wait, over the
# half-close path: KeyboardInterrupt at one traced bytecode per trial, from the
# first wait (the one-shot's RDHUP, the multishot) to the report after the peer
# read.  Nothing may be reported before there is room, and the report must come
# (twice at worst: listed, then interrupted before forgotten; the reactor runs
# only ARMED events).  Left out: the windows that sweep leaves out (ring.wait's
# return); an interrupt between a prepare and its store is not left out: it may
# leave a multishot the backend does not know (its completions are dropped as
# stale), never a report lost.
ROOM_TRACED = WAIT_TRACED | {"_wait_for_room", "_end_watch"}


def _room_trial(k: int) -> tuple[bool, list, list]:
    """Raise at the k-th traced bytecode; (raised, reports before room, reports after)."""
    from tailreactor.backends import io_uring as uring_mod

    made: list[socket.socket] = []
    b = create_backend("io_uring")
    try:
        ours, peer = _half_closed_and_full(lambda n: socketpair_list(n, made))
        window = _wait_window(b)
        interrupter = Interrupter(
            k,
            ROOM_TRACED,
            {uring_mod.__file__},
            skip=lambda frame: (frame.f_code.co_name, frame.f_lineno) in window,
        )
        b.arm(ours.fileno(), WRITE, "write")
        before: list = []
        for _ in range(3):
            interrupter.run(lambda: before.extend(b.wait(0.005)))
        _drain(peer)
        after: list = []
        for _ in range(20):  # a bound reached only when the report is lost
            interrupter.run(lambda: after.extend(b.wait(0.05)))
            if after:
                break
        after.extend(b.wait(0.005))
        return interrupter.fired, before, after
    finally:
        b.close()
        for s in made:
            s.close()


@pytest.mark.io_uring
def test_an_interrupt_at_any_bytecode_of_the_wait_for_room_loses_no_report():
    k = 0
    while True:
        raised, before, after = _room_trial(k)
        assert before == [], f"interrupt at traced bytecode {k}: reported before room: {before}"
        assert 1 <= len(after) <= 2 and all(t == "write" and r & OUT for t, r in after), (
            f"interrupt at traced bytecode {k}: after the peer read, reported {after}"
        )
        if not raised:
            break
        k += 1
    assert k > 50, f"precondition: the waits executed only {k} traced bytecodes"


# -- the HTTP server: a client that half-closes and stops reading ------------------
def test_a_client_that_half_closes_and_stops_reading_does_not_make_the_server_spin(make_reactor):
    """The client sends its requests, shuts its writing side and reads nothing while answers
    are pending: the server waits for room (its WRITE armed), running no callback, until the
    client reads; then every answer arrives.  Rounds of 10 ms, counted: a server that spins
    runs a WRITE callback in each."""
    from http_helpers import Pump
    from tailreactor.http import Listener

    reactor = make_reactor()
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    try:
        _half_close_and_stop_reading(reactor, srv, pump)
    finally:
        srv.close()


def _half_close_and_stop_reading(reactor, srv, pump) -> None:
    from http_helpers import ResponseReader, connect, get, only_connection

    with connect(srv.port, rcvbuf=4096) as c:
        pump.until(lambda: srv.connections)
        conn = only_connection(srv)
        with socket.fromfd(conn.fd, socket.AF_INET, socket.SOCK_STREAM) as server_side:
            server_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # full after a few answers
        request = get("/user/" + "x" * 2000)  # a 2 KB answer
        sent = 0
        while not conn.backlog_bytes:  # until the server holds answers the kernel would not take
            c.sendall(request)
            sent += 1
            pump.rounds(3, 0.01)
        c.shutdown(socket.SHUT_WR)
        pump.rounds(3, 0.01)  # the server reads the end of the requests
        assert conn.backlog_bytes, "precondition: answers pending in the server"
        before = reactor.counters.dispatched
        pump.rounds(WAITS, 0.01)
        ran = reactor.counters.dispatched - before
        assert ran == 0, f"{ran} callbacks in {WAITS} rounds while the client reads nothing: the server spins"

        reader = ResponseReader()

        def read_all() -> bool:  # the client reads at last: room for the server again
            try:
                reader.feed(c.recv(1 << 20, socket.MSG_DONTWAIT))
            except BlockingIOError:
                pass
            return len(reader.done) >= sent

        pump.until(read_all, wait_s=0.01)
        assert [r.status for r in reader.done] == [200] * sent
        pump.until(lambda: not srv.connections, wait_s=0.01)  # all answered, the client's EOF: closed
