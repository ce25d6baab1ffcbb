"""The bench HTTP server (tailreactor.http) on real sockets, on each backend.

In-process tests run the Listener on a real Reactor (a thread, or pumped round
by round from the test with a ManualClock); process tests run the real
``tailreactor-bench`` entry point.  Every test touching a backend is
parametrized over epoll and io_uring (the ``backend_name`` fixture).
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import threading
import time

import pytest

from http_helpers import (
    DENY_IO_URING,
    FIXTURES,
    IO_TIMEOUT_S,
    Pump,
    ServerThread,
    bench_env,
    connect,
    exchange,
    get,
    only_connection,
    parse_responses,
    read_responses,
    read_to_eof,
    read_to_eof_raw,
    run_bench,
    start_bench,
)
from tailreactor import READ, WRITE
from tailreactor.http import Listener
from tailreactor.http import listener as listener_mod

BAD_INPUTS = json.loads((FIXTURES / "bad-inputs.json").read_text())


@pytest.fixture
def server(backend_name):
    with ServerThread(backend_name) as srv:
        yield srv


# -- routes -------------------------------------------------------------------
ROUTES = [
    # (request, status, body, extra headers expected)
    (get("/"), 200, b"", {"content-length": "0"}),
    (get("/user/42"), 200, b"42", {"content-length": "2"}),
    (get("/user/abc?x=1"), 200, b"abc", {}),
    (get("/slow/42"), 200, b"42", {"content-length": "2"}),  # CWIST_BENCH_SLOW_US=0: not slow
    (get("/service/20/42"), 200, b"42", {"content-length": "2"}),  # CWIST_BENCH_SERVICE_ROUTE=0: free
    (get("/service/x/42"), 404, b"", {}),  # the cost is decimal microseconds
    (get("/service/1000001/42"), 404, b"", {}),  # at most 1 s, as the other bench knobs
    (get("/service/20/"), 404, b"", {}),
    (get("/service/20/4/2"), 404, b"", {}),
    (b"POST /user HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello", 200, b"", {"content-length": "0"}),
    (
        b"POST /user HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        200,
        b"",
        {},
    ),
    (b"POST /user HTTP/1.1\r\nHost: t\r\n\r\n", 200, b"", {}),
    (get("/plaintext"), 200, b"Hello, World!", {"content-type": "text/plain"}),
    (get("http://t/plaintext"), 200, b"Hello, World!", {}),  # absolute-form target
    (get("/nope"), 404, b"", {}),
    (get("/user/"), 404, b"", {}),
    (get("/user/1/2"), 404, b"", {}),
    (get("/__probe"), 404, b"", {}),  # no probe on this reactor
    (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 405, b"", {"allow": "GET, HEAD"}),
    (get("/user"), 405, b"", {"allow": "POST"}),
    (b"DELETE /user/1 HTTP/1.1\r\nHost: t\r\n\r\n", 405, b"", {"allow": "GET, HEAD"}),
]


def test_every_route(server):
    # One connection for all routes: every answer keeps the connection alive.
    with connect(server.port) as c:
        for raw, status, body, headers in ROUTES:
            c.sendall(raw)
            (resp,) = read_responses(c, 1)
            assert (resp.status, resp.body) == (status, body), raw
            for name, value in headers.items():
                assert resp.headers.get(name) == value, (raw, name)
            assert "connection" not in resp.headers or resp.headers["connection"] == "keep-alive"


def head(path: str, *, headers: str = "") -> bytes:
    """A HEAD request in wire form."""
    return f"HEAD {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode()


#: Every route and answer kind: GET's 200s, a POST-only path (405), no such path (404).
HEAD_PATHS = [
    "/",
    "/plaintext",
    "/user/42",
    "/user/abc?x=1",
    "http://t/plaintext",
    "/user",
    "/nope",
    "/user/1/2",
    "/__probe",
]


def head_fields(raw: bytes) -> tuple[bytes, dict[str, str]]:
    """(status line, {lower-case name: value}) of one response head ending in a blank line."""
    status, *lines = raw.decode().split("\r\n")[:-2]
    return status.encode(), {n.lower(): v.strip() for n, _, v in (ln.partition(":") for ln in lines)}


def read_head_then_responses(sock, n: int) -> tuple[bytes, bytes]:
    """Read a HEAD's answer (the head alone) and then ``n`` complete responses: (head, the rest)."""
    raw = b""
    while True:
        end = raw.find(b"\r\n\r\n")
        if end >= 0 and len(parse_responses(raw[end + 4 :])[0]) >= n:
            return raw[: end + 4], raw[end + 4 :]
        data = sock.recv(65536)
        assert data, f"closed early: {raw!r}"
        raw += data


