"""The servers of ``peers``: the bench server on each backend, asyncio, uvloop and nginx.

Role
----
Issue 9 asks whether a policy experiment written on our reactor costs more
than the same app on asyncio or uvloop, and how far all of them are from what
one core can do.  :func:`servers` lists what a ``peers`` job runs, each with
the same answer to ``GET /`` (``200``, empty body, keep-alive):

=========================  =====================================================
``tailreactor-io_uring``   ``python -m tailreactor.http.server --workers 1``,
``tailreactor-epoll``      ``CWIST_REACTOR_BACKEND=io_uring`` / ``epoll``
``asyncio``                ``benchmarks/peers/asyncio_server.py`` (asyncio.Protocol
                           + httptools, the bench server's response bytes)
``uvloop``                 the same on uvloop (``--uvloop``)
``nginx``                  the C-speed ceiling: Debian's nginx, one worker,
                           ``return 200`` from memory (:func:`nginx_config`)
=========================  =====================================================

nginx is optional: without it the job says so in one line
(:data:`NGINX_MISSING`) and runs without the ceiling.  uvloop is required
(the ``bench`` extra of pyproject.toml).

Each server is a :class:`tailjob.server.ServerProcess`, started on a free
port on 127.0.0.1, ready at a line it prints on stderr:

* the Python peers print ``asyncio-peer: listening on H:P, pid N``;
* nginx, started in the foreground (``daemon off``) with its error log on
  stderr at ``notice``, prints ``start worker process N`` once its master has
  bound the socket and forked the worker.  Its config and every file it may
  write live in a temporary prefix directory made per run (``nginx -p``),
  removed when it stops.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import util as importlib_util
from pathlib import Path

from .server import BenchServer, ServerProcess

__all__ = [
    "Peer",
    "servers",
    "REFERENCES",
    "PEER_SCRIPT",
    "PythonPeer",
    "NginxServer",
    "nginx_config",
    "find_nginx",
    "nginx_version",
    "NGINX_MISSING",
    "uvloop_missing",
    "UVLOOP_MODULE",
    "make_server",
]

REPO = Path(__file__).resolve().parents[3]
PEER_SCRIPT = REPO / "benchmarks" / "peers" / "asyncio_server.py"

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
    """One server of the comparison: ``key`` in records, ``label`` in reports.

    ``kind`` is ``bench``, ``python`` or ``nginx``; ``backend`` the bench
    server's ``CWIST_REACTOR_BACKEND``; ``describe`` says how it runs.
    """

    key: str
    label: str
    kind: str
    describe: str
    backend: str | None = None
    options: tuple[str, ...] = field(default_factory=tuple)


def servers(*, nginx: str | None) -> list[Peer]:
    """The servers of a ``peers`` job, in report order; nginx only if its path is given."""
    out = [
        Peer(
            f"tailreactor-{b}",
            f"tailreactor ({b})",
            "bench",
            f"`python -m tailreactor.http.server --workers 1`, `CWIST_REACTOR_BACKEND={b}`",
            backend=b,
        )
        for b in ("io_uring", "epoll")
    ]
    out += [
        Peer(
            "asyncio",
            "asyncio",
            "python",
            "`benchmarks/peers/asyncio_server.py` (asyncio.Protocol + httptools)",
        ),
        Peer(
            "uvloop",
            "uvloop",
            "python",
            "`benchmarks/peers/asyncio_server.py --uvloop`",
            options=("--uvloop",),
        ),
    ]
    if nginx:
        out.append(
            Peer(
                "nginx",
                "nginx (ceiling)",
                "nginx",
                "Debian's nginx, one worker, `return 200` from memory, config written per run",
            )
        )
    return out


def uvloop_missing() -> str | None:
    """None if uvloop imports in this Python (the peers run on it), else a one-line error."""
    if importlib_util.find_spec(UVLOOP_MODULE) is not None:
        return None
    return (
        f"peers needs uvloop, which {sys.executable} cannot import: pip install -e '.[bench]' "
        "(scripts/bootstrap.sh installs it)"
    )


def find_nginx(path: str | None = None, fallbacks: tuple[str, ...] = ("/usr/sbin/nginx",)) -> str | None:
    """nginx's path: on ``PATH`` (``path`` overrides it), else the first executable fallback.

    Debian installs it in /usr/sbin, which is not on every user's PATH.
    """
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


def nofile_limit() -> int:
    """The hard RLIMIT_NOFILE (65536 if unlimited): what nginx may raise its descriptors to,
    as the bench server raises its soft limit to the hard one."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 65536 if hard == resource.RLIM_INFINITY else hard


