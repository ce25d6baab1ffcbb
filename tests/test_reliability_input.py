"""Issue 8, part 1: bad input and misbehaving clients against the bench server.

Every test runs on epoll and io_uring (the ``backend_name`` fixture), on real
sockets.  Where the order of events matters (what the server has read, when
it stops reading, when a timeout fires) the test drives the reactor itself
(:class:`~http_helpers.Pump`) with a :class:`~tailreactor.clock.ManualClock`,
so timeouts are crossed by advancing the clock, never by sleeping.  Simple
request/answer cases use a server thread.  Expected answers are values
(status lists, exact bytes); every test also checks the reactor's
``callback_errors`` counter stayed 0 where it drove the reactor.

The fixture files of ``fixtures/http/`` are replayed by
``tests/test_http.py::test_bad_input_fixture``.
"""

from __future__ import annotations

import socket

import pytest

from http_helpers import (
    IO_TIMEOUT_S,
    Pump,
    ServerThread,
    accept_connection,
    connect,
    get,
    read_responses,
    read_to_eof,
    rst_close,
)
from tailreactor import READ, WRITE
from tailreactor.http import Listener
from tailreactor.http import connection as conn_mod

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@pytest.fixture
def server(backend_name):
    with ServerThread(backend_name) as srv:
        yield srv
        assert srv.reactor.counters.callback_errors == 0


def headers(n: int, value_len: int) -> str:
    return "".join(f"X-H{i:03d}: {'v' * value_len}\r\n" for i in range(n))


def status_and_eof(port: int, raw: bytes) -> tuple[list[int], bool]:
    with connect(port) as c:
        c.sendall(raw)
        responses, eof = read_to_eof(c)
    return [r.status for r in responses], eof


# -- header limits: 431 -------------------------------------------------------------
def field_bytes(name: str, value: str) -> int:
    return len(name) + len(value) + 4  # what the limit counts per field: name, value, ": ", CRLF


def test_header_block_exactly_at_the_byte_limit_is_served_one_over_gets_431(server):
    host = field_bytes("Host", "t")
    name = "X-Pad"
    fill = conn_mod.MAX_HEADER_BYTES - host - field_bytes(name, "")
    at_limit = f"GET /plaintext HTTP/1.1\r\nHost: t\r\n{name}: {'a' * fill}\r\n\r\n".encode()
    over = at_limit.replace(b"a" * fill, b"a" * (fill + 1))
    with connect(server.port) as c:  # the one at the limit keeps the connection
        c.sendall(at_limit)
        assert read_responses(c, 1)[0].body == b"Hello, World!"
    assert status_and_eof(server.port, over) == ([431], True)


def test_one_header_line_of_20_kib_gets_431(server):
    raw = f"GET / HTTP/1.1\r\nHost: t\r\nCookie: {'c' * 20_480}\r\n\r\n".encode()
    assert status_and_eof(server.port, raw) == ([431], True)


def test_header_count_limit(server):
    limit = conn_mod.MAX_HEADERS
    ok = f"GET / HTTP/1.1\r\nHost: t\r\n{headers(limit - 1, 1)}\r\n".encode()
    too_many = f"GET / HTTP/1.1\r\nHost: t\r\n{headers(limit, 1)}\r\n".encode()
    assert status_and_eof(server.port, ok + get("/", headers="Connection: close\r\n")) == ([200, 200], True)
    assert status_and_eof(server.port, too_many) == ([431], True)


def test_431_comes_after_the_answers_to_earlier_pipelined_requests(server):
    big = f"GET / HTTP/1.1\r\nHost: t\r\n{headers(200, 1)}\r\n".encode()
    assert status_and_eof(server.port, get("/user/1") + get("/user/2") + big + get("/")) == (
        [200, 200, 431],
        True,
    )


def test_a_header_line_that_never_ends_is_cut_off_at_a_bounded_size(pumped):
    """httptools keeps a header line still arriving in its own buffer, out of
    the callbacks' sight; the server bounds it by the bytes it received."""
    reactor, srv, pump = pumped
    prefix = b"GET / HTTP/1.1\r\nHost: t\r\nX-Endless: "
    chunk = b"e" * 4096
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        c.sendall(prefix)
        sent = len(prefix)
        while conn.stats.requests == 0:
            c.sendall(chunk)
            sent += len(chunk)
            pump.until(lambda sent=sent: conn.stats.bytes_in == sent or conn.stats.requests)
            assert sent <= 2 * conn_mod.MAX_HEAD_BYTES, "the server kept reading an endless header line"
        assert conn_mod.MAX_HEAD_BYTES < conn.stats.bytes_in <= conn_mod.MAX_HEAD_BYTES + len(chunk)
        c.shutdown(socket.SHUT_WR)
        pump.until(lambda: conn.closed)
        responses, eof = read_to_eof(c)
    assert [r.status for r in responses] == [431] and eof


