"""Issue 8, part 2: an fd closed by someone else while it is armed.

The reactor cannot see a ``close`` it did not make; what happens next is the
kernel interface's doing, and differs (documented in the backend docstrings):

* **epoll** -- the registration belongs to the open file, so closing the last
  descriptor of the file removes it silently: the event is never reported and
  the peer sees the close at once.  The reactor still lists the event as armed
  until something disarms or re-arms that fd number.
* **io_uring** -- a pending ``POLL_ADD`` holds its own reference to the file,
  so the socket stays open (the peer sees no FIN) until the poll completes --
  then the callback runs for an fd number that is closed (or reused!) -- or is
  cancelled by ``disarm``, a re-arm of the same number, or closing the reactor.

The tests pin both behaviours and then show the bench server survives them:
no callback error, nothing left in its table, the other clients served.
(A killed worker process: ``tests/test_http.py::test_killed_worker_leaves_the_others_serving``.)
"""

from __future__ import annotations

import os
import select
import socket

import pytest

from http_helpers import IO_TIMEOUT_S, accept_connection, connect, get, read_responses, read_to_eof
from tailreactor import READ


def readable(sock: socket.socket, timeout_s: float) -> bool:
    return bool(select.select([sock], [], [], timeout_s)[0])


def sees_close(sock: socket.socket) -> str:
    """What a peer reads now that the other end is gone: ``eof`` or ``reset``."""
    try:
        return "eof" if sock.recv(1) == b"" else "data"
    except ConnectionResetError:
        return "reset"


# A negative check ("no FIN has arrived"): on loopback a FIN is delivered within
# the close call, so a short wait is ample; it bounds the test, it is not a sync.
NO_FIN_WAIT_S = 0.05


def test_fd_closed_while_armed_per_backend(make_reactor, backend_name):
    reactor = make_reactor()
    a, peer = socket.socketpair()
    fd = a.detach()
    fstat_errors: list[int] = []

    def on_read(ev):
        try:
            os.fstat(ev.fd)
        except OSError as exc:
            fstat_errors.append(exc.errno)

    reactor.arm(fd, READ, on_read)
    reactor.run_once(0)  # io_uring: the POLL_ADD reaches the kernel with this wait
    os.close(fd)  # behind the reactor's back
    reactor.run_once(0)
    if backend_name == "epoll":
        assert readable(peer, 5) and sees_close(peer) == "eof"  # the file really closed
        with pytest.raises(OSError):
            peer.send(b"x")  # EPIPE or ECONNRESET: nobody on the other side
        assert reactor.run_once(0.01) == 0 and fstat_errors == []  # never reported...
        assert reactor.armed(fd, READ) is not None  # ...but still listed as armed
        assert reactor.disarm(fd) == 1  # disarm cleans up, no error
    else:
        assert not readable(peer, NO_FIN_WAIT_S)  # the ring's poll keeps the socket open
        peer.send(b"x")
        # The poll completes, but the fd no longer names the file the arm checked: the report
        # is dropped (clause B5), the callback never runs for the closed fd.
        assert reactor.run_once(5) == 0 and fstat_errors == []
        assert reactor.armed(fd, READ) is not None  # still listed as armed, as on epoll
        # The completed poll dropped the last reference: the socket closes now,
        # with our unread byte in it, so the peer gets RST.
        assert readable(peer, 5) and sees_close(peer) == "reset"
        assert reactor.disarm(fd) == 1
    assert reactor.counters.callback_errors == 0
    peer.close()


@pytest.mark.parametrize("cleanup", ["disarm", "reactor-close"])
def test_fd_closed_while_armed_is_released_by_disarm_or_reactor_close(make_reactor, backend_name, cleanup):
    """The cure on both backends: after the accident, disarming (or closing the
    reactor) releases everything -- the peer sees the close, nothing stays armed."""
    reactor = make_reactor()
    a, peer = socket.socketpair()
    fd = a.detach()
    reactor.arm(fd, READ, lambda ev: None)
    reactor.run_once(0)
    os.close(fd)
    if cleanup == "disarm":
        assert reactor.disarm(fd) == 1
        reactor.run_once(0)  # io_uring: the cancel is submitted with this wait
        assert reactor.armed(fd, READ) is None
    else:
        reactor.close()
    assert readable(peer, 5) and sees_close(peer) == "eof"
    peer.close()


