"""Helpers for the bench HTTP server tests: servers, a manual pump, an HTTP client.

Two ways to run the server in-process, both on a real backend and real sockets:

* :class:`ServerThread` -- a :class:`~tailreactor.http.Listener` on a reactor
  running on its own thread (ordinary request/response tests);
* :class:`Pump` -- the test thread drives ``reactor.run_once`` itself, so a
  test can stop between rounds and look at counters (batch/yield rules,
  partial sends, EMFILE back-off).  Combined with ``ManualClock`` this makes
  the age-based rules deterministic.

:func:`start_bench` runs the real ``tailreactor-bench`` entry point as a
subprocess where the process itself matters (exit codes, signals, workers).
Responses are split and parsed with ``httptools.HttpResponseParser``.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httptools

from tailreactor import Config, Reactor
from tailreactor.http import Listener
from tailreactor.http.server import drain

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "http"
IO_TIMEOUT_S = 60.0  # a bound on any blocking client call: a hang fails (generous: busy is slow, not hung)


# -- requests and responses -------------------------------------------------
def get(path: str, *, version: str = "1.1", headers: str = "") -> bytes:
    """A GET request in wire form."""
    return f"GET {path} HTTP/{version}\r\nHost: t\r\n{headers}\r\n".encode()


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class ResponseReader:
    """Feeds bytes to ``httptools.HttpResponseParser`` and collects complete responses."""

    def __init__(self):
        self.done: list[Response] = []
        self._cur: Response | None = None
        self._name = ""
        self.mid_message = False  # a response began and has not ended (truncated if the stream ends)
        self._parser = httptools.HttpResponseParser(self)

    # httptools callbacks
    def on_message_begin(self):
        self._cur = Response(0)
        self.mid_message = True

    def on_header(self, name: bytes, value: bytes):
        self._cur.headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes):
        self._cur.body += body

    def on_message_complete(self):
        self._cur.status = self._parser.get_status_code()
        self.done.append(self._cur)
        self.mid_message = False

    def feed(self, data: bytes) -> None:
        self._parser.feed_data(data)


def connect(port: int, *, rcvbuf: int | None = None) -> socket.socket:
    """A blocking client socket to 127.0.0.1:port with a bounded timeout."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: sets the window
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(IO_TIMEOUT_S)
    s.connect(("127.0.0.1", port))
    return s


def read_responses(sock: socket.socket, n: int) -> list[Response]:
    """Read until ``n`` complete responses arrived (or EOF); return them."""
    reader = ResponseReader()
    while len(reader.done) < n:
        data = sock.recv(65536)
        if not data:
            break
        reader.feed(data)
    return reader.done


def read_to_eof(sock: socket.socket) -> tuple[list[Response], bool]:
    """Read until the server closes; return (responses, saw_eof)."""
    reader = ResponseReader()
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return reader.done, False
        if not data:
            return reader.done, True
        reader.feed(data)


def read_to_eof_raw(sock: socket.socket) -> tuple[bytes, str]:
    """Read until the server closes; return (every byte, ``"eof"`` or ``"reset"``)."""
    chunks = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return b"".join(chunks), "reset"
        if not data:
            return b"".join(chunks), "eof"
        chunks.append(data)


def parse_responses(raw: bytes) -> tuple[list[Response], bool]:
    """Complete responses in ``raw`` and whether a last one was cut short.

    Raises ``httptools.HttpParserError`` if ``raw`` is not a sequence of HTTP responses.
    """
    reader = ResponseReader()
    reader.feed(raw)
    return reader.done, reader.mid_message