# -- request smuggling guard ----------------------------------------------------------
SMUGGLE = (
    b"POST /user HTTP/1.1\r\nHost: t\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\nGET /user/smuggled HTTP/1.1\r\nHost: t\r\n\r\n"
)


@pytest.mark.parametrize(
    "raw",
    [
        SMUGGLE,
        SMUGGLE.replace(
            b"Content-Length: 44\r\nTransfer-Encoding: chunked",
            b"Transfer-Encoding: chunked\r\nContent-Length: 44",
        ),
        b"POST /user HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhelloGET /user/smuggled HTTP/1.1\r\n\r\n",
        b"POST /user HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        b"POST /user HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nGET /user/smuggled HTTP/1.1\r\n\r\n",
    ],
    ids=["cl-then-te", "te-then-cl", "cl-twice", "te-chunked-not-last", "te-without-chunked"],
)
def test_ambiguous_framing_gets_one_400_and_close(server, raw):
    """RFC 9112 6.1/6.3: a request whose body length is ambiguous is answered
    400 and the connection closed; the smuggled request is never answered."""
    assert status_and_eof(server.port, raw) == ([400], True)


# -- chunked bodies -----------------------------------------------------------------------
CHUNKED = [
    b"5\r\nhello\r\n0\r\n\r\n",
    b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    b"A\r\n0123456789\r\n0\r\n\r\n",  # upper-case hex
    b"0005\r\nhello\r\n0\r\n\r\n",  # leading zeros
    b"5;name=value\r\nhello\r\n0;last\r\n\r\n",  # chunk extensions
    b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n",  # trailer fields
    b"0\r\n\r\n",  # empty body
]


def chunked_post(body: bytes, extra: str = "") -> bytes:
    return f"POST /user HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n{extra}\r\n".encode() + body


def test_chunked_bodies_pipelined_on_one_connection(server):
    raw = b"".join(chunked_post(b) + get(f"/user/{i}") for i, b in enumerate(CHUNKED))
    with connect(server.port) as c:
        c.sendall(raw)
        responses = read_responses(c, 2 * len(CHUNKED))
    assert [(r.status, r.body) for r in responses] == [
        x for i in range(len(CHUNKED)) for x in ((200, b""), (200, str(i).encode()))
    ]


def test_chunked_body_byte_by_byte_is_answered_once_complete(pumped):
    reactor, srv, pump = pumped
    raw = chunked_post(CHUNKED[5])
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        c.setblocking(False)
        for i in range(len(raw) - 1):
            c.send(raw[i : i + 1])
            pump.until(lambda i=i: conn.stats.bytes_in == i + 1)
            with pytest.raises(BlockingIOError):
                c.recv(1)  # no answer before the last byte
        c.send(raw[-1:])
        pump.until(lambda: conn.stats.requests == 1)
        c.setblocking(True)
        c.settimeout(IO_TIMEOUT_S)
        assert [r.status for r in read_responses(c, 1)] == [200]


def test_chunked_body_of_one_mib_is_discarded_not_buffered(server):
    body = b"".join(b"4000\r\n" + b"x" * 0x4000 + b"\r\n" for _ in range(64)) + b"0\r\n\r\n"
    with connect(server.port) as c:
        c.sendall(chunked_post(body) + get("/user/after"))
        responses = read_responses(c, 2)
    assert [(r.status, r.body) for r in responses] == [(200, b""), (200, b"after")]


# -- Expect: 100-continue (RFC 9110 10.1.1) -------------------------------------------------
def head_only(
    version: str = "1.1",
    framing: str = "Content-Length: 5",
    path: str = "/user",
    expect: str = "100-continue",
) -> bytes:
    return f"POST {path} HTTP/{version}\r\nHost: t\r\nExpect: {expect}\r\n{framing}\r\n\r\n".encode()


def recv_now(c: socket.socket) -> bytes:
    try:
        return c.recv(65536)
    except BlockingIOError:
        return b""


