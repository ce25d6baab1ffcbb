"""User-space instructions per request of one server process under wrk, counted by callgrind.

Role
----
CPU time per request on a shared 2-core VM moves by about 20 % from run to
run; the number of instructions a server executes per request does not
depend on the machine's load.  This starts one server of the ``--peers``
comparison (the bench server on a backend, or the asyncio or uvloop peer)
under ``valgrind --tool=callgrind``, warms it up with wrk, zeroes the
counters (``callgrind_control --zero``), runs ``wrk -t1 -c<connections>
-d<duration>s``, dumps the counters (``callgrind_control --dump``) and
divides the instructions by the requests wrk completed.

What it counts: every user-space instruction of the server process (Python
interpreter, httptools, libc), none of the kernel's.  The window also holds
the accept and close of wrk's connections and the requests still in flight
when wrk stops (at most one per connection), so short runs read a little
high: keep ``requests / connections`` in the hundreds.  Callgrind runs the
server about 50 times slower, so a run takes ``duration`` plus a few
seconds of start-up.

Usage: ``python benchmarks/instructions.py [--server bench-epoll] [--server asyncio ...]
[--connections 256] [--duration 15] [--set K=V ...]`` (default: bench-epoll,
bench-io_uring, asyncio, uvloop; ``--set`` adds ``CWIST_*`` knobs to every
server's environment).  Needs ``valgrind`` (``apt-get install valgrind``)
and ``wrk`` (``scripts/bootstrap.sh --wrk``); says so in one line and exits
2 without them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "ci"))

from tailjob.peers import make_server, servers
from tailjob.server import ServerError
from tailreactor.config import ConfigError, load

SERVERS = ("bench-epoll", "bench-io_uring", "asyncio", "uvloop")
#: wrk's line with the count of completed requests.
REQUESTS = re.compile(r"(\d+) requests in ")


def peer_of(name: str):
    """The --peers entry of a server name of :data:`SERVERS`."""
    key = "tailreactor-" + name.split("-", 1)[1] if name.startswith("bench-") else name
    return next(p for p in servers(nginx=None) if p.key == key)


def pin(cpu: str) -> list[str]:
    """``taskset -c cpu`` where there are two CPUs to pin to, else nothing."""
    return ["taskset", "-c", cpu] if (os.cpu_count() or 1) >= 2 else []


def run_wrk(url: str, connections: int, duration_s: int) -> int:
    """Run wrk (pinned to CPU 1 when there are two); the requests it completed."""
    argv = [*pin("1"), "wrk", "-t1", f"-c{connections}", f"-d{duration_s}s", url]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + 60, check=False)
    m = REQUESTS.search(out.stdout)
    if out.returncode != 0 or m is None:
        raise RuntimeError(f"wrk failed ({' '.join(argv)}): {out.stderr.strip() or out.stdout.strip()}")
    if int(m[1]) == 0:
        raise RuntimeError(
            f"wrk completed no request ({' '.join(argv)}); too many connections for this machine's limits?"
        )
    return int(m[1])


def _control(option: str, pid: int) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True, capture_output=True, timeout=60)


def _summary(dump: Path) -> int:
    """The instruction total of one callgrind dump file (its ``summary:`` line)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"{dump}: no summary line; is it a callgrind dump?")


def measure(
    name: str, *, connections: int, duration_s: int, warmup_s: int, env: dict[str, str]
) -> tuple[int, int]:
    """(instructions, requests) of server ``name`` (one of :data:`SERVERS`) over one wrk run."""
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        out = Path(tmp) / "callgrind.out"
        server = make_server(peer_of(name), ambient=env, host="127.0.0.1", cpus=None, nginx=None)
        inner = server.command
        # Wrap the server's own command; pinned to CPU 0 outside valgrind.
        server.command = lambda: [
            *pin("0"),
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            *inner(),
        ]
        server.start_timeout_s = 180.0  # Python starts slowly under valgrind
        server.start()
        try:
            url = f"http://127.0.0.1:{server.port}/"
            run_wrk(url, min(connections, 64), warmup_s)
            _control("--zero", server.pid)
            requests = run_wrk(url, connections, duration_s)
            _control("--dump", server.pid)
        finally:
            server.stop(timeout_s=60.0)
        dumps = sorted(Path(tmp).glob("callgrind.out.*"))  # the explicit dump, not the exit one
        if not dumps:
            raise RuntimeError("callgrind wrote no dump file")
        return _summary(dumps[0]), requests


def add_load_options(ap: argparse.ArgumentParser, *, duration_s: int, warmup_s: int, what: str) -> None:
    """``--server``, ``--connections``, ``--duration``, ``--warmup`` and ``--set`` (shared with pyspy_profile.py)."""
    ap.add_argument("--server", action="append", choices=SERVERS, help="repeatable; default: all")
    ap.add_argument("--connections", type=int, default=256, help="wrk -c (default 256)")
    ap.add_argument("--duration", type=int, default=duration_s, help=f"seconds {what} (default {duration_s})")
    ap.add_argument(
        "--warmup", type=int, default=warmup_s, help=f"seconds of wrk first, not {what} (default {warmup_s})"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="K=V",
        help="an environment variable for every server, e.g. CWIST_REACTOR_TAIL_US=0 "
        "(not the backend or the workers: --server sets those)",
    )


#: Knobs the tools set themselves: the backend from --server, one worker per server.
FIXED_KNOBS = ("CWIST_REACTOR_BACKEND", "CWIST_WORKERS")


def load_env(ap: argparse.ArgumentParser, args, tool: str) -> dict[str, str] | None:
    """The servers' environment: this one plus ``--set``.  A bad option is ``ap.error`` (exit 2);
    a bad ``CWIST_*`` knob prints one line and returns None (exit 2 too): a clear line now,
    not a server that never starts."""
    env = dict(os.environ)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--set takes K=V, got {item!r}")
        if key in FIXED_KNOBS:
            ap.error(
                f"--set {key} is not accepted: --server chooses the backend, and every server runs one worker"
            )
        env[key] = value
    if min(args.connections, args.duration, args.warmup) < 1:
        ap.error("--connections, --duration and --warmup must be >= 1")
    try:
        load(env)
    except ConfigError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return None
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_options(ap, duration_s=15, warmup_s=3, what="counted")
    args = ap.parse_args(argv)
    env = load_env(ap, args, "instructions")
    if env is None:
        return 2
    for tool, how in (
        ("valgrind", "apt-get install valgrind"),
        ("callgrind_control", "apt-get install valgrind"),
        ("wrk", "scripts/bootstrap.sh --wrk"),
    ):
        if shutil.which(tool) is None:
            print(f"instructions: {tool} is not on PATH; install it: {how}", file=sys.stderr)
            return 2
    for name in args.server or SERVERS:
        try:
            instructions, requests = measure(
                name, connections=args.connections, duration_s=args.duration, warmup_s=args.warmup, env=env
            )
        except (RuntimeError, ServerError) as exc:
            print(f"instructions: {name}: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("instructions: interrupted", file=sys.stderr)
            return 130
        print(
            f"{name}: {instructions / requests:,.0f} instructions/request "
            f"({instructions:,} instructions, {requests:,} requests)",
            flush=True,
        )
        if requests < 100 * args.connections:
            print(
                f"instructions: {name} completed {requests / args.connections:.0f} requests per "
                f"connection; under 100 the figure reads high (connection set-up and the requests "
                f"in flight at the end count): raise --duration",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
