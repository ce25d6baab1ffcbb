"""Start and stop a server under test for one run: the bench server, a peer, or a server command.

:class:`ServerProcess` starts an argv with an environment (optionally under ``taskset``), keeps
reading its stderr (a chatty server never blocks on a full pipe), waits until it is ready, keeps its
last lines for error messages, and stops it with SIGTERM (SIGKILL and a flag if it does not stop in
time).  The bench server (:class:`BenchServer`) binds port 0 and names its port, backend and workers
in its ready line; a server command (:class:`CommandServer`) is ready once it answers one request,
and a server that fails with EADDRINUSE on a port the job chose is started again on a fresh one.
Waiting is on events (the ready line, or the end of stderr when the server dies); only a server
command, which prints nothing the job knows, is asked again until it answers or the bound passes.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from . import procstat, refcode

#: How a server's stderr says its port was taken (strerror(EADDRINUSE), and nginx's errno text).
ADDRESS_IN_USE = re.compile(r"Address already in use|EADDRINUSE|errno 98\b|\(98:", re.IGNORECASE)

LISTENING = re.compile(
    r"tailreactor-bench: listening on (?P<host>[^\s:]+):(?P<port>\d+), "
    r"backend (?P<backend>[\w-]+), workers (?P<workers>\d+)"
)


class ServerError(RuntimeError):
    """A server under test did not start, or died; the message ends with its last stderr lines."""


def how_it_ended(status: int | None) -> str:
    """`` with status N`` or `` on SIGNAME`` for a process's exit status (``Popen.returncode``), for
    the line that says it died; nothing while it is unknown."""
    if status is None:
        return ""
    if status < 0:
        return f" on {signal.Signals(-status).name}"
    return f" with status {status}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    """One server process (a context manager, or start()/stop()).  ``env`` is its whole environment;
    ``cpus`` pins it with ``taskset -c``; ``run_under`` is an argv prefix (the instruction tier's
    valgrind).  Subclasses define :meth:`command` and :attr:`READY`; after :meth:`start`: ``pid``,
    ``port`` and ``backend`` (what the server reported, or the subclass's name for it)."""

    #: What the server prints on stderr once it serves; subclasses set it.
    READY: re.Pattern
    #: Names the server in error messages.
    WHAT = "server"
    #: True when READY has a ``port`` group: started on port 0, the server says which port it bound.
    PORT_FROM_READY = False
    #: Launches on fresh ports when a port the job chose was taken before the server bound it.
    PORT_TRIES = 3

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        cpus: str | None = None,
        start_timeout_s: float = 30.0,
    ):
        self.env = dict(env)
        self.host, self.port = host, port
        self.cpus = cpus
        self.run_under: list[str] = []
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.backend: str | None = None
        self.workers: int | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def on_line(self, line: str) -> None:
        """Called with every stderr line until the ready line (this one included); by default nothing."""

    def on_ready(self, match: re.Match) -> None:
        """Called with the ready line's match; must set ``self.backend``."""
        self.backend = match.groupdict().get("backend") or self.WHAT

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    def argv(self) -> list[str]:
        cmd = [*self.run_under, *self.command()]
        return ["taskset", "-c", self.cpus, *cmd] if self.cpus is not None else cmd

    def choose_port(self) -> int:
        """A port for a server asked for none: one that was free a moment ago (:func:`free_port`)."""
        return free_port(self.host)

    def start(self) -> ServerProcess:
        """Start the server and wait until it listens; :class:`ServerError` if it exits first or is not
        ready within ``start_timeout_s``.  With no port given, a server whose ready line names its port
        (``PORT_FROM_READY``) binds port 0 itself; any other gets :meth:`choose_port`, and is started
        again on a fresh port when it fails with EADDRINUSE (another process took the port), up to
        ``PORT_TRIES`` times.  A port the caller named is never swapped."""
        chosen = self.port is None
        for attempt in range(1, self.PORT_TRIES + 1):
            if chosen:
                self.port = 0 if self.PORT_FROM_READY else self.choose_port()
            try:
                self._launch()
                return self
            except ServerError as exc:
                if not (chosen and attempt < self.PORT_TRIES and ADDRESS_IN_USE.search(str(exc))):
                    raise
                self.backend, self._ready = None, threading.Event()
                self.stderr_tail.clear()
        raise AssertionError("unreachable: the last try returns or raises")

    def _launch(self) -> None:
        with _signals_held() as held:  # until the server is ours to stop (below)
            self.proc = subprocess.Popen(
                self.argv(),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self._reader = threading.Thread(target=self._read_stderr, name=f"{self.WHAT}-stderr", daemon=True)
            self._reader.start()
        try:
            held.deliver()  # a Ctrl-C or SIGTERM that came while it started: now it stops the server
            ready = self.wait_ready()
        except BaseException:
            # Ctrl-C while it starts: the server runs in its own session, so the terminal's
            # SIGINT does not reach it; stop it here or it outlives us.
            self.stop()
            raise
        if not ready:
            died = self.proc.poll() is not None or not self._reader.is_alive()
            if died:  # its stderr closed: it is exiting, if not yet reaped
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=5)
            status = self.proc.returncode
            self.stop()
            what = (
                f"exited{how_it_ended(status)} before listening"
                if died
                else f"{self.not_ready()} within {self.start_timeout_s:g} s"
            )
            raise ServerError(f"{self.WHAT} {what}: {shlex.join(self.argv())}" + self.last_stderr())

    def not_ready(self) -> str:
        """What the server failed to do in time, for the error message."""
        return "printed no ready line"

    def wait_ready(self) -> bool:
        """True once the server serves; False when it died or ``start_timeout_s`` passed (by default the
        ready line, or the end of stderr, sets ``_ready``)."""
        return self._ready.wait(self.start_timeout_s) and self.backend is not None

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stderr_tail.append(line)
            if self.backend is None:
                self.on_line(line)
                m = self.READY.search(line)
                if m:
                    self.on_ready(m)
                    self._ready.set()
        self._ready.set()

    def last_stderr(self, n: int = 8) -> str:
        """The last ``n`` stderr lines, formatted to end an error message ("" if none)."""
        lines = list(self.stderr_tail)[-n:]
        return ("\n  server stderr: " + "\n  server stderr: ".join(lines)) if lines else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> list[str]:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL the whole session; the run's flags:
        ``server-stop-timeout`` if it had to be killed, ``server-exit-N`` for a non-zero exit status."""
        flags: list[str] = []
        if self.proc is None:
            return flags
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                flags.append("server-stop-timeout")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout_s)
        if self.proc.returncode not in (0, -signal.SIGTERM) and "server-stop-timeout" not in flags:
            flags.append(f"server-exit-{self.proc.returncode}")
        return flags

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class BenchServer(ServerProcess):
    """The bench server (``tailreactor-bench``): ready at ``tailreactor-bench: listening on H:P, backend
    B, workers N, pid ...``; with ``report_code`` (``--a-ref``) it first names the :mod:`tailreactor` it
    imported (``code``, :func:`tailjob.refcode.server_command`)."""

    READY = LISTENING
    WHAT = "bench server"
    PORT_FROM_READY = True

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        workers: int | None = None,
        module: str = "tailreactor.http.server",
        report_code: bool = False,
        **kw,
    ):
        super().__init__(env, **kw)
        self.workers_arg = workers
        self.module = module
        self.report_code = report_code
        self.code: str | None = None

    def command(self) -> list[str]:
        args = ["--host", self.host, "--port", str(self.port)]
        if self.workers_arg is not None:
            args += ["--workers", str(self.workers_arg)]
        if self.report_code:
            return refcode.server_command(sys.executable, self.module, args)
        return [sys.executable, "-m", self.module, *args]

    def on_line(self, line: str) -> None:
        if self.report_code and self.code is None:
            self.code = refcode.imported(line)

    def on_ready(self, match: re.Match) -> None:
        self.backend, self.workers = match.group("backend"), int(match.group("workers"))
        self.port = int(match.group("port"))


class _Held:
    """The signals :func:`_signals_held` recorded while a server started."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def deliver(self) -> None:
        """Raise the recorded signals again, now that their own handlers are back (Ctrl-C's raises
        KeyboardInterrupt, the job's SIGTERM handler Terminated)."""
        for signum in self.signals:
            signal.raise_signal(signum)