@pytest.mark.parametrize(
    "framing,body",
    [
        ("Content-Length: 5", b"hello"),
        ("Transfer-Encoding: chunked", b"5\r\nhello\r\n0\r\n\r\n"),
    ],
    ids=["content-length", "chunked"],
)
def test_expect_100_continue_is_sent_before_the_body_is_read(pumped, framing, body):
    """The head alone gets exactly ``100 Continue`` (the server must not wait
    for the content first); the final answer comes only after the body."""
    reactor, srv, pump = pumped
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        c.sendall(head_only(framing=framing))
        c.setblocking(False)
        interim = bytearray()

        def interim_arrived():
            interim.extend(recv_now(c))
            return len(interim) >= len(CONTINUE)

        pump.until(interim_arrived)
        assert bytes(interim) == CONTINUE
        pump.rounds(5)
        assert recv_now(c) == b"" and conn.stats.requests == 0  # no final answer yet
        c.sendall(body)
        pump.until(lambda: conn.stats.requests == 1)
        c.setblocking(True)
        c.settimeout(IO_TIMEOUT_S)
        (resp,) = read_responses(c, 1)
    assert (resp.status, resp.headers["connection"]) == (200, "keep-alive")


@pytest.mark.parametrize(
    "raw,statuses",
    [
        # The content arrived with the head: 100 may be omitted (RFC 9110 10.1.1), and is.
        (head_only() + b"hello", [200]),
        # No content will follow: no 100.
        (head_only(framing="Content-Length: 0"), [200]),
        # A GET without content: nothing to continue.
        (b"GET / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n\r\n", [200]),
        # An expectation other than 100-continue is ignored (417 is a MAY).
        (head_only(expect="something-else") + b"hello", [200]),
    ],
    ids=["body-with-head", "no-content", "get-no-body", "unknown-expectation"],
)
def test_expect_variants(server, raw, statuses):
    with connect(server.port) as c:
        c.sendall(raw + get("/", headers="Connection: close\r\n"))
        responses, eof = read_to_eof(c)
    assert [r.status for r in responses] == statuses + [200] and eof


def test_expect_on_http10_is_ignored(pumped):
    """RFC 9110 10.1.1: a server MUST ignore 100-continue in an HTTP/1.0 request."""
    reactor, srv, pump = pumped
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        c.sendall(head_only(version="1.0"))
        pump.until(lambda: conn.stats.bytes_in > 0)
        pump.rounds(5)
        c.setblocking(False)
        assert recv_now(c) == b""
        c.sendall(b"hello")
        pump.until(
            lambda: conn.stats.requests == 1
        )  # HTTP/1.0 without keep-alive: answered, then half-closed
        c.setblocking(True)
        c.settimeout(IO_TIMEOUT_S)
        responses, eof = read_to_eof(c)
    assert [r.status for r in responses] == [200] and eof


# -- request-target forms and versions ---------------------------------------------------------
@pytest.mark.parametrize(
    "target,status,body",
    [
        ("http://t/plaintext", 200, b"Hello, World!"),
        ("HTTP://T/plaintext", 200, b"Hello, World!"),  # scheme and host are case-insensitive
        ("https://t:8443/user/5?x=1", 200, b"5"),
        ("http://u:p@t/user/9", 200, b"9"),
        ("http://t", 200, b""),  # empty path means "/" (RFC 9110 4.2.3)
        ("http://t?q=1", 200, b""),
        ("http://t/nope", 404, b""),
    ],
)
def test_absolute_form_targets(server, target, status, body):
    with connect(server.port) as c:
        c.sendall(get(target))
        (resp,) = read_responses(c, 1)
        assert (resp.status, resp.body) == (status, body)
        c.sendall(get("/user/next"))  # absolute form keeps the connection
        assert read_responses(c, 1)[0].body == b"next"


@pytest.mark.parametrize("target", ["ftp://t/plaintext", "t:80", "*"])
def test_targets_without_a_served_path_get_400(server, target):
    assert status_and_eof(server.port, get(target)) == ([400], True)


@pytest.mark.parametrize(
    "raw,statuses",
    [
        (b"GET /\r\n\r\n", [505]),  # HTTP/0.9 request line, blank line
        (b"GET / HTTP/1.1\r\n\r\n", [400]),  # HTTP/1.1 without Host (RFC 9112 3.2)
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", [400]),  # two Host fields
        (b"GET / HTTP/1.0\r\n\r\n", [200]),  # HTTP/1.0 needs no Host
    ],
    ids=["http-0.9", "no-host", "two-hosts", "http-1.0-no-host"],
)
def test_versions_and_host(server, raw, statuses):
    assert status_and_eof(server.port, raw) == (statuses, True)


def test_bare_http09_line_waits_like_any_incomplete_head_then_408(pumped, clock):
    """``GET /`` + CRLF is, for the parser, a request line still waiting for its
    header section; the idle timeout ends it with 408."""
    reactor, srv, pump = pumped
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        c.sendall(b"GET /\r\n")
        pump.until(lambda: conn.stats.bytes_in == 7)
        clock.advance_ns(srv.keep_alive_ns)
        pump.until(lambda: conn.stats.requests == 1)
        responses, eof = read_to_eof(c)
    assert [r.status for r in responses] == [408] and eof