@pytest.mark.parametrize("path", HEAD_PATHS)
def test_head_answers_as_get_without_the_body_and_the_connection_goes_on(server, path):
    # RFC 9110 9.3.2: the same status and headers as GET (Content-Length included), no content.
    # HEAD then GET in one write: answered in order, and the GET's answer starts right after the
    # head, so no body was sent; then the connection still serves.
    with connect(server.port) as c:
        c.sendall(head(path) + get(path))
        head_raw, rest = read_head_then_responses(c, 1)
        (after,) = parse_responses(rest)[0]
        c.sendall(head(path, headers="Connection: close\r\n"))
        closing, eof = read_to_eof_raw(c)
    status, fields = head_fields(head_raw)
    assert int(status.split()[1]) == after.status
    assert fields == after.headers, (fields, after.headers)
    assert fields["content-length"] == str(len(after.body))
    assert after.headers.get("connection", "keep-alive") == "keep-alive"
    assert closing.endswith(b"\r\n\r\n") and closing.count(b"\r\n\r\n") == 1 and eof == "eof"
    assert head_fields(closing) == (status, {**fields, "connection": "close"})


def test_head_and_get_pipelined_alternately_are_answered_in_order(server):
    with connect(server.port) as c:
        c.sendall(
            (head("/plaintext") + get("/user/7")) * 20 + get("/user/end", headers="Connection: close\r\n")
        )
        raw, end = read_to_eof_raw(c)
    assert end == "eof"
    for _ in range(20):
        h = raw.index(b"\r\n\r\n") + 4
        assert head_fields(raw[:h])[1]["content-length"] == "13"
        raw = raw[h:]
        g = raw.index(b"\r\n\r\n") + 4 + 1  # "7"
        (resp,), cut = parse_responses(raw[:g])
        assert resp.body == b"7" and not cut
        raw = raw[g:]
    (last,), cut = parse_responses(raw)
    assert last.body == b"end" and not cut


def test_long_target_gets_414_and_close(server):
    with connect(server.port) as c:
        c.sendall(get("/user/" + "x" * 10_000))
        responses, eof = read_to_eof(c)
    assert [r.status for r in responses] == [414]
    assert responses[0].headers["connection"] == "close" and eof


# -- pipelining, framing, HTTP versions ---------------------------------------
def test_100_pipelined_requests_in_one_write(server):
    with connect(server.port) as c:
        c.sendall(b"".join(get(f"/user/{i}") for i in range(100)))
        responses = read_responses(c, 100)
    assert [r.body for r in responses] == [str(i).encode() for i in range(100)]
    assert all(r.status == 200 for r in responses)


def test_request_split_byte_by_byte(make_reactor):
    reactor = make_reactor()
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    raw = get("/user/split")
    with connect(srv.port) as c:
        pump.until(lambda: srv.connections)
        conn = only_connection(srv)
        c.setblocking(False)
        for i, byte in enumerate(raw[:-1]):
            c.send(bytes([byte]))
            pump.until(lambda i=i: conn.stats.bytes_in == i + 1)  # the server read this byte
            with pytest.raises(BlockingIOError):
                c.recv(1)  # nothing answered before the request is complete
        c.send(raw[-1:])
        pump.until(lambda: conn.stats.requests == 1)
        c.settimeout(IO_TIMEOUT_S)
        (resp,) = read_responses(c, 1)
    assert (resp.status, resp.body) == (200, b"split")
    assert conn.stats.reads == len(raw)  # really one recv per byte
    srv.close()


def test_http10_closes_unless_keep_alive(server):
    with connect(server.port) as c:
        c.sendall(get("/plaintext", version="1.0"))
        responses, eof = read_to_eof(c)
    assert [r.status for r in responses] == [200] and eof
    assert responses[0].headers["connection"] == "close"

    with connect(server.port) as c:
        for _ in range(2):  # the connection stays open between the two
            c.sendall(get("/plaintext", version="1.0", headers="Connection: keep-alive\r\n"))
            (resp,) = read_responses(c, 1)
            assert resp.body == b"Hello, World!"
            assert resp.headers["connection"] == "keep-alive"


