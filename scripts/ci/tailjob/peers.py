"""The servers of ``peers``: the bench server on each backend, then server commands (asyncio, uvloop, nginx).

Each answers ``GET /`` with ``200``, an empty body and keep-alive.  A peer other than the bench server
is a server command (:class:`tailjob.server.CommandServer`, as ``--server-cmd`` runs one): the asyncio
peer is ``benchmarks/peers/asyncio_server.py`` (asyncio.Protocol + httptools, the bench server's
response bytes), uvloop the same on uvloop, and the ceiling is Debian's nginx run by the own-server
example, ``examples/own-server/nginx-server.sh {port}`` with one worker.  nginx is optional
(:data:`NGINX_MISSING`); uvloop is required (the ``bench`` extra).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import util as importlib_util

from tailreactor.extras import install_command

from . import CHECKOUT, REPO
from .server import BenchServer, CommandServer, ServerProcess

PEER_SCRIPT = REPO / "benchmarks" / "peers" / "asyncio_server.py"
NGINX_SCRIPT = REPO / "examples" / "own-server" / "nginx-server.sh"

#: The servers every other one is divided by, in column order (nginx only when present).
REFERENCES = ("asyncio", "uvloop", "nginx")

#: One line, printed when nginx is not found; the job then runs without the ceiling.
NGINX_MISSING = (
    "nginx not found: no ceiling row in this comparison (install it with "
    "scripts/bootstrap.sh --nginx, i.e. apt-get install nginx)"
)

#: The module the uvloop peer imports; a name so a test can point the check elsewhere.
UVLOOP_MODULE = "uvloop"


@dataclass(frozen=True)
class Peer:
    """One server of the comparison: ``key`` in records, ``label`` in reports, ``describe`` how it runs.

    ``kind`` is ``bench`` (the bench server on ``backend``), ``python`` or ``nginx``; the last two run
    ``command`` (``{port}`` in it) with ``env`` over the job's environment."""

    key: str
    label: str
    kind: str
    describe: str
    backend: str | None = None
    command: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


def _python_peer(*options: str) -> str:
    return shlex.join([sys.executable, str(PEER_SCRIPT), *options]) + " --port {port}"


def servers(*, nginx: str | None) -> list[Peer]:
    """The servers of a ``peers`` job, in report order; nginx only if its path is given."""
    bench = "`python -m tailreactor.http.server --workers 1`, `CWIST_REACTOR_BACKEND={}`"
    script = "`benchmarks/peers/asyncio_server.py"
    out = [
        Peer(f"tailreactor-{b}", f"tailreactor ({b})", "bench", bench.format(b), b)
        for b in ("io_uring", "epoll")
    ]
    out += [
        Peer(
            "asyncio",
            "asyncio",
            "python",
            f"{script}` (asyncio.Protocol + httptools)",
            command=_python_peer(),
        ),
        Peer("uvloop", "uvloop", "python", f"{script} --uvloop`", command=_python_peer("--uvloop")),
    ]
    if nginx:
        ceiling = (
            "Debian's nginx, one worker, `return 200` from memory: `examples/own-server/nginx-server.sh`"
        )
        command = shlex.quote(str(NGINX_SCRIPT)) + " {port}"
        out.append(
            Peer("nginx", "nginx (ceiling)", "nginx", ceiling, command=command, env={"NGINX_WORKERS": "1"})
        )
    return out


def uvloop_missing() -> str | None:
    """None if uvloop imports in this Python (the peers run on it), else a one-line error."""
    if importlib_util.find_spec(UVLOOP_MODULE) is not None:
        return None
    bootstrap = " (scripts/bootstrap.sh installs it)" if CHECKOUT else ""
    return f"peers needs uvloop, which {sys.executable} cannot import: {install_command('bench')}{bootstrap}"


def find_nginx(path: str | None = None, fallbacks: tuple[str, ...] = ("/usr/sbin/nginx",)) -> str | None:
    """nginx's path: on ``PATH`` (``path`` overrides it), else the first executable fallback
    (Debian installs it in /usr/sbin, which is not on every user's PATH)."""
    found = shutil.which("nginx", path=path)
    if found:
        return found
    return next((f for f in fallbacks if os.path.isfile(f) and os.access(f, os.X_OK)), None)


def nginx_version(binary: str) -> str | None:
    """``nginx/1.22.1`` from ``nginx -v`` (which prints to stderr); None if it cannot run."""
    try:
        out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return None
    m = re.search(r"nginx/\S+", out.stderr + out.stdout)
    return m.group(0) if m else None


def make_server(
    peer: Peer, *, ambient: Mapping[str, str], host: str, cpus: str | None, nginx: str | None = None
) -> ServerProcess:
    """A not yet started server for ``peer``: one process serving on one core.

    The bench server gets ``ambient`` (its ``CWIST_*`` knobs apply), its backend and ``--workers 1``;
    a server command ``ambient`` and the peer's variables, and ``NGINX`` (the nginx binary) if given."""
    if peer.command is None:
        assert peer.backend is not None  # servers() gives every bench peer its backend
        return BenchServer(
            {**ambient, "CWIST_REACTOR_BACKEND": peer.backend}, host=host, workers=1, cpus=cpus
        )
    env = {**ambient, **peer.env, **({"NGINX": nginx} if nginx else {})}
    return CommandServer(peer.command, env, name=peer.key, host=host, cpus=cpus)
