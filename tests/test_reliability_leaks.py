"""Issue 8, part 3: nothing leaks -- descriptors return to baseline, memory stays bounded.

The real ``tailreactor-bench`` runs as a subprocess on epoll and io_uring; its
open descriptors are counted from ``/proc/PID/fd`` and its memory read from
``VmRSS``.  After every misbehaving client of the other reliability tests
(replayed here against the real process) and after a real
``wrk -t2 -c1024 -d2s``, the descriptor count must come back to what it was
before any client connected.  A closed connection's descriptor disappears
from /proc a moment after the server decides to close, and no event says
so, hence the bounded polls (:func:`http_helpers.wait_for`).

Memory: Python keeps freed memory for reuse, so RSS after 1024 connections
need not fall back to its start; what must hold is that it is bounded and
that a second identical run does not grow it further (a leak per connection
would add ~1024 x its size every run).
"""

from __future__ import annotations

import gc
import json
import re
import resource
import shutil
import socket
import subprocess
import weakref

import pytest

from http_helpers import (
    FIXTURES,
    IO_TIMEOUT_S,
    Pump,
    bench_env,
    connect,
    get,
    open_fds,
    read_to_eof,
    rss_kib,
    rst_close,
    start_bench,
    wait_for,
)
from tailreactor.http import Listener

#: RSS a wrk run with 1024 connections may add to the idle server (KiB).
RSS_BOUND_KIB = 64 * 1024
#: Growth allowed from the first 1024-connection run to the second (KiB): allocator
#: noise, and cancelled connection timers that stay in the heap until their
#: deadline (lazy deletion, up to CWIST_HTTP_KEEP_ALIVE_TIMEOUT).  A soak
#: (benchmarks/soak.py) shows RSS levelling off after a few bursts.
RSS_SECOND_RUN_SLACK_KIB = 8 * 1024


@pytest.fixture
def bench(backend_name):
    srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=backend_name))
    try:
        yield srv
        code, err = srv.stop()
        assert code == 0 and "Traceback" not in err, err
    finally:
        srv.kill()


def _fixture_inputs():
    for case in json.loads((FIXTURES / "bad-inputs.json").read_text()):
        yield case["file"], (FIXTURES / case["file"]).read_bytes()


def send_and_read(port: int, raw: bytes) -> None:
    with connect(port) as c:
        c.sendall(raw)
        c.shutdown(socket.SHUT_WR)
        read_to_eof(c)


def endless_header(port: int) -> None:
    with connect(port) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Endless: ")
        try:
            for _ in range(64):
                c.sendall(b"e" * 4096)  # the server answers 431 and stops parsing long before the end
        except OSError:
            pass
        c.shutdown(socket.SHUT_WR)
        assert [r.status for r in read_to_eof(c)[0]] == [431]


def never_reads_then_resets(port: int) -> None:
    c = connect(port, rcvbuf=4096)
    c.setblocking(False)
    data = get("/user/" + "x" * 3000) * 700  # ~2 MB of answers it will never read
    sent = 0
    try:
        while sent < len(data):
            sent += c.send(data[sent:])
    except BlockingIOError:
        pass  # the server stopped reading: it is backed up on output
    rst_close(c)


def resets_mid_pipeline(port: int) -> None:
    c = connect(port)
    c.sendall(b"".join(get(f"/user/{i}") for i in range(500)))
    rst_close(c)


def half_closes_mid_request(port: int) -> None:
    with connect(port) as c:
        c.sendall(get("/user/1") + b"GET /user/2 HTTP/1.1\r\nHo")
        c.shutdown(socket.SHUT_WR)
        read_to_eof(c)


def expect_continue_then_leaves(port: int) -> None:
    with connect(port) as c:
        c.sendall(b"POST /user HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 99\r\n\r\n")
        assert c.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"


def connects_and_leaves(port: int) -> None:
    connect(port).close()


def many_at_once(port: int) -> None:
    socks = [connect(port) for _ in range(200)]
    for s in socks:
        s.sendall(get("/plaintext"))
    for s in socks:
        assert s.recv(4096).endswith(b"Hello, World!")
        s.close()


SCENARIOS = [
    *[(f"fixture {name}", lambda port, raw=raw: send_and_read(port, raw)) for name, raw in _fixture_inputs()],
    ("endless header line", endless_header),
    ("never reads, then resets", never_reads_then_resets),
    ("resets mid-pipeline", resets_mid_pipeline),
    ("half-closes mid-request", half_closes_mid_request),
    ("Expect: 100-continue, then leaves", expect_continue_then_leaves),
    ("connects and leaves", connects_and_leaves),
    ("200 connections at once", many_at_once),
]