def test_connection_close_closes_after_the_response(server):
    with connect(server.port) as c:
        # The request after the closing one is never answered.
        c.sendall(get("/user/1", headers="Connection: close\r\n") + get("/user/2"))
        responses, eof = read_to_eof(c)
    assert [r.body for r in responses] == [b"1"]
    assert responses[0].headers["connection"] == "close" and eof


def test_half_close_after_sending_still_gets_every_answer(server):
    import socket as _s

    with connect(server.port) as c:
        c.sendall(b"".join(get(f"/user/{i}") for i in range(40)))
        c.shutdown(_s.SHUT_WR)  # the server sees EOF right behind the requests
        responses, eof = read_to_eof(c)
    assert [r.body for r in responses] == [str(i).encode() for i in range(40)] and eof


# -- bad input --------------------------------------------------------------
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c["file"] for c in BAD_INPUTS])
def test_bad_input_fixture(server, case):
    raw = (FIXTURES / case["file"]).read_bytes()
    with connect(server.port) as bystander, connect(server.port) as c:
        c.sendall(raw)
        responses, eof = read_to_eof(c)
        assert [r.status for r in responses] == case["statuses"], case["why"]
        assert eof == case["closes"]
        if responses[-1].status >= 400:
            assert responses[-1].headers["connection"] == "close"
        # The server keeps serving everyone else.
        bystander.sendall(get("/plaintext"))
        (resp,) = read_responses(bystander, 1)
        assert resp.body == b"Hello, World!"


# -- batch, yield and the late bypass (deterministic: pumped, ManualClock) ----
@pytest.mark.parametrize("aged", [True, False], ids=["aged", "fresh"])
def test_pipeline_of_64_late_bypass_or_yield(make_reactor, clock, aged):
    """Issue 3: an aged connection is served up to CWIST_HTTP_BATCH in one
    callback without a continuation; a fresh one yields every YIELD_BATCH."""
    reactor = make_reactor(clock=clock, tail_us=1000, http_batch=64, http_yield_batch=8)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as c:
        pump.until(lambda: srv.connections)
        conn = only_connection(srv)
        if aged:
            clock.advance_us(1000)  # the read event was armed 1000 us ago: aged at delivery
        posts0, elevations0 = reactor.counters.posts_run, reactor.counters.tail_elevations
        c.sendall(b"".join(get(f"/user/{i}") for i in range(64)))
        pump.until(lambda: conn.stats.passes >= 1)
        if not aged:
            # Mid-pipeline: a continuation is pending and the fd is not armed for read.
            assert conn.stats.requests == 8 and conn.stats.continuations == 1
            assert reactor.armed(conn.fd, READ) is None
        pump.until(lambda: conn.stats.requests == 64)
        responses = read_responses(c, 64)
        assert [r.body for r in responses] == [str(i).encode() for i in range(64)]
        posts = reactor.counters.posts_run - posts0
        elevations = reactor.counters.tail_elevations - elevations0
        s = conn.stats
        if aged:
            assert (s.passes, s.max_pass, s.late_passes, s.continuations) == (1, 64, 1, 0)
            assert (posts, elevations) == (0, 1)
        else:
            assert (s.passes, s.max_pass, s.late_passes, s.continuations) == (8, 8, 0, 7)
            assert (posts, elevations) == (7, 0)
        assert reactor.armed(conn.fd, READ) is not None  # re-armed as usual
    srv.close()


