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
