"""Where a server's time goes under wrk: a py-spy sampling profile, by part and by line.

Role
----
Issue 9 asks for a profile (py-spy or pyinstrument) of the per-request path.
This starts one server of the ``--peers`` comparison (the bench server on a
backend, or the asyncio or uvloop peer) pinned to CPU 0, warms it up with
wrk, then samples its Python stacks with ``py-spy record`` while ``wrk -t1
-c<connections>`` (pinned to CPU 1) loads it, and prints:

* **by part**: the share of samples whose innermost Python frame is in each
  part of the code (the parts of ``benchmarks/bytecodes.py``: reactor core,
  backend, connection, the request parsing the bench server and the peers
  share, routes; for the peers the asyncio loop and transport);
* **top lines**: the innermost lines that take the most samples, with their
  source.

What a share means: py-spy samples wall-clock time, and the server is busy
all the time under wrk, so a share is a share of the server's CPU time.
Time in C under a Python line counts for that line -- the kernel's work in
``send`` for the line that calls ``sock.send``, httptools' C parser for the
``feed_data`` line -- which is what shows that most of a request's time is
the two syscalls, not the reactor.  ``bytecodes.py`` and
``instructions.py`` count the Python side exactly; this profile shows it
next to the syscalls.  uvloop's loop is C: its time lands on the peer's
``loop.run_forever()`` line and on the protocol's lines.

py-spy stops the server for each sample (its default): ``--nonblocking``
sampling was tried and put up to 14 % of the samples on ``return`` lines,
stacks read while they changed.  The stops cost the same per sample for
every server, so compare servers at one ``--rate`` (samples per second);
requests/s under the profiler are lower than without it.  py-spy reads another process's
memory: it needs ptrace (root, or ``kernel.yama.ptrace_scope`` 0, or
``CAP_SYS_PTRACE`` in a container); without it the tool says so in one line.

Usage: ``python benchmarks/pyspy_profile.py [--server bench-epoll] [--server asyncio ...]
[--connections 256] [--duration 8] [--rate 250] [--top 12] [--set K=V ...]``
(default: bench-epoll, bench-io_uring, asyncio, uvloop).  Needs ``py-spy``
(the ``bench`` extra; ``scripts/bootstrap.sh`` installs it) and ``wrk``.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts" / "ci"))

from bytecodes import part_of  # noqa: E402
from instructions import SERVERS, add_load_options, load_env, peer_of, pin, run_wrk  # noqa: E402
from tailjob.peers import make_server  # noqa: E402
from tailjob.server import ServerError  # noqa: E402

#: One frame of py-spy's raw output: ``function (file:line)``.
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")


def parse_raw(text: str) -> collections.Counter:
    """Samples per innermost frame ``(file, line, function)`` from ``py-spy record --format raw``.

    Each line of that format is a stack, outermost first, frames joined by
    ``;``, then a space and the number of samples.
    """
    leaves: collections.Counter = collections.Counter()
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        m = FRAME.match(stack.rsplit(";", 1)[-1])
        key = (m["file"], int(m["line"]), m["function"]) if m else ("?", 0, stack.rsplit(";", 1)[-1])
        leaves[key] += int(n)
    return leaves


def _module_path(file: str) -> str:
    """py-spy names the peer script by its bare name; the parts know it as ``peers/<name>``."""
    return f"peers/{file}" if "/" not in file and (HERE / "peers" / file).exists() else file


def source_line(file: str, line: int) -> str:
    """The text of ``file``'s line, where py-spy names a module path (``asyncio/events.py``)."""
    candidates = [HERE / "peers" / file]
    if file.endswith(".py"):
        name = file[:-3].replace("/", ".")
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            candidates.insert(0, Path(spec.origin))
    candidates.append(Path(file))
    for path in candidates:
        try:
            return path.read_text().splitlines()[line - 1].strip()
        except (OSError, IndexError):
            continue
    return ""


def report(name: str, leaves: collections.Counter, requests_per_s: float, top: int) -> str:
    total = sum(leaves.values())
    lines = [f"{name}: {total:,} samples, {requests_per_s:,.0f} requests/s under the profiler", "  by part:"]
    parts: collections.Counter = collections.Counter()
    for (file, _, function), n in leaves.items():
        parts[part_of(_module_path(file), function)] += n
    for part, n in parts.most_common():
        lines.append(f"    {100 * n / total:5.1f}%  {part}")
    if top:
        lines.append("  top lines (self time):")
        for (file, line, function), n in leaves.most_common(top):
            lines.append(
                f"    {100 * n / total:5.1f}%  {Path(file).name}:{line} {function}  {source_line(file, line)}"
            )
    return "\n".join(lines)