def test_late_bypass_still_stops_at_batch(make_reactor, clock):
    reactor = make_reactor(clock=clock, tail_us=1000, http_batch=16, http_yield_batch=4)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as c:
        pump.until(lambda: srv.connections)
        conn = only_connection(srv)
        clock.advance_us(1000)
        c.sendall(b"".join(get(f"/user/{i}") for i in range(40)))
        pump.until(lambda: conn.stats.requests == 40)
        assert [r.body for r in read_responses(c, 40)] == [str(i).encode() for i in range(40)]
    # First pass (late): 16 without yielding; the rest in continuations of 4.
    s = conn.stats
    assert (s.late_passes, s.max_pass, s.passes) == (1, 16, 1 + 24 // 4)
    srv.close()


def test_second_connection_is_served_before_a_long_pipeline_finishes(make_reactor):
    """CWIST's test_http_fairness: no callback serves more than the batch, and a
    request on another connection is not stuck behind 256 pipelined ones."""
    reactor = make_reactor()
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as a, connect(srv.port) as b:
        pump.until(lambda: len(srv.connections) == 2)
        a.sendall(b"".join(get(f"/user/{i}") for i in range(256)))
        b.sendall(get("/plaintext"))
        conn_a = next(cn for cn in srv.connections.values() if cn.peer == a.getsockname())
        b.setblocking(False)
        served_a_when_b_answered = None

        def b_answered():
            nonlocal served_a_when_b_answered
            try:
                data = b.recv(4096)
            except BlockingIOError:
                return False
            assert data.endswith(b"Hello, World!")
            served_a_when_b_answered = conn_a.stats.requests
            return True

        pump.until(b_answered, wait_s=0.5)
        pump.until(lambda: conn_a.stats.requests == 256)
        assert [r.body for r in read_responses(a, 256)] == [str(i).encode() for i in range(256)]
    assert served_a_when_b_answered < 256
    assert conn_a.stats.max_pass == 16  # CWIST_HTTP_BATCH default
    srv.close()


# -- partial sends: a client that does not read --------------------------------
def test_partial_send_arms_write_and_stops_reading(make_reactor):
    reactor = make_reactor()
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    n, pad = 1500, "p" * 2000  # ~3 MB of responses against a 4 KiB receive window
    raw = b"".join(get(f"/user/{i}-{pad}") for i in range(n))
    with connect(srv.port, rcvbuf=4096) as c:
        pump.until(lambda: srv.connections)
        conn = only_connection(srv)
        sender = threading.Thread(target=c.sendall, args=(raw,), daemon=True)
        sender.start()
        pump.until(lambda: conn.stats.partial_sends >= 1)
        # Blocked on output: armed for WRITE only, not reading more requests.
        assert reactor.armed(conn.fd, WRITE) is not None
        assert reactor.armed(conn.fd, READ) is None
        got: list = []
        reader = threading.Thread(target=lambda: got.extend(read_responses(c, n)), daemon=True)
        reader.start()
        pump.until(lambda: not reader.is_alive(), max_rounds=100_000, wait_s=0.01)
        sender.join(IO_TIMEOUT_S)
    assert [r.body.split(b"-")[0] for r in got] == [str(i).encode() for i in range(n)]
    assert conn.stats.requests == n
    srv.close()


# -- EMFILE on accept: back off on a timer, no busy loop ------------------------
def test_emfile_on_accept_backs_off_then_recovers(make_reactor, clock, caplog):
    reactor = make_reactor(clock=clock)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    clients = [connect(srv.port) for _ in range(3)]
    fillers: list[int] = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        # Leave exactly one free descriptor number below the limit.
        top = max(int(x) for x in os.listdir("/proc/self/fd"))
        while (fd := os.open("/dev/null", os.O_RDONLY)) < top:
            fillers.append(fd)
        fillers.append(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (fd + 2, hard))
        pump.until(lambda: srv.stats.accept_backoffs == 1)
        assert len(srv.connections) == 1
        callbacks = srv.stats.accept_callbacks
        pump.rounds(20)  # the clock does not move: the back-off timer is not due
        assert srv.stats.accept_callbacks == callbacks  # no busy loop
        assert reactor.armed(srv.fd, READ) is None
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in fillers:
            os.close(fd)
    clock.advance_us(listener_mod.ACCEPT_BACKOFF_US)
    pump.until(lambda: len(srv.connections) == 3)
    warnings = [r for r in caplog.records if "EMFILE" in r.getMessage() or "descriptors" in r.getMessage()]
    assert len(warnings) == 1
    for c in clients:
        c.sendall(get("/plaintext"))
    pump.until(lambda: sum(cn.stats.requests for cn in srv.connections.values()) == 3)
    for c in clients:
        assert read_responses(c, 1)[0].body == b"Hello, World!"
        c.close()
    srv.close()


def test_close_disarms_and_closes_everything(make_reactor):
    reactor = make_reactor()
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as c:
        pump.until(lambda: srv.connections)
        conn = only_connection(srv)
        fd, lfd = conn.fd, srv.fd
        srv.close()
        assert reactor.armed(fd, READ) is None and reactor.armed(lfd, READ) is None
        assert srv.connections == {}
        assert c.recv(1) == b""  # the client sees the close


# -- the probe route and the injected delay -----------------------------------
def test_probe_route_serves_the_probe_snapshot(backend_name):
    probe_mod = pytest.importorskip("tailreactor.probe")
    with ServerThread(backend_name, latency_probe=True) as srv:
        assert isinstance(srv.reactor.probe, probe_mod.LatencyProbe)
        exchange(srv.port, get("/plaintext"))
        (resp,) = exchange(srv.port, get("/__probe"))
        with connect(srv.port) as c:  # HEAD: the head alone, and the connection goes on
            c.sendall(head("/__probe") + get("/plaintext"))
            head_raw, rest = read_head_then_responses(c, 1)
    assert resp.status == 200 and resp.headers["content-type"] == "application/json"
    assert isinstance(json.loads(resp.body), dict)
    status, fields = head_fields(head_raw)
    assert status == b"HTTP/1.1 200 OK" and fields["content-type"] == "application/json"
    assert int(fields["content-length"]) > 2 and parse_responses(rest)[0][0].body == b"Hello, World!"


def test_bench_delay_busy_waits_per_request(backend_name):
    delay_us = 50_000
    with ServerThread(backend_name, bench_delay_us=delay_us) as srv:
        with connect(srv.port) as c:
            t0 = time.perf_counter()
            c.sendall(get("/") + get("/"))
            assert [r.status for r in read_responses(c, 2)] == [200, 200]
            elapsed = time.perf_counter() - t0
    # A lower bound only: a busy-wait cannot finish early, however loaded the machine.
    assert elapsed >= 2 * delay_us / 1e6


def test_bench_stall_runs_once_per_period_on_the_reactor_clock(make_reactor, clock):
    """CWIST_BENCH_STALL_US / _EVERY_MS: a timer blocks the loop once per period, start to start."""
    from tailreactor.http import Listener

    reactor = make_reactor(clock=clock, bench_stall_us=1, bench_stall_every_ms=200)
    srv = Listener(reactor, "127.0.0.1", 0)
    try:
        reactor.run_once(0)
        assert srv.stats.stalls == 0  # none before the first period ends
        clock.advance_us(199_999)
        reactor.run_once(0)
        assert srv.stats.stalls == 0
        clock.advance_us(1)
        reactor.run_once(0)
        assert srv.stats.stalls == 1
        clock.advance_us(400_000)  # at 600 ms, two periods late: one stall ...
        reactor.run_once(0)
        assert srv.stats.stalls == 2
        reactor.run_once(0)  # ... the next (due at 600) in the next round,
        assert srv.stats.stalls == 3
        reactor.run_once(0)
        assert srv.stats.stalls == 3  # then one per period again: due at 800 ms
        clock.advance_us(200_000)
        reactor.run_once(0)
        assert srv.stats.stalls == 4
    finally:
        srv.close()


@pytest.mark.parametrize(
    "attrs",
    [{"bench_stall_us": 0, "bench_stall_every_ms": 200}, {"bench_stall_us": 1000, "bench_stall_every_ms": 0}],
)
def test_bench_stall_off_unless_both_knobs_are_set(make_reactor, clock, attrs):
    from tailreactor.http import Listener

    reactor = make_reactor(clock=clock, **attrs)
    srv = Listener(reactor, "127.0.0.1", 0)
    try:
        clock.advance_us(10_000_000)
        reactor.run_once(0)
        assert srv.stats.stalls == 0
        assert reactor.counters.timers_fired == 0
    finally:
        srv.close()


def test_bench_stall_blocks_requests_for_its_length(backend_name):
    from tailreactor.clock import ManualClock

    stall_us = 50_000
    clock = ManualClock()
    with ServerThread(backend_name, clock=clock, bench_stall_us=stall_us, bench_stall_every_ms=1) as srv:
        with connect(srv.port) as c:
            c.sendall(get("/"))  # the stall is not due yet: answered without one
            assert [r.status for r in read_responses(c, 1)] == [200]
            assert srv.listener.stats.stalls == 0
            # The stall cannot start before it is due, so it starts after t0; the request
            # is sent after it is due, so the round that answers it runs the stall first
            # (or came after it).  The next stall is due 1 ms later on a clock that stands
            # still: this is the only one.
            t0 = time.perf_counter()
            clock.advance_us(1000)
            c.sendall(get("/"))
            assert [r.status for r in read_responses(c, 1)] == [200]
            elapsed = time.perf_counter() - t0
            assert srv.listener.stats.stalls == 1
    # A lower bound only: a busy-wait (on the real clock) cannot finish early.
    assert elapsed >= stall_us / 1e6


def test_bench_slow_route_busy_waits_only_there(backend_name):
    slow_us = 50_000
    with ServerThread(backend_name, bench_slow_us=slow_us) as srv:
        with connect(srv.port) as c:
            t0 = time.perf_counter()
            c.sendall(get("/slow/7") + get("/user/8"))
            answers = read_responses(c, 2)
            elapsed = time.perf_counter() - t0
    assert [(r.status, r.body) for r in answers] == [(200, b"7"), (200, b"8")]
    assert elapsed >= slow_us / 1e6  # a lower bound only: a busy-wait cannot finish early


def test_bench_service_route_busy_waits_what_the_request_names(backend_name):
    # GET /service/<us>/<id>: a traffic class's per-request service cost, carried by its requests.
    service_us = 50_000
    with ServerThread(backend_name, bench_service_route=True) as srv:
        with connect(srv.port) as c:
            t0 = time.perf_counter()
            c.sendall(get(f"/service/{service_us}/7") + get("/user/8"))
            answers = read_responses(c, 2)
            elapsed = time.perf_counter() - t0
    assert [(r.status, r.body) for r in answers] == [(200, b"7"), (200, b"8")]
    assert elapsed >= service_us / 1e6  # a lower bound only: a busy-wait cannot finish early


def test_bench_service_route_costs_nothing_unless_the_knob_is_on(backend_name, monkeypatch):
    spins = []
    monkeypatch.setattr("tailreactor.http.connection.busy_wait_ns", spins.append)
    with ServerThread(backend_name) as srv:  # CWIST_BENCH_SERVICE_ROUTE=0: answered, not charged
        with connect(srv.port) as c:
            c.sendall(get("/service/50000/7"))
            assert [(r.status, r.body) for r in read_responses(c, 1)] == [(200, b"7")]
    with ServerThread(backend_name, bench_service_route=True) as srv:
        with connect(srv.port) as c:
            c.sendall(get("/service/250/7") + get("/user/8"))
            assert [(r.status, r.body) for r in read_responses(c, 2)] == [(200, b"7"), (200, b"8")]
    assert spins == [250_000]  # the one /service/ request, in ns; /user/ is not charged


# -- the real entry point -----------------------------------------------------
@pytest.mark.parametrize(
    "name,value",
    [
        ("CWIST_REACTOR_BACKEND", "bogus"),
        ("CWIST_HTTP_BATCH", "0"),
        ("CWIST_HTTP_BATCH", "abc"),
        ("CWIST_WORKERS", "0"),
        ("CWIST_BENCH_DELAY_US", "-1"),
        ("CWIST_BENCH_STALL_US", "-1"),
        ("CWIST_BENCH_STALL_EVERY_MS", "x"),
        ("CWIST_BENCH_SLOW_US", "-1"),
        ("CWIST_BENCH_SERVICE_ROUTE", "yes"),
    ],
)
def test_config_error_exits_2_naming_the_knob(name, value):
    done = run_bench(["--port", "0"], env=bench_env(**{name: value}))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and repr(value) in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [["--port", "70000"], ["--workers", "0"], ["--port", "x"]])