@contextlib.contextmanager
def _signals_held():
    """Python-only machinery: while a server starts, SIGINT and SIGTERM are recorded, not handled.
    Raised inside ``subprocess.Popen`` (after the fork) or before the caller's ``try``, their
    exception would lose the child's pid, and the server, in its own session, would outlive the job.
    Only the main thread runs signal handlers (elsewhere nothing is held); an ignored signal stays so."""
    held = _Held()
    saved = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                saved[signum] = signal.signal(signum, lambda n, _frame: held.signals.append(n))
    try:
        yield held
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def answers(host: str, port: int, path: str, *, timeout_s: float) -> bool:
    """True when ``GET path`` on ``host:port`` gets an HTTP response (any status) within ``timeout_s``."""
    return answer_to(host, port, path, timeout_s=timeout_s) is not None


def answer_to(host: str, port: int, path: str, *, timeout_s: float) -> tuple[int, bool] | None:
    """The answer to ``GET path`` on ``host:port`` within ``timeout_s``: its status, and whether it
    says the server closes the connection after it (``Connection: close``, or HTTP/1.0 without
    keep-alive); None without one."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status, bool(response.will_close)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class CommandServer(ServerProcess):
    """A server the job did not write: ``template`` with ``{port}`` replaced, split as a shell would
    and run without one.  Ready when it answers one ``GET path`` (any status) and a process of its
    tree listens on the port (an answer from whoever else took the port does not count), asked again
    with pauses of 10 to 200 ms that end early when its stderr closes.  It may fork (nginx): its CPU
    is its tree's, and :meth:`stop` signals its whole process group, so no worker outlives it.
    ``name``: what its runs report as their backend and its errors call it (default: the program's name)."""

    READY = re.compile(r"(?!)")  # matches nothing: readiness is an answer, not a line
    WHAT = "server command"
    ready_status: int | None = None  # the status of the answer that made it ready
    # That answer said the server closes each connection after one answer: wrk then reconnects for
    # every request, silently (no socket error), and a run measures the reconnects (flag no-keep-alive).
    closes: bool = False

    def __init__(
        self, template: str, env: Mapping[str, str], *, path: str = "/", name: str | None = None, **kw
    ):
        super().__init__(env, **kw)
        self.template, self.path, self.name = template, path, name
        if name:
            self.WHAT = name

    def command(self) -> list[str]:
        return [token.replace("{port}", str(self.port)) for token in shlex.split(self.template)]

    def wait_ready(self) -> bool:
        port = self.port
        assert port is not None  # start() chose it
        deadline, pause = time.monotonic() + self.start_timeout_s, 0.01
        while self.alive():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            answer = answer_to(self.host, port, self.path, timeout_s=min(left, 5.0))
            self.ready_status, self.closes = answer or (None, False)
            if answer is not None and procstat.listens(self.pid, port):
                self.backend = self.name or os.path.basename(self.command()[0])
                return True
            self._ready.wait(min(pause, max(deadline - time.monotonic(), 0)))  # set when stderr ends
            pause = min(pause * 2, 0.2)
        return False

    def not_ready(self) -> str:
        return f"did not answer GET {self.path} on port {self.port}"

    def stop(self, timeout_s: float = 10.0) -> list[str]:
        """SIGTERM to the whole process group, wait for the command, SIGKILL to what it left running."""
        if self.proc is None:
            return []
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # none of the group is left
                os.killpg(self.proc.pid, signal.SIGTERM)
        flags = super().stop(timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return flags