def nginx_config(*, host: str, port: int, prefix: Path, nofile: int = 65536) -> str:
    """The ceiling's nginx.conf: one worker, foreground, ``GET /`` -> 200 empty body from memory.

    Like the bench server's answer: status 200, ``Content-Length: 0``, no
    Content-Type, keep-alive for as many requests as wrk sends (nginx closes
    a connection after 1000 by default).  nginx adds ``Server`` and ``Date``
    headers, which it cannot leave out; wrk ignores them.  Every path nginx
    may write (pid, temp directories) is under ``prefix``; the access log is
    off and the error log goes to stderr.  ``nofile``: descriptors for the
    worker (:func:`nofile_limit`); it bounds the connections too.
    """
    p = Path(prefix)
    temp = "\n".join(
        f"    {kind}_temp_path {p / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""# The ceiling of tailreactor's peers comparison; written per run by scripts/ci/tailjob/peers.py.
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile {nofile};
pid {p / "nginx.pid"};
error_log stderr notice;

events {{
    worker_connections {nofile};
}}

http {{
    access_log off;
    server_tokens off;
    default_type "";
    keepalive_timeout 75s;
    keepalive_requests 1000000000;
{temp}

    server {{
        listen {host}:{port} backlog=4096;
        location = / {{ return 200 ""; }}
        location / {{ return 404; }}
    }}
}}
"""


class PythonPeer(ServerProcess):
    """``benchmarks/peers/asyncio_server.py`` (``--uvloop`` for uvloop)."""

    READY = re.compile(r"(?P<backend>asyncio|uvloop)-peer: listening on ")
    WHAT = "asyncio peer"

    def __init__(
        self, env: Mapping[str, str], *, options: tuple[str, ...] = (), python: str = sys.executable, **kw
    ):
        super().__init__(env, **kw)
        self.options, self.python = options, python

    def command(self) -> list[str]:
        return [self.python, str(PEER_SCRIPT), "--host", self.host, "--port", str(self.port), *self.options]


class NginxServer(ServerProcess):
    """nginx with :func:`nginx_config` in a temporary prefix directory (removed at stop)."""

    READY = re.compile(r"start worker process \d+")
    WHAT = "nginx"

    def __init__(self, env: Mapping[str, str], *, binary: str, **kw):
        super().__init__(env, **kw)
        self.binary = binary
        self.prefix: Path | None = None

    def command(self) -> list[str]:
        assert self.prefix is not None
        # -e: the error log before the config is read (else /var/log/nginx/error.log)
        return [self.binary, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf"), "-e", "stderr"]

    def on_ready(self, match: re.Match) -> None:
        self.backend = "nginx"

    def prepare(self) -> None:
        # The config names the port, so it is written for each launch (a retry has a fresh port).
        assert self.port is not None  # start() chose it
        if self.prefix is None:
            self.prefix = Path(tempfile.mkdtemp(prefix="tailreactor-nginx-"))
        (self.prefix / "nginx.conf").write_text(
            nginx_config(host=self.host, port=self.port, prefix=self.prefix, nofile=nofile_limit())
        )

    def stop(self, timeout_s: float = 10.0) -> list[str]:
        flags = super().stop(timeout_s)
        if self.prefix is not None:
            shutil.rmtree(self.prefix, ignore_errors=True)
        return flags


def make_server(
    peer: Peer, *, ambient: Mapping[str, str], host: str, cpus: str | None, nginx: str | None
) -> ServerProcess:
    """A not yet started server process for ``peer``.

    The bench server gets this process's environment (ambient ``CWIST_*``
    knobs apply) plus its backend, and ``--workers 1``: every server of the
    comparison is one process serving on one core.
    """
    if peer.kind == "bench":
        if peer.backend is None:
            raise ValueError(f"the bench peer {peer.key!r} needs a backend")
        return BenchServer(
            {**ambient, "CWIST_REACTOR_BACKEND": peer.backend}, host=host, workers=1, cpus=cpus
        )
    if peer.kind == "python":
        return PythonPeer(dict(ambient), options=peer.options, host=host, cpus=cpus)
    if peer.kind == "nginx":
        if nginx is None:
            raise ValueError("the nginx peer needs nginx's path")
        return NginxServer(dict(ambient), binary=nginx, host=host, cpus=cpus)
    raise ValueError(f"peer kind {peer.kind!r}: accepted bench, python, nginx")