def test_bad_arguments_exit_2(args):
    done = run_bench(args)
    assert done.returncode == 2 and "Traceback" not in done.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_explicit_io_uring_unavailable_exits_2_and_auto_falls_back(workers):
    env = bench_env(CWIST_REACTOR_BACKEND="io_uring")
    done = run_bench(["--port", "0", "--workers", workers], env=env, prefix=DENY_IO_URING)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "CWIST_REACTOR_BACKEND=io_uring" in lines[0], done.stderr
    assert "EPERM" in lines[0] or "Operation not permitted" in lines[0] or "seccomp" in lines[0]
    assert "Traceback" not in done.stderr

    srv = start_bench(
        ["--workers", workers], env=bench_env(CWIST_REACTOR_BACKEND="auto"), prefix=DENY_IO_URING
    )
    try:
        assert srv.backend == "epoll"
        assert exchange(srv.port, get("/plaintext"))[0].status == 200
    finally:
        code, _ = srv.stop()
    assert code == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_server_says_its_backend_serves_and_stops_on_signal(backend_name, sig):
    srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=backend_name))
    try:
        assert (srv.backend, srv.workers) == (backend_name, 1)
        with connect(srv.port) as idle:  # an open keep-alive connection must not block the stop
            assert exchange(srv.port, get("/user/9"))[0].body == b"9"
            idle.sendall(get("/"))
            assert read_responses(idle, 1)[0].status == 200
            srv.proc.send_signal(sig)
            # The drain half-closes a connection waiting for a request at once...
            assert read_to_eof(idle) == ([], True)
        # ...and the server exits as soon as the client has closed too.
        code, err = srv.wait()
    finally:
        srv.kill()
    assert code == 0, err
    assert "Traceback" not in err