def rst_close(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN (a client that resets)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def exchange(port: int, raw: bytes, n: int = 1) -> list[Response]:
    """Open a connection, send ``raw``, read ``n`` responses, close."""
    with connect(port) as s:
        s.sendall(raw)
        return read_responses(s, n)


# -- in-process servers -------------------------------------------------------
def make_config(**attrs) -> Config:
    return Config.default().replace(**attrs)


class ServerThread:
    """A Listener on 127.0.0.1:<ephemeral> served by a reactor on its own thread.

    ``with ServerThread("epoll", http_batch=16) as srv: srv.port ...``.
    ``clock`` replaces the reactor clock (a ManualClock); ``grace_us`` > 0
    runs the server's drain phase (:func:`tailreactor.http.server.drain`)
    after the stop, as the real server does on SIGTERM (``draining`` is set
    once it runs; ``cut_off`` is its result).  The
    reactor is built on the thread that runs it, as in the real server (one
    owner thread for the ring; stop() from the test thread is then a true
    cross-thread wake).  On exit: ``reactor.stop()``, join; the thread then
    closes the listener (and its connections) and the reactor.
    """

    def __init__(self, backend: str, *, probe=None, clock=None, grace_us: int = 0, **config_attrs):
        self._args = (backend, make_config(**config_attrs), probe)
        self._clock = clock
        self.grace_us = grace_us
        self.draining = threading.Event()  # set once the drain phase runs (grace_us > 0)
        self.cut_off: int | None = None  # connections the drain had to cut off
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.reactor: Reactor | None = None
        self.listener: Listener | None = None
        self._thread = threading.Thread(target=self._main, name="bench-reactor", daemon=True)

    def _main(self) -> None:
        backend, cfg, probe = self._args
        try:
            kw = {"clock": self._clock} if self._clock is not None else {}
            self.reactor = Reactor(backend, config=cfg, probe=probe, **kw)
            self.listener = Listener(self.reactor, "127.0.0.1", 0)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            raise
        self.port = self.listener.port
        self._ready.set()
        try:
            self.reactor.run()
            if self.grace_us:  # the server's stop sequence: let in-flight answers finish
                # Queued now, run by the drain phase's first round: the listener has closed by then.
                self.reactor.post(lambda _: self.draining.set())
                self.cut_off = drain(self.reactor, self.listener, self.grace_us)
        finally:
            self.listener.close()
            self.reactor.close()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        assert self._ready.wait(IO_TIMEOUT_S), "server thread did not start"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc) -> None:
        self.reactor.stop()
        self.join()

    def join(self) -> None:
        self._thread.join(IO_TIMEOUT_S)
        assert not self._thread.is_alive(), "reactor thread did not stop"

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


class Pump:
    """Drive a reactor from the test thread, round by round."""

    def __init__(self, reactor: Reactor):
        self.reactor = reactor

    def until(self, predicate, *, max_rounds: int = 2000, wait_s: float = 0.05) -> int:
        """Run rounds until ``predicate()`` is true; return rounds run.

        ``wait_s`` bounds each round's wait (so the loop re-checks the
        predicate); ``max_rounds`` bounds the whole pump: failing to reach
        the state is an assertion error, not a hang.
        """
        for n in range(max_rounds):
            if predicate():
                return n
            self.reactor.run_once(wait_s)
        assert predicate(), f"state not reached after {max_rounds} rounds"
        return max_rounds

    def rounds(self, n: int, wait_s: float = 0.0) -> None:
        for _ in range(n):
            self.reactor.run_once(wait_s)


def only_connection(listener: Listener):
    (conn,) = listener.connections.values()
    return conn


def accept_connection(listener: Listener, pump: Pump, client: socket.socket):
    """Pump until ``listener`` has accepted ``client``; return the server side's Connection."""
    pump.until(lambda: any(c.peer == client.getsockname() for c in listener.connections.values()))
    return next(c for c in listener.connections.values() if c.peer == client.getsockname())


