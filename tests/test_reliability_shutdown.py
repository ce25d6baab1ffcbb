"""Issue 8, part 4: stopping under load.

SIGINT/SIGTERM stops the bench server in two phases (``tailreactor.http.server``):
the listening socket closes first; then every connection answers what it has
already received, sends what it has produced and closes, for at most
``SHUTDOWN_GRACE_US`` (a second signal cuts that short); then the reactor
closes and writes the latency-probe report; exit 0.

In-process tests pin the drain itself on epoll and io_uring with a
ManualClock (the grace period is crossed by advancing it); process tests send
real signals to the real ``tailreactor-bench`` under a pipelining client and
a short wrk run.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading

import pytest

from http_helpers import (
    IO_TIMEOUT_S,
    Pump,
    ServerThread,
    bench_env,
    connect,
    get,
    parse_responses,
    read_responses,
    read_to_eof,
    read_to_eof_raw,
    start_bench,
    wait_for,
)
from tailreactor.clock import ManualClock
from tailreactor.http import Listener


def listening(port: int) -> int:
    """IPv4 sockets in LISTEN state on ``port`` (from /proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[1].endswith(f":{port:04X}") and r[3] == "0A")


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return True
    return False


def numbered_pipeline(n: int, pad: int = 3000) -> bytes:
    """``n`` requests ``GET /user/<i>-<pad>``: each answer echoes ~``pad`` bytes.

    The output has to outgrow the kernel's send buffer, which autotunes up to
    ``tcp_wmem`` max (4 MiB here) even against a 4 KiB receive window: 2000
    x 3 KB does, so the server backs up on output.
    """
    return b"".join(get(f"/user/{i}-{'p' * pad}") for i in range(n))


def check_prefix(raw: bytes) -> int:
    """``raw`` holds the answers to a prefix of :func:`numbered_pipeline`, in
    order, none cut short; return how many."""
    responses, cut_short = parse_responses(raw)
    assert not cut_short, "a response was cut off by the close"
    assert [r.body.split(b"-")[0] for r in responses] == [str(i).encode() for i in range(len(responses))]
    return len(responses)


# -- the drain, in-process ---------------------------------------------------------------------
def test_drain_closes_the_listener_half_closes_idle_and_finishes_busy(make_reactor, clock):
    reactor = make_reactor(clock=clock)
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as idle, connect(srv.port, rcvbuf=4096) as busy:
        pump.until(lambda: len(srv.connections) == 2)
        busy_conn = next(c for c in srv.connections.values() if c.peer == busy.getsockname())
        idle.sendall(get("/"))
        sender = threading.Thread(target=_send_quietly, args=(busy, numbered_pipeline(2000)), daemon=True)
        sender.start()
        pump.until(lambda: busy_conn.stats.partial_sends >= 1)
        produced = busy_conn.stats.requests  # answers produced before the stop
        assert read_responses(idle, 1)[0].status == 200

        drained = []
        assert srv.drain(lambda: drained.append(True)) is True
        assert refused(srv.port)  # the listening socket went first
        assert read_to_eof(idle) == ([], True)  # waiting for a request: half-closed at once
        got: list = []
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # read through a wider window
        reader = threading.Thread(target=lambda: got.append(read_to_eof_raw(busy)), daemon=True)
        reader.start()
        idle.close()
        pump.until(lambda: not reader.is_alive(), max_rounds=100_000, wait_s=0.01)
        raw, ending = got[0]
        assert ending == "eof"
        answered = check_prefix(raw)
        assert answered >= produced  # every answer produced before the stop was sent
        busy.close()
        pump.until(lambda: drained == [True])
        sender.join(IO_TIMEOUT_S)
    assert srv.connections == {} and reactor.counters.callback_errors == 0