def test_two_workers_serve_and_stop(backend_name):
    srv = start_bench(["--workers", "2"], env=bench_env(CWIST_REACTOR_BACKEND=backend_name))
    try:
        assert (srv.backend, srv.workers) == (backend_name, 2)
        children = [int(p) for p in open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read().split()]
        assert len(children) == 2
        for i in range(20):  # new connections: the kernel spreads them over the workers
            assert exchange(srv.port, get(f"/user/{i}"))[0].body == str(i).encode()
        code, err = srv.stop()
    finally:
        srv.kill()
    assert code == 0, err
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def listening_sockets(port: int) -> int:
    """IPv4 sockets in LISTEN state on ``port`` (from /proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[1].endswith(f":{port:04X}") and r[3] == "0A")


def test_killed_worker_leaves_the_others_serving(backend_name):
    srv = start_bench(["--workers", "2"], env=bench_env(CWIST_REACTOR_BACKEND=backend_name))
    try:
        victim, _survivor = (
            int(p) for p in open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read().split()
        )
        pidfd = os.pidfd_open(victim)  # readable once it has exited (its fds are closed by then)
        try:
            os.kill(victim, signal.SIGKILL)
            assert select.select([pidfd], [], [], IO_TIMEOUT_S)[0], "killed worker did not exit"
        finally:
            os.close(pidfd)
        # On io_uring the kernel tears a dead process's ring down asynchronously,
        # and the ring's pending POLL_ADD holds the listening socket open: for a
        # few ms it stays in the SO_REUSEPORT group and connections sent to it are
        # reset.  No event marks its removal, so watch the kernel's socket table.
        deadline = time.monotonic() + IO_TIMEOUT_S
        while listening_sockets(srv.port) > 1 and time.monotonic() < deadline:
            time.sleep(0.002)
        assert listening_sockets(srv.port) == 1
        for i in range(10):  # its listener left the SO_REUSEPORT group: all go to the survivor
            assert exchange(srv.port, get(f"/user/{i}"))[0].body == str(i).encode()
        code, err = srv.stop()
    finally:
        srv.kill()
    assert code == 1 and f"(pid {victim}) exited with signal 9" in err, err


@pytest.mark.parametrize("workers", ["1", "2"])
def test_port_in_use_exits_1_with_one_line(workers):
    import socket as _s

    with _s.socket() as taken:  # no SO_REUSEPORT: nobody may share it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_bench(["--port", str(port), "--workers", workers])
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], done.stderr


@pytest.mark.parametrize("first,second", [("1", "1"), ("2", "1"), ("1", "2"), ("2", "2")])
def test_second_server_on_a_busy_port_exits_1_instead_of_sharing_it(first, second):
    """SO_REUSEPORT lets our own workers share a port; it must not let a second server join them."""
    srv = start_bench(["--workers", first])
    try:
        done = run_bench(["--port", str(srv.port), "--workers", second])
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{srv.port}" in lines[0], done.stderr
        assert exchange(srv.port, get("/user/7"))[0].body == b"7"  # the first server still serves
        code, _ = srv.stop()
        assert code == 0
    finally:
        srv.kill()


def test_workers_stop_when_the_parent_is_killed():
    """SIGKILL cannot be forwarded: the workers must notice (PR_SET_PDEATHSIG) and stop, freeing the port."""
    import select as _select

    srv = start_bench(["--workers", "2"])
    pidfds = []
    try:
        children = [int(p) for p in open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read().split()]
        assert len(children) == 2
        pidfds = [os.pidfd_open(c) for c in children]  # readable once that process has exited
        srv.proc.kill()
        srv.proc.wait(IO_TIMEOUT_S)
        for fd in pidfds:
            assert _select.select([fd], [], [], IO_TIMEOUT_S)[0], (
                "a worker kept running after its parent died"
            )
        assert listening_sockets(srv.port) == 0
    finally:
        for fd in pidfds:
            os.close(fd)
        srv.kill()
