"""HTTP clauses H1-H4: the bench HTTP server (``tailreactor.http``) on the
reactor and backend under test, real TCP on 127.0.0.1.

The test thread pumps the reactor round by round (no server thread), so it can
look at the connection's counters between rounds; H4 uses a ManualClock to
make a connection "aged" deterministically.  Skipped, with the reason, when
``tailreactor.http`` is not importable.
"""

from __future__ import annotations

import select
import socket

import httptools
import pytest

from tailreactor_conformance.harness import LIVENESS_S, run_until

http = pytest.importorskip("tailreactor.http", reason="tailreactor.http (the HTTP server) is not there yet")


def readable(sock: socket.socket) -> bool:
    """Bytes arrived on ``sock`` (it has a timeout: no MSG_DONTWAIT). poll(2), not select(2):
    select refuses an fd numbered past FD_SETSIZE, which a process with many fds open has."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode()


class Responses:
    """Parses what a client received into (status, body) pairs with httptools."""

    def __init__(self):
        self.done: list[tuple[int, bytes]] = []
        self._body = b""
        self._parser = httptools.HttpResponseParser(self)

    def on_message_begin(self):
        self._body = b""

    def on_body(self, body: bytes):
        self._body += body

    def on_message_complete(self):
        self.done.append((self._parser.get_status_code(), self._body))

    def read(self, sock: socket.socket, n: int) -> list[tuple[int, bytes]]:
        while len(self.done) < n:
            data = sock.recv(65536)
            if not data:
                break
            self._parser.feed_data(data)
        return self.done


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=LIVENESS_S)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def connection_of(listener, client: socket.socket):
    return next(c for c in listener.connections.values() if c.peer == client.getsockname())


@pytest.fixture
def server(make_reactor):
    """``server(clock=None, **config)`` -> (reactor, listener) on an ephemeral port."""
    made = []

    def start(clock=None, **attrs):
        r = make_reactor(clock=clock, **attrs)
        listener = http.Listener(r, "127.0.0.1", 0)
        made.append(listener)
        return r, listener

    yield start
    for listener in made:
        listener.close()


# -- H1 ------------------------------------------------------------------------
@pytest.mark.clause("H1")
def test_second_connection_is_answered_before_a_256_request_pipeline_ends(server):
    r, srv = server()
    with connect(srv.port) as a, connect(srv.port) as b:
        run_until(r, lambda: len(srv.connections) == 2)
        a.sendall(b"".join(get(f"/user/{i}") for i in range(256)))
        b.sendall(get("/plaintext"))
        conn_a = connection_of(srv, a)
        served_a = []

        def b_answered():
            if readable(b):
                served_a.append(conn_a.stats.requests)
                return True
            return False

        run_until(r, b_answered)
        assert served_a, "the second connection was never answered"
        assert served_a[0] < 256, "the second connection waited for the whole pipeline"
        assert Responses().read(b, 1) == [(200, b"Hello, World!")]
        run_until(r, lambda: conn_a.stats.requests == 256)
        assert [body for _, body in Responses().read(a, 256)] == [str(i).encode() for i in range(256)]


# -- H2 ------------------------------------------------------------------------
@pytest.mark.clause("H2")
@pytest.mark.parametrize("batch,yield_batch", [(16, 16), (64, 8)])
def test_no_callback_serves_more_than_the_batch(server, batch, yield_batch):
    r, srv = server(tail_us=0, http_batch=batch, http_yield_batch=yield_batch)
    with connect(srv.port) as c:
        run_until(r, lambda: srv.connections)
        conn = connection_of(srv, c)
        c.sendall(b"".join(get(f"/user/{i}") for i in range(200)))
        run_until(r, lambda: conn.stats.requests == 200)
        assert len(Responses().read(c, 200)) == 200
        s = conn.stats
        assert s.max_pass == min(batch, yield_batch), f"largest pass {s.max_pass}"
        assert s.late_passes == 0


# -- H3 ------------------------------------------------------------------------
@pytest.mark.clause("H3")
def test_pipelined_responses_arrive_once_each_in_request_order(server):
    r, srv = server()
    with connect(srv.port) as a, connect(srv.port) as b:
        run_until(r, lambda: len(srv.connections) == 2)
        ca, cb = connection_of(srv, a), connection_of(srv, b)
        for chunk in range(4):  # interleaved pipelines on two connections
            a.sendall(b"".join(get(f"/user/a{chunk}-{i}") for i in range(50)))
            b.sendall(b"".join(get(f"/user/b{chunk}-{i}") for i in range(50)))
        run_until(r, lambda: ca.stats.requests == cb.stats.requests == 200)
        for name, sock in (("a", a), ("b", b)):
            got = Responses().read(sock, 200)
            want = [(200, f"{name}{chunk}-{i}".encode()) for chunk in range(4) for i in range(50)]
            assert got == want


# -- H4 ------------------------------------------------------------------------
@pytest.mark.clause("H4")
@pytest.mark.parametrize("aged", [True, False], ids=["aged", "fresh"])
def test_late_connection_is_served_up_to_the_batch_without_a_continuation(server, clock, aged):
    r, srv = server(clock=clock, tail_us=1000, http_batch=64, http_yield_batch=8)
    with connect(srv.port) as c:
        run_until(r, lambda: srv.connections)
        conn = connection_of(srv, c)
        if aged:
            clock.advance_us(1000)  # the connection's read event has waited TAIL_US
        posts_before = r.counters.posts_run
        c.sendall(b"".join(get(f"/user/{i}") for i in range(64)))
        run_until(r, lambda: conn.stats.requests == 64)
        assert [body for _, body in Responses().read(c, 64)] == [str(i).encode() for i in range(64)]
        s = conn.stats
        if aged:
            assert (s.passes, s.max_pass, s.late_passes, s.continuations) == (1, 64, 1, 0)
            assert r.counters.posts_run == posts_before
        else:
            assert (s.max_pass, s.late_passes, s.continuations) == (8, 0, 7)