# -- a process seen from /proc ------------------------------------------------
def open_fds(pid: int) -> int:
    """How many file descriptors ``pid`` has open (entries of /proc/PID/fd)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (VmRSS in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def wait_for(predicate, *, timeout_s: float = IO_TIMEOUT_S, poll_s: float = 0.01) -> bool:
    """Poll ``predicate()`` until true or ``timeout_s`` passes; return its last value.

    Only for state that no event announces (a process's /proc entries, the
    kernel's socket table): everything else waits on the event itself.
    """
    deadline = time.monotonic() + timeout_s
    while not (ok := predicate()) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return ok


# -- the real entry point as a subprocess ------------------------------------
START_RE = re.compile(
    r"tailreactor-bench: listening on (?P<host>[\d.]+):(?P<port>\d+), backend (?P<backend>\S+), "
    r"workers (?P<workers>\d+), pid (?P<pid>\d+)"
)


def bench_command() -> list[str]:
    """The installed console script next to this Python, else ``python -m``."""
    script = Path(sys.executable).parent / "tailreactor-bench"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "tailreactor.http.server"]


def bench_env(**env: str) -> dict[str, str]:
    """os.environ without any CWIST_* variable, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CWIST_")}
    base.update(env)
    return base


class BenchProcess:
    """A running ``tailreactor-bench``; ``port``, ``backend``, ``workers``, ``line``, ``before``."""

    def __init__(self, proc: subprocess.Popen, match: re.Match, line: str, rest: str, before: str = ""):
        self.proc = proc
        self.line = line
        self.before = before  # stderr before the start line (warnings)
        self.port = int(match["port"])
        self.backend = match["backend"]
        self.workers = int(match["workers"])
        self._rest = rest  # stderr already read past the start line

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Send ``sig``, wait (bounded) and return (exit code, the rest of stderr)."""
        self.proc.send_signal(sig)
        return self.wait()

    def wait(self, timeout_s: float = IO_TIMEOUT_S) -> tuple[int, str]:
        """Wait (bounded) for the server to exit; return (exit code, the rest of stderr)."""
        try:
            _, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"server did not exit within {timeout_s}s") from None
        return self.proc.returncode, self._rest + err.decode(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(IO_TIMEOUT_S)


def start_bench(args: list[str] = (), env: dict | None = None, prefix: list[str] = ()) -> BenchProcess:
    """Start the server and wait for its start line on stderr (bounded).

    stderr is read unbuffered with ``os.read``: a buffered ``readline`` could
    hold the start line in its buffer while ``select`` waits for more bytes.
    """
    proc = subprocess.Popen(
        [*prefix, *bench_command(), "--port", "0", *args],
        env=env or bench_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    fd = proc.stderr.fileno()
    seen = ""
    deadline = time.monotonic() + IO_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break  # exited before listening
        seen += chunk.decode(errors="replace")
        m = START_RE.search(seen)
        if m and "\n" in seen[m.end() :]:
            line_end = seen.index("\n", m.end()) + 1
            return BenchProcess(proc, m, m.group(0), seen[line_end:], seen[: m.start()])
    proc.kill()
    _, rest = proc.communicate(timeout=IO_TIMEOUT_S)
    raise AssertionError(
        f"no start line; exit {proc.returncode}; stderr: {seen + rest.decode(errors='replace')!r}"
    )


def run_bench(
    args: list[str] = (), env: dict | None = None, prefix: list[str] = ()
) -> subprocess.CompletedProcess:
    """Run the server expecting it to exit on its own (config errors)."""
    return subprocess.run(
        [*prefix, *bench_command(), *args],
        env=env or bench_env(),
        text=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=IO_TIMEOUT_S * 2,
        check=False,
    )


# -- a real io_uring denial ------------------------------------------------------
#: Command prefix running the rest with io_uring_setup failing EPERM (a seccomp
#: filter installed by tests/seccomp_deny.py, then exec: no preexec_fn, which
#: is unsafe in a threaded pytest worker).
DENY_IO_URING = [sys.executable, str(Path(__file__).resolve().parent / "seccomp_deny.py"), "EPERM", "--"]
