"""Bytecodes per request of the bench server and of the asyncio peer, by part and by function.

Role
----
wrk figures on a shared 2-core machine move by about 20 % from run to run, so
they cannot say where a few percent of a request's CPU go.  This count does
not move: it runs the real request path in this process -- N keep-alive
clients on loopback TCP, each sending ``GET /`` once per cycle -- and counts
the Python bytecodes the *server* executes (``sys.settrace`` with
``f_trace_opcodes``, switched on only around the server's round:
``Reactor.run_once``, or asyncio's ``BaseEventLoop._run_once``), divided by
the requests answered.  Bytecodes are not CPU time: C code (the socket
calls, httptools' parser, allocation, the interpreter's call overhead) is
not counted, and a bytecode's cost varies.  Use it to see which Python
code runs per request and to compare two trees exactly;
``benchmarks/README.md`` puts it beside callgrind's instruction counts.

The bench server runs on a clock written in C (it adds no bytecodes) that
moves only when read: by ``--clock-step-us`` per read, default 0.  At 0 no
event ages and no timer fires: the path of a load that keeps every round
short.  A step of at least ``CWIST_REACTOR_TAIL_US`` ages every event before
it is delivered: the path of a server a round behind, which is where the
bench server is at ``wrk -c256`` (the latency probe counts every delivery
as a tail elevation there).  Under tracing a real clock would age
everything, by an amount nobody chose.

Usage: ``python benchmarks/bytecodes.py [--clients 32] [--cycles 20]
[--server bench-epoll] [--server bench-io_uring] [--server asyncio] [--top 12]
[--clock-step-us 0]``
(default: all three servers).  ``CWIST_*`` knobs in the environment apply to
the bench server (``CWIST_REACTOR_TAIL_US=0 python benchmarks/bytecodes.py``
counts the round without age-based dispatch; ``CWIST_HTTP_KEEP_ALIVE_TIMEOUT``
is 0 unless set).  Prints a line with those settings, then, per server, bytecodes per request
split into parts, then the functions that execute most.  Exits 2 with one
line when a server cannot run here (io_uring unavailable).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import socket
import sys
from pathlib import Path

from tailreactor.backends import IoUringUnavailable
from tailreactor.config import ConfigError, load

REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:3000\r\n\r\n"
#: Clients connect before the server accepts them, so they must fit its listen backlog.
MAX_CLIENTS = 1000
SERVERS = ("bench-epoll", "bench-io_uring", "asyncio")

#: Parts of a request, by the file (and for the connection, the function) a bytecode ran in.
#: The first match wins.
PARTS = (
    ("request parsing (shared)", "tailreactor/http/request.py", ""),
    ("connection", "tailreactor/http/connection.py", ""),
    ("routes (shared)", "tailreactor/http/routes.py", ""),
    ("backend", "tailreactor/backends/", ""),
    ("reactor core", "tailreactor/", ""),
    ("protocol (peer)", "peers/asyncio_server.py", ""),
    ("transport (asyncio)", "asyncio/selector_events.py", "_SelectorSocketTransport"),
    ("transport (asyncio)", "asyncio/transports.py", ""),
    ("loop (asyncio)", "asyncio/", ""),
    ("loop (asyncio)", "selectors.py", ""),
)


def part_of(filename: str, qualname: str) -> str:
    """The part a code object belongs to (PARTS), or ``other``."""
    path = filename.replace(os.sep, "/")
    for part, file_part, name_prefix in PARTS:
        if file_part in path and qualname.startswith(name_prefix):
            return part
    return "other"


class OpcodeCounter:
    """Counts executed bytecodes per (filename, qualname) while active."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def _trace(self, frame, event, arg):
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            code = frame.f_code
            self.counts[(code.co_filename, code.co_qualname)] += 1
        return self._trace

    def call(self, fn, *args):
        """``fn(*args)`` with tracing on; returns its result."""
        sys.settrace(self._trace)
        try:
            return fn(*args)
        finally:
            sys.settrace(None)


def _clients(port: int, n: int) -> list[socket.socket]:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    for c in socks:
        c.setblocking(False)  # _cycle polls them with recv: no select() and its 1024-fd limit
    return socks


def _cycle(clients, step) -> None:
    """Every client sends one request; run server rounds (``step()``) until every answer arrived.

    Raises RuntimeError if the server closes a connection.  Each answer is a
    few dozen bytes and arrives in one segment, so one ``recv`` reads it.
    """
    for c in clients:
        c.sendall(REQUEST)
    waiting = list(clients)
    while waiting:
        step()
        still = []
        for c in waiting:
            try:
                if not c.recv(65536):
                    raise RuntimeError("the server closed a keep-alive connection")
            except BlockingIOError:
                still.append(c)  # no answer yet
        waiting = still


