"""Start and stop the bench server (``tailreactor-bench``) for one run.

Role
----
:class:`BenchServer` starts ``python -m tailreactor.http.server --host H
--port P [--workers N]`` with a given environment (optionally under
``taskset -c CPUS``), waits for the line the server prints once it listens::

    tailreactor-bench: listening on 127.0.0.1:3000, backend io_uring, ...

and reports the backend named there.  It keeps reading the server's stderr
(so a chatty server never blocks on a full pipe) and keeps the last lines for
error messages.  :meth:`BenchServer.stop` sends SIGTERM and waits; a server
that does not stop in time is killed and the run is flagged.

Waiting is on events (the listening line, or the end of stderr when the
server dies), never on sleeps.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from typing import Mapping

__all__ = ["BenchServer", "ServerError", "free_port", "LISTENING"]

LISTENING = re.compile(r"tailreactor-bench: listening on (?P<host>[^\s:]+):(?P<port>\d+), "
                       r"backend (?P<backend>[\w-]+)")


class ServerError(RuntimeError):
    """The bench server did not start, or died; the message ends with its last stderr lines."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class BenchServer:
    """One bench server process.  Use as a context manager or call start()/stop().

    ``env`` is its whole environment; ``cpus`` (e.g. ``"0"``) pins it with
    ``taskset -c``; ``workers`` adds ``--workers N``.  After :meth:`start`:
    ``pid``, ``port`` and ``backend`` (as the server reported it).
    """

    def __init__(self, env: Mapping[str, str], *, host: str = "127.0.0.1", port: int | None = None,
                 workers: int | None = None, cpus: str | None = None,
                 python: str = sys.executable, module: str = "tailreactor.http.server",
                 start_timeout_s: float = 30.0):
        self.env = dict(env)
        self.host, self.port = host, port
        self.workers, self.cpus = workers, cpus
        self.python, self.module = python, module
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.backend: str | None = None
        self.listening_line: str | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    def argv(self) -> list[str]:
        cmd = [self.python, "-m", self.module, "--host", self.host, "--port", str(self.port)]
        if self.workers is not None:
            cmd += ["--workers", str(self.workers)]
        return ["taskset", "-c", self.cpus, *cmd] if self.cpus is not None else cmd

    def start(self) -> "BenchServer":
        """Start the server and wait until it listens.

        Raises :class:`ServerError` if it exits first or does not print the
        listening line within ``start_timeout_s``.
        """
        if self.port is None:
            self.port = free_port(self.host)
        self.proc = subprocess.Popen(self.argv(), env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self._reader = threading.Thread(target=self._read_stderr, name="bench-server-stderr",
                                        daemon=True)
        self._reader.start()
        # Set by the listening line, or by the end of stderr (the server died).
        if not self._ready.wait(self.start_timeout_s) or self.backend is None:
            died = self.proc.poll() is not None or not self._reader.is_alive()
            self.stop()
            what = "exited before listening" if died else \
                f"printed no listening line within {self.start_timeout_s:.0f} s"
            raise ServerError(f"bench server {what}: {' '.join(self.argv())}"
                              + self.last_stderr())
        return self

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stderr_tail.append(line)
            if self.backend is None:
                m = LISTENING.search(line)
                if m:
                    self.backend, self.listening_line = m.group("backend"), line
                    self._ready.set()
        self._ready.set()

    def last_stderr(self, n: int = 8) -> str:
        """The last ``n`` stderr lines, formatted to end an error message ("" if none)."""
        lines = list(self.stderr_tail)[-n:]
        return ("\n  server stderr: " + "\n  server stderr: ".join(lines)) if lines else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> list[str]:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL the whole session.

        Returns flags for the run record: ``server-stop-timeout`` if it had to
        be killed, ``server-exit-N`` for a non-zero exit status.
        """
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

    def __enter__(self) -> "BenchServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
