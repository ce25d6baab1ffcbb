"""tailjob.server.ServerProcess: a server started by the job or a benchmark tool never outlives it."""

from __future__ import annotations

import re
import sys

import pytest

from tailjob.server import ServerProcess


class NeverReady(ServerProcess):
    """A process that runs but never prints its ready line."""

    READY = re.compile(r"never printed")

    def command(self) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(60)"]


class Interrupted:
    """Stands in for the ready event: Ctrl-C arrives while start() waits for the ready line."""

    def wait(self, timeout=None):
        raise KeyboardInterrupt

    def set(self):
        pass


def test_ctrl_c_while_a_server_starts_stops_it():
    # The server runs in its own session (start_new_session), so the terminal's SIGINT never
    # reaches it: start() must stop it itself (found by the fresh-eyes review of the tools).
    server = NeverReady({})
    server._ready = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert server.proc is not None and server.proc.poll() is not None, "the server was left running"


class Stopping(Exception):
    """What the test's SIGTERM handler raises (the job's raises Terminated)."""


def test_a_signal_that_arrives_while_the_server_process_is_created_stops_it(monkeypatch):
    """SIGTERM delivered inside ``subprocess.Popen`` (here: as it returns, the moment its exception
    would lose the child's pid): start() holds it until the server is its to stop, then the handler's
    exception stops the server and goes on; the server does not outlive the job."""
    import signal
    import subprocess

    import tailjob.server as server_module

    real_popen = subprocess.Popen
    started: list = []

    def popen_then_signalled(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        signal.raise_signal(signal.SIGTERM)  # the handler runs here, before Popen has returned
        return proc

    def raising(signum, frame):
        raise Stopping

    monkeypatch.setattr(server_module.subprocess, "Popen", popen_then_signalled)
    old = signal.signal(signal.SIGTERM, raising)
    try:
        with pytest.raises(Stopping):
            NeverReady({}).start()
    finally:
        signal.signal(signal.SIGTERM, old)
    [proc] = started
    assert proc.poll() is not None, f"the server (pid {proc.pid}) was left running"
    assert signal.getsignal(signal.SIGTERM) is old  # the job's own handler is back


# -- the port: no race between choosing it and the server binding it ---------------------------------
# A port chosen by binding port 0 and closing the socket is only free "a moment ago": under xdist another
# test's server can take it before ours binds (seen in CI: "cannot listen on 127.0.0.1:46143: Address
# already in use").  The bench server binds port 0 itself and says which port it got; any other server
# is started again on a fresh port when it fails with EADDRINUSE on a port the job chose.

BIND_AND_WAIT = (
    "import socket, sys, time\n"
    "s = socket.socket()\n"
    "try:\n"
    "    s.bind(('127.0.0.1', int(sys.argv[1])))\n"
    "except OSError as e:\n"
    "    print('cannot listen:', e.strerror, file=sys.stderr, flush=True); sys.exit(1)\n"
    "s.listen()\n"
    "print('ready on', s.getsockname()[1], file=sys.stderr, flush=True)\n"
    "time.sleep(60)\n"
)


class BindsItsPort(ServerProcess):
    """A server that binds the port it is given, or exits 1 saying why (as nginx or a C server would)."""

    READY = re.compile(r"ready on (?P<port>\d+)")

    def __init__(self, ports: list[int], **kw):
        super().__init__({}, **kw)
        self.offered = list(ports)  # the ports choose_port hands out, in order

    def choose_port(self) -> int:
        return self.offered.pop(0)

    def command(self) -> list[str]:
        return [sys.executable, "-c", BIND_AND_WAIT, str(self.port)]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_whose_chosen_port_was_taken_before_it_bound_is_started_again_on_a_fresh_port():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        fresh = _free_port()
        server = BindsItsPort([busy, fresh])
        with server:
            assert server.offered == [], "it did not choose a second port"
            assert server.port == fresh
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


def test_a_port_the_user_named_is_not_swapped_when_it_is_taken():
    import socket

    from tailjob.server import ServerError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        server = BindsItsPort([], port=busy)
        with pytest.raises(ServerError, match=f"{busy}.*\n.*Address already in use"):
            server.start()
        assert server.port == busy


def test_the_bench_server_binds_port_zero_itself_and_the_job_reads_the_port_it_got():
    import os
    import socket

    from tailjob.server import BenchServer

    server = BenchServer({**os.environ, "CWIST_REACTOR_BACKEND": "epoll"})
    with server:
        argv = server.proc.args
        assert argv[argv.index("--port") + 1] == "0"
        assert server.port not in (None, 0)
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