def count_bench(
    backend: str, clients: int, cycles: int, step_us: int = 0, env: dict[str, str] | None = None
) -> tuple[collections.Counter, int]:
    """Bytecodes by code object, and requests answered, of the bench server on ``backend``.

    ``backend`` is a backend name; the other ``CWIST_*`` knobs come from
    ``env`` (default the environment; raises ``ConfigError`` for a bad value), except that
    ``CWIST_HTTP_KEEP_ALIVE_TIMEOUT`` is 0 unless set: a clock that moves per
    read would otherwise pass the idle timeout and add timer work.
    """
    from tailreactor import Reactor
    from tailreactor.http.listener import Listener

    # A clock in C that moves step_us per read (itertools.count: no bytecodes).
    clock = itertools.count(1_000_000_000, step_us * 1000).__next__
    r = Reactor(backend, config=load(bench_env(env)), clock=clock)
    listener = Listener(r, "127.0.0.1", 0)
    socks = _clients(listener.port, clients)
    counter = OpcodeCounter()
    try:
        for _ in range(20):  # accept everyone
            r.run_once(0.01)
        for _ in range(3):  # warm-up: first requests take rarer paths
            _cycle(socks, lambda: r.run_once(0.1))
        for _ in range(cycles):
            _cycle(socks, lambda: counter.call(r.run_once, 0.1))
        return counter.counts, clients * cycles
    finally:
        for c in socks:
            c.close()
        listener.close()
        r.close()


def count_asyncio(clients: int, cycles: int) -> tuple[collections.Counter, int]:
    """Bytecodes by code object, and requests answered, of the asyncio peer."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
    from asyncio_server import HttpProtocol

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(HttpProtocol, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    socks = _clients(port, clients)
    counter = OpcodeCounter()
    try:
        for _ in range(20):
            loop.run_until_complete(asyncio.sleep(0.005))
        for _ in range(3):
            _cycle(socks, loop._run_once)  # one iteration of run_forever's loop
        for _ in range(cycles):
            _cycle(socks, lambda: counter.call(loop._run_once))
        return counter.counts, clients * cycles
    finally:
        for c in socks:
            c.close()
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()


def bench_env(env=None) -> dict[str, str]:
    """The environment the bench server's knobs are read from (see :func:`count_bench`)."""
    return {"CWIST_HTTP_KEEP_ALIVE_TIMEOUT": "0", **(os.environ if env is None else env)}


def measure(
    server: str, clients: int, cycles: int, step_us: int = 0, env: dict[str, str] | None = None
) -> tuple[collections.Counter, int]:
    """Bytecodes by code object, and requests answered, of ``server`` (``env``: the bench server's knobs)."""
    if server == "asyncio":
        return count_asyncio(clients, cycles)
    return count_bench(server.split("-", 1)[1], clients, cycles, step_us, env)


def report(server: str, counts: collections.Counter, requests: int, top: int) -> str:
    """The text block of one server: total, parts, top functions (bytecodes per request)."""
    total = sum(counts.values())
    parts: collections.Counter = collections.Counter()
    for (filename, qualname), n in counts.items():
        parts[part_of(filename, qualname)] += n
    lines = [f"{server}: {total / requests:.1f} bytecodes/request ({requests} requests)"]
    for part, n in parts.most_common():
        lines.append(f"  {n / requests:7.1f}  {part}")
    lines.append("  top functions:")
    for (filename, qualname), n in counts.most_common(top):
        lines.append(f"  {n / requests:7.1f}  {qualname}  ({Path(filename).name})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=32, help="keep-alive clients (default 32)")
    ap.add_argument("--cycles", type=int, default=20, help="requests per client counted (default 20)")
    ap.add_argument(
        "--server", action="append", choices=SERVERS, help="a server to count (repeatable; default: all)"
    )
    ap.add_argument("--top", type=int, default=12, help="functions listed per server (default 12)")
    ap.add_argument(
        "--json",
        action="store_true",
        help="print, per server, one JSON line: the requests and [file, function, bytecodes] per function",
    )
    ap.add_argument(
        "--clock-step-us",
        type=int,
        default=0,
        help="the bench server's clock moves this much per read (default 0; see above)",
    )
    args = ap.parse_args(argv)
    if not 1 <= args.clients <= MAX_CLIENTS:
        ap.error(f"--clients must be 1 to {MAX_CLIENTS}, got {args.clients}")
    if args.cycles < 1:
        ap.error(f"--cycles must be >= 1, got {args.cycles}")
    if args.top < 0:
        ap.error(f"--top must be >= 0, got {args.top}")
    if args.clock_step_us < 0:
        ap.error(f"--clock-step-us must be >= 0, got {args.clock_step_us}")
    try:
        load(bench_env())  # a bad knob: say so before printing anything
    except ConfigError as exc:
        print(f"bytecodes: {exc}", file=sys.stderr)
        return 2
    knobs = sorted(f"{k}={v}" for k, v in bench_env().items() if k.startswith("CWIST_"))
    if not args.json:
        print(
            f"bench server: clock step {args.clock_step_us} us per read; {', '.join(knobs)}; "
            f"{args.clients} clients x {args.cycles} requests",
            flush=True,
        )
    for server in args.server or SERVERS:
        try:
            counts, requests = measure(server, args.clients, args.cycles, args.clock_step_us)
        except IoUringUnavailable as exc:
            print(f"bytecodes: {server} cannot run here: {exc}", file=sys.stderr)
            return 2
        if args.json:
            counted = [[f, q, n] for (f, q), n in counts.items()]
            print(json.dumps({"server": server, "requests": requests, "counts": counted}), flush=True)
        else:
            print(report(server, counts, requests, args.top), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