# -- a client that pipelines 1 MB and never reads ------------------------------------------------
def test_pipelining_client_that_never_reads_is_bounded_and_others_are_served(make_reactor, clock):
    """1 MB of pipelined requests from a client that never reads.

    The requests are ``GET /__probe`` (a ~1 KB answer each): the kernel
    autotunes a socket's send buffer up to ``tcp_wmem`` max (4 MiB here), which
    would swallow every answer to 1 MB of ``GET /plaintext``.  Bigger answers
    fill it, so the server's own bound has to act: at most one pass of answers
    waits in user space, and reading stops until it drains.
    """
    reactor = make_reactor(clock=clock, latency_probe=True)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    one = get("/__probe")
    total = (1 << 20) // len(one) * len(one)  # 1 MB of whole requests
    bound = srv.batch * 2048  # one pass of answers (each under 2 KiB) beyond the kernel's send buffer
    with connect(srv.port, rcvbuf=4096) as hog, connect(srv.port) as other:
        conn = accept_connection(srv, pump, hog)
        hog.setblocking(False)
        chunk = one * 256
        sent = 0
        stuck_rounds = 0
        while sent < total and stuck_rounds < 50:
            try:
                sent += hog.send(chunk[: total - sent])
                stuck_rounds = 0
            except BlockingIOError:
                stuck_rounds += 1  # the kernel buffers are full: let the server run
            pump.rounds(1, wait_s=0.001)
            assert conn.backlog_bytes <= bound
        pump.until(lambda: conn.stats.partial_sends >= 1)
        # Blocked on output: armed for WRITE only; reading has stopped short of the 1 MB.
        assert reactor.armed(conn.fd, WRITE) is not None and reactor.armed(conn.fd, READ) is None
        read_so_far = conn.stats.bytes_in
        pump.rounds(20, wait_s=0.005)
        assert conn.stats.bytes_in == read_so_far < total
        assert conn.backlog_bytes <= bound

        other_conn = accept_connection(srv, pump, other)
        other.sendall(get("/user/7"))
        pump.until(lambda: other_conn.stats.requests == 1)
        assert read_responses(other, 1)[0].body == b"7"

        rst_close(hog)  # the hog goes away with a reset: the server frees it
        pump.until(lambda: conn.closed)
        assert list(srv.connections) == [other_conn.fd]
        other.sendall(get("/user/8"))
        pump.until(lambda: other_conn.stats.requests == 2)
        assert read_responses(other, 1)[0].body == b"8"
    srv.close()
    assert reactor.counters.callback_errors == 0


def test_half_close_while_the_server_is_blocked_on_output_still_gets_every_answer(server):
    n, pad = 400, "p" * 1000  # ~500 KB of answers against a 4 KiB receive window
    with connect(server.port, rcvbuf=4096) as c:
        c.sendall(b"".join(get(f"/user/{i}-{pad}") for i in range(n)))
        c.shutdown(socket.SHUT_WR)
        responses, eof = read_to_eof(c)
    assert [r.body.split(b"-")[0] for r in responses] == [str(i).encode() for i in range(n)] and eof


def test_half_close_after_a_partial_request_closes_without_an_answer(server):
    with connect(server.port) as c:
        c.sendall(get("/user/1") + b"GET /user/2 HTTP/1.1\r\nHo")
        c.shutdown(socket.SHUT_WR)
        responses, eof = read_to_eof(c)
    assert [r.body for r in responses] == [b"1"] and eof


# -- a client that resets mid-pipeline ------------------------------------------------------------
def test_reset_mid_pipeline_frees_the_connection(make_reactor, clock):
    reactor = make_reactor(clock=clock, http_batch=8, http_yield_batch=8)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as other:
        c = connect(srv.port)
        conn = accept_connection(srv, pump, c)
        c.sendall(b"".join(get(f"/user/{i}") for i in range(64)))
        pump.until(lambda: conn.stats.continuations >= 1)
        assert conn.stats.requests < 64  # mid-pipeline: a continuation is pending
        rst_close(c)
        pump.until(lambda: conn.closed)
        assert conn.stats.requests < 64
        other_conn = accept_connection(srv, pump, other)
        other.sendall(get("/user/ok"))
        pump.until(lambda: other_conn.stats.requests == 1)
        assert read_responses(other, 1)[0].body == b"ok"
    srv.close()
    assert reactor.counters.callback_errors == 0