# -- the bench server ----------------------------------------------------------------------
def test_connection_fd_closed_behind_the_server_and_reused_by_accept(pumped, backend_name, caplog):
    """The listener sees the number come back from accept while the old
    connection still holds it: the old one is abandoned (disarmed, socket
    object detached so it can never close the newcomer's fd)."""
    reactor, srv, pump = pumped
    victim = connect(srv.port)
    old = accept_connection(srv, pump, victim)
    victim.sendall(get("/user/1"))
    pump.until(lambda: old.stats.requests == 1)
    assert read_responses(victim, 1)[0].body == b"1"

    fd = old.fd
    # accept() takes the lowest free number: fill any hole below ours (left by
    # earlier tests in this process), so the number we free is the lowest.
    fillers = []
    while (spare := os.open(os.devnull, os.O_RDONLY)) < fd:
        fillers.append(spare)
    os.close(spare)
    newcomer = socket.socket()  # created first, so it does not take the freed number
    newcomer.settimeout(IO_TIMEOUT_S)
    try:
        os.close(fd)
        newcomer.connect(("127.0.0.1", srv.port))
        pump.until(lambda: srv.stats.accepts == 2)
    finally:
        for spare in fillers:
            os.close(spare)
    new = srv.connections.get(fd)
    assert new is not None and new is not old, "precondition: accept reused the freed fd number"
    assert old.closed and old.sock.fileno() == -1  # detached, not closed by us
    assert [r.levelname for r in caplog.records if "behind the server's back" in r.getMessage()] == [
        "WARNING"
    ]

    newcomer.sendall(get("/user/2"))
    pump.until(lambda: new.stats.requests == 1)
    assert read_responses(newcomer, 1)[0].body == b"2"
    # The victim's socket is closed for good on both backends (io_uring: the
    # abandon's disarm cancelled the poll that held it; submitted by a wait).
    pump.rounds(1)
    assert readable(victim, 5) and sees_close(victim) == "eof"
    assert list(srv.connections) == [fd]
    victim.close()
    newcomer.close()


@pytest.mark.parametrize("then", ["client-sends", "idle-timeout"])
def test_connection_fd_closed_behind_the_server_is_cleaned_up(pumped, backend_name, clock, then):
    """Nobody reuses the number: the connection is found dead by the next event
    that reaches it (io_uring: the client's bytes complete the poll) or, failing
    that, by its idle deadline (epoll never reports it)."""
    reactor, srv, pump = pumped
    with connect(srv.port) as victim:
        conn = accept_connection(srv, pump, victim)
        os.close(conn.fd)
        if then == "client-sends":
            try:
                victim.sendall(get("/user/lost"))  # epoll: the socket is gone; io_uring: the poll fires
            except OSError:
                pass
            if backend_name == "io_uring":
                pump.until(lambda: conn.closed)  # the read callback met EBADF and closed it
            else:
                pump.rounds(3)
                assert not conn.closed  # epoll never reports it: only the deadline finds it
        if not conn.closed:
            clock.advance_ns(srv.keep_alive_ns)
            pump.until(lambda: conn.closed)  # the idle deadline met EBADF on shutdown and closed it
        assert srv.connections == {}
        victim.settimeout(IO_TIMEOUT_S)
        assert read_to_eof(victim)[0] == []
    with connect(srv.port) as after:
        fresh = accept_connection(srv, pump, after)
        after.sendall(get("/user/ok"))
        pump.until(lambda: fresh.stats.requests == 1)
        assert read_responses(after, 1)[0].body == b"ok"