def test_drain_is_bounded_by_the_grace_period_on_the_reactor_clock(backend_name):
    """A client that never reads cannot finish: the grace timer ends the drain."""
    clock = ManualClock()
    grace_us = 5_000_000
    srv = ServerThread(backend_name, clock=clock, grace_us=grace_us, latency_probe=True).__enter__()
    stuck = connect(srv.port, rcvbuf=4096)
    try:
        threading.Thread(target=lambda: _send_quietly(stuck, get("/__probe") * 8000), daemon=True).start()
        assert wait_for(lambda: any(c.stats.partial_sends for c in list(srv.listener.connections.values())))
        srv.reactor.stop()
        assert srv.draining.wait(IO_TIMEOUT_S)
        assert refused(srv.port)
        assert srv.alive and len(srv.listener.connections) == 1  # still draining: it cannot finish
        clock.advance_us(grace_us - 1)
        looked = threading.Event()
        srv.reactor.post(lambda _: looked.set())  # a round ran with the clock 1 us short of the grace
        assert looked.wait(IO_TIMEOUT_S)
        assert srv.alive and len(srv.listener.connections) == 1
        clock.advance_us(1)
        srv.reactor.post(lambda _: None)  # wake it to look at its timers again
        srv.join()
        assert srv.cut_off == 1
        stuck.settimeout(IO_TIMEOUT_S)
        try:
            while stuck.recv(65536):
                pass  # what was sent before the cut, then EOF or RST
        except ConnectionResetError:
            pass
    finally:
        stuck.close()
        srv.__exit__(None, None, None)


def _send_quietly(sock, data):
    try:
        sock.sendall(data)
    except OSError:
        pass


# -- the real server, real signals -----------------------------------------------------------------
@pytest.mark.wrk
def test_sigterm_under_load_finishes_answers_closes_listener_first_and_reports(backend_name):
    wrk = shutil.which("wrk")
    assert wrk, "wrk is not installed"
    srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=backend_name, CWIST_LATENCY_PROBE="1"))
    load = None
    try:
        load = subprocess.Popen(
            [wrk, "-t1", "-c32", "-d2s", f"http://127.0.0.1:{srv.port}/"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        pipe = connect(srv.port, rcvbuf=4096)
        sender = threading.Thread(target=_send_quietly, args=(pipe, numbered_pipeline(2000)), daemon=True)
        sender.start()
        # Under load: wrk's connections are up and the pipelining client's first answer is here.
        assert wait_for(lambda: _established(srv.port) >= 33)
        first = pipe.recv(1)
        assert first == b"H"

        srv.proc.send_signal(15)  # SIGTERM
        # Listeners first: the LISTEN socket is gone while the process is still
        # draining the pipelining client (which has not read its answers).
        assert wait_for(lambda: listening(srv.port) == 0)
        assert srv.proc.poll() is None
        assert refused(srv.port)
        # Now read, through a wider window: ~1 MB through 4 KiB would take seconds.
        pipe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        pipe.settimeout(IO_TIMEOUT_S)
        raw, ending = read_to_eof_raw(pipe)
        assert ending == "eof"
        assert check_prefix(first + raw) >= 1
        pipe.close()
        code, err = srv.wait()
        sender.join(IO_TIMEOUT_S)
        out, _ = load.communicate(timeout=300)
    finally:
        srv.kill()
        if load is not None and load.poll() is None:
            load.kill()
    assert code == 0, err
    assert "Traceback" not in err
    assert f"[latency-probe] pid={srv.proc.pid} worker=0 backend={backend_name}" in err, err
    assert load.returncode == 0, out


def test_second_signal_cuts_the_drain_short(backend_name):
    srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=backend_name, CWIST_LATENCY_PROBE="1"))
    stuck = connect(srv.port, rcvbuf=4096)
    try:
        threading.Thread(target=_send_quietly, args=(stuck, get("/__probe") * 8000), daemon=True).start()
        assert stuck.recv(1) == b"H"  # it is being answered; it will not read any more
        srv.proc.send_signal(15)
        assert wait_for(lambda: listening(srv.port) == 0)
        assert srv.proc.poll() is None  # draining: the stuck client holds it (for up to the grace period)
        code, err = srv.stop(15)  # the second SIGTERM
    finally:
        stuck.close()
        srv.kill()
    assert code == 0, err
    assert "still busy" in err and "[latency-probe]" in err and "Traceback" not in err
    m = re.search(r"still busy after (\d+) ms \(grace (\d+) ms\)", err)
    assert m and int(m[1]) < int(m[2]), err  # the message says how long it waited, not the grace


def _established(port: int) -> int:
    """Server-side ESTABLISHED sockets on ``port`` (from /proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[1].endswith(f":{port:04X}") and r[3] == "01")