def test_reset_with_a_partial_request_buffered_frees_the_connection(pumped):
    reactor, srv, pump = pumped
    c = connect(srv.port)
    conn = accept_connection(srv, pump, c)
    c.sendall(b"GET /user/1 HTTP/1.1\r\nHost: t\r\nX-Half: ")
    pump.until(lambda: conn.stats.bytes_in > 0)
    rst_close(c)
    pump.until(lambda: conn.closed)
    assert srv.connections == {}


# -- slowloris and idle connections: timeouts on the reactor clock --------------------------------
def test_slowloris_head_trickled_byte_by_byte_gets_408_at_the_head_deadline(pumped, clock):
    """Each byte arrives well inside the idle timeout, so only the head deadline
    (counted from the head's first byte) can end it; a well-behaved connection
    opened alongside is untouched."""
    reactor, srv, pump = pumped
    head = b"GET / HTTP/1.1\r\nHost: t\r\n" + b"X-Slow: " + b"s" * 4096
    step_ns = srv.keep_alive_ns // 2
    with connect(srv.port) as slow, connect(srv.port) as good:
        conn = accept_connection(srv, pump, slow)
        good_conn = accept_connection(srv, pump, good)
        started = clock()
        sent = 0
        while not conn.stats.requests:
            slow.send(head[sent : sent + 1])
            sent += 1
            pump.until(lambda sent=sent: conn.stats.bytes_in == sent)
            clock.advance_ns(step_ns)
            good.sendall(get(f"/user/{sent}"))  # the other connection keeps being served
            pump.until(lambda sent=sent: good_conn.stats.requests == sent)
            assert read_responses(good, 1)[0].body == str(sent).encode()
        elapsed = clock() - started
        assert srv.headers_timeout_ns <= elapsed <= srv.headers_timeout_ns + step_ns
        slow.settimeout(IO_TIMEOUT_S)
        responses, eof = read_to_eof(slow)
        assert [r.status for r in responses] == [408] and eof
        assert responses[0].headers["connection"] == "close"
        assert not good_conn.closed


def test_idle_keep_alive_connection_is_closed_after_the_timeout(pumped, clock):
    reactor, srv, pump = pumped
    with connect(srv.port) as idle, connect(srv.port) as busy:
        idle_conn = accept_connection(srv, pump, idle)
        busy_conn = accept_connection(srv, pump, busy)
        idle.sendall(get("/"))
        pump.until(lambda: idle_conn.stats.requests == 1)
        assert read_responses(idle, 1)[0].status == 200
        for i in range(3):  # the busy one sends something every half timeout
            clock.advance_ns(srv.keep_alive_ns // 2)
            busy.sendall(get(f"/user/{i}"))
            pump.until(lambda i=i: busy_conn.stats.requests == i + 1)
            assert read_responses(busy, 1)[0].body == str(i).encode()
            if i == 0:
                assert not idle_conn.closed and reactor.armed(idle_conn.fd, READ) is not None
        # idle: silent for 1.5 timeouts -> half-closed without an answer (nothing was in progress)
        responses, eof = read_to_eof(idle)
        assert responses == [] and eof
        idle.close()
        pump.until(lambda: idle_conn.closed)
        assert not busy_conn.closed


def test_a_connection_that_never_sends_is_closed_by_the_idle_timeout(pumped, clock):
    reactor, srv, pump = pumped
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        clock.advance_ns(srv.keep_alive_ns - 1)
        pump.rounds(3)
        assert not conn.closed
        clock.advance_ns(1)
        pump.rounds(1)  # the deadline is due: this round's timer pass half-closes it
        assert read_to_eof(c) == ([], True)
        c.close()
        pump.until(lambda: conn.closed)


def test_keep_alive_timeout_zero_means_never(make_reactor, clock):
    reactor = make_reactor(clock=clock, http_keep_alive_timeout_s=0)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        clock.advance_us(86_400 * 1_000_000)
        pump.rounds(3)
        c.sendall(get("/user/still"))
        pump.until(lambda: conn.stats.requests == 1)
        assert read_responses(c, 1)[0].body == b"still"
    srv.close()


def test_mid_body_silence_gets_408(pumped, clock):
    reactor, srv, pump = pumped
    with connect(srv.port) as c:
        conn = accept_connection(srv, pump, c)
        c.sendall(b"POST /user HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhalf")
        pump.until(lambda: conn.stats.bytes_in > 0)
        clock.advance_ns(srv.keep_alive_ns)
        pump.until(lambda: conn.stats.requests == 1)
        responses, eof = read_to_eof(c)
    assert [r.status for r in responses] == [408] and eof