def profile(
    name: str,
    *,
    py_spy: str,
    connections: int,
    duration_s: int,
    warmup_s: int,
    rate: int,
    env: dict[str, str],
) -> tuple[collections.Counter, float]:
    """(samples per innermost frame, wrk's requests/s) of server ``name`` under load."""
    two_cpus = (os.cpu_count() or 1) >= 2
    server = make_server(
        peer_of(name), ambient=env, host="127.0.0.1", cpus="0" if two_cpus else None, nginx=None
    )
    server.start()
    wrk = None
    try:
        url = f"http://127.0.0.1:{server.port}/"
        run_wrk(url, min(connections, 64), warmup_s)
        # wrk runs past both ends of the sampling window, so every sample is of a loaded server.
        wrk = subprocess.Popen(
            [*pin("1"), "wrk", "-t1", f"-c{connections}", f"-d{duration_s + 2}s", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with tempfile.TemporaryDirectory(prefix="pyspy-") as tmp:
            raw = Path(tmp) / "profile.txt"
            spy = subprocess.run(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(server.pid),
                    "--duration",
                    str(duration_s),
                    "--rate",
                    str(rate),
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                ],
                capture_output=True,
                text=True,
                timeout=duration_s + 60,
                check=False,
            )
            text = raw.read_text() if raw.exists() else ""
        out, err = wrk.communicate(timeout=duration_s + 60)
    finally:
        if wrk is not None and wrk.poll() is None:  # interrupted: no wrk left behind
            wrk.kill()
            wrk.wait()
        server.stop()
    if spy.returncode != 0 or not text:
        detail = (spy.stderr.strip() or spy.stdout.strip()).splitlines()
        raise PermissionError(
            f"py-spy cannot attach to the server (pid {server.pid}): "
            f"{detail[-1] if detail else 'no samples'}; it needs ptrace "
            f"(root, kernel.yama.ptrace_scope=0 or CAP_SYS_PTRACE)"
        )
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if wrk.returncode != 0 or m is None:
        raise RuntimeError(f"wrk failed: {err.strip() or out.strip()}")
    if float(m[1]) == 0:
        raise RuntimeError(
            "wrk completed no request under the profiler; too many connections for this machine's limits?"
        )
    return parse_raw(text), float(m[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_options(ap, duration_s=8, warmup_s=2, what="sampled")
    ap.add_argument("--rate", type=int, default=250, help="samples per second (default 250)")
    ap.add_argument("--top", type=int, default=12, help="lines listed per server (default 12)")
    ap.add_argument("--py-spy", help="the py-spy binary (default: the one next to this Python, else on PATH)")
    args = ap.parse_args(argv)
    if not 1 <= args.rate <= 1000:
        ap.error(f"--rate must be 1 to 1000, got {args.rate}")
    if args.top < 0:
        ap.error(f"--top must be >= 0, got {args.top}")
    env = load_env(ap, args, "pyspy_profile")
    if env is None:
        return 2
    if args.py_spy is not None:
        if not (os.path.isfile(args.py_spy) and os.access(args.py_spy, os.X_OK)):
            ap.error(f"--py-spy {args.py_spy} is not an executable file")
        py_spy = args.py_spy
    else:
        beside = Path(sys.executable).parent / "py-spy"
        py_spy = str(beside) if os.access(beside, os.X_OK) else shutil.which("py-spy")
    if py_spy is None:
        print(
            "pyspy_profile: py-spy is not installed; install it: pip install -e '.[bench]' "
            "(scripts/bootstrap.sh does)",
            file=sys.stderr,
        )
        return 2
    if shutil.which("wrk") is None:
        print("pyspy_profile: wrk is not installed; install it: scripts/bootstrap.sh --wrk", file=sys.stderr)
        return 2
    first = (
        subprocess.run([py_spy, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()
        or [""]
    )[0]
    if not first.startswith("py-spy "):
        print(f"pyspy_profile: {py_spy} is not py-spy: its --version printed {first!r}", file=sys.stderr)
        return 2
    version = first.split()[-1:]
    print(
        f"pyspy_profile: py-spy {' '.join(version)}, {args.rate} samples/s for {args.duration} s of "
        f"wrk -t1 -c{args.connections} (server on CPU 0, wrk on CPU 1 when there are two)"
    )
    for name in args.server or SERVERS:
        try:
            leaves, rps = profile(
                name,
                py_spy=py_spy,
                connections=args.connections,
                duration_s=args.duration,
                warmup_s=args.warmup,
                rate=args.rate,
                env=env,
            )
        except (PermissionError, RuntimeError, ServerError) as exc:
            print(f"pyspy_profile: {name}: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("pyspy_profile: interrupted", file=sys.stderr)
            return 130
        print(report(name, leaves, rps, args.top), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