def test_closed_connections_leave_nothing_behind(make_reactor, clock):
    """Every Connection object becomes garbage once closed, whatever its client
    did: nothing (reactor events, timers, posts, the table) keeps one alive."""
    reactor = make_reactor(clock=clock)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    seen: list = []

    def track():
        for conn in srv.connections.values():
            if not any(ref() is conn for ref in seen):
                seen.append(weakref.ref(conn))

    clients = []
    for _ in range(7):
        c = connect(srv.port)
        clients.append(c)
        pump.until(lambda: len(srv.connections) == len(clients))
        track()
    well, partial, reset, big, expect, idle, open_at_close = clients
    well.sendall(get("/user/1", headers="Connection: close\r\n"))
    partial.sendall(b"GET / HTTP/1.1\r\nHo")
    reset.sendall(b"".join(get(f"/user/{i}") for i in range(64)))
    big.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n" + b"X: y\r\n" * 200 + b"\r\n")
    expect.sendall(b"POST /user HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n")
    pump.until(lambda: sum(c.stats.requests for c in srv.connections.values()) >= 3)
    rst_close(reset)
    for c in (well, partial, big, expect):
        c.shutdown(socket.SHUT_WR)
    open_at_close.sendall(get("/"))
    pump.until(lambda: sum(c.stats.requests for c in srv.connections.values()) >= 4)
    clock.advance_ns(srv.keep_alive_ns - 1)
    open_at_close.sendall(get("/"))  # keeps this one from timing out
    pump.until(lambda: sum(c.stats.requests for c in srv.connections.values()) >= 5)
    clock.advance_ns(1)  # the idle one times out
    pump.until(lambda: len(srv.connections) <= 2)
    for c in clients[:-1]:
        c.close()
    pump.until(lambda: len(srv.connections) == 1)
    srv.close()  # closes the last one while it is armed for read
    pump.rounds(2)
    gc.collect()
    assert len(seen) == 7 and [ref() for ref in seen] == [None] * 7
    assert reactor.counters.callback_errors == 0
    open_at_close.close()


def test_descriptors_return_to_baseline_after_every_misbehaving_client(bench):
    pid = bench.proc.pid
    baseline = open_fds(pid)
    for name, scenario in SCENARIOS:
        scenario(bench.port)
        assert wait_for(lambda: open_fds(pid) == baseline), (
            f"after {name!r}: {open_fds(pid)} fds open, baseline {baseline}"
        )
    # ...and it still serves.
    with connect(bench.port) as c:
        c.sendall(get("/user/ok", headers="Connection: close\r\n"))
        assert [r.body for r in read_to_eof(c)[0]] == [b"ok"]


def run_wrk(port: int, connections: int, seconds: int) -> str:
    wrk = shutil.which("wrk")
    assert wrk, "wrk is not installed"
    done = subprocess.run(
        [wrk, "-t2", f"-c{connections}", f"-d{seconds}s", f"http://127.0.0.1:{port}/"],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    served = re.search(r"(\d+) requests in", done.stdout)
    assert served and int(served.group(1)) > 0, done.stdout
    return done.stdout


@pytest.mark.wrk
def test_wrk_1024_connections_descriptors_return_and_memory_is_bounded(bench):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048 <= hard or hard == resource.RLIM_INFINITY:  # wrk needs 1024 sockets (inherited limit)
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    try:
        pid = bench.proc.pid
        baseline_fds, baseline_rss = open_fds(pid), rss_kib(pid)
        out = run_wrk(bench.port, 1024, 2)
        assert "Non-2xx" not in out, out
        assert wait_for(lambda: open_fds(pid) == baseline_fds, timeout_s=IO_TIMEOUT_S), (
            f"{open_fds(pid)} fds open after wrk, baseline {baseline_fds}"
        )
        first_rss = rss_kib(pid)
        run_wrk(bench.port, 1024, 1)
        assert wait_for(lambda: open_fds(pid) == baseline_fds, timeout_s=IO_TIMEOUT_S)
        second_rss = rss_kib(pid)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    print(f"\nRSS KiB: idle {baseline_rss}, after 1024-connection run 1 {first_rss}, run 2 {second_rss}")
    assert first_rss - baseline_rss <= RSS_BOUND_KIB
    assert second_rss - first_rss <= RSS_SECOND_RUN_SLACK_KIB
