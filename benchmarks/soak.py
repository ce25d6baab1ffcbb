"""Soak the bench server: wrk in bursts for a long time, watching descriptors and memory.

Issue 8 ("nothing leaks"): run ``tailreactor-bench`` for ``--duration`` seconds
(default 600) under bursts of ``wrk -t2 -c1024`` and print, after each burst,
one row: the server's open descriptors (``/proc/PID/fd``, counted once the
burst's connections have closed), its resident memory (``VmRSS``) and peak
(``VmHWM``), and what wrk saw.  A leak shows as a column that keeps climbing;
a healthy server's descriptors return to the idle count after every burst and
its RSS levels off after the first few.  Not run in CI (it takes minutes);
the machine should be otherwise quiet if the request rates matter to you.

    python benchmarks/soak.py                          # 10 minutes, auto backend
    python benchmarks/soak.py --duration 120 --backend io_uring --burst 5 --pause 1

Exit status: 0 if descriptors came back to the idle count after every burst
and the server stopped with exit 0 on SIGTERM; 1 otherwise (the table shows
where).  Load targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import time

START_RE = re.compile(
    r"listening on [\d.]+:(?P<port>\d+), backend (?P<backend>\S+), workers \d+, pid (?P<pid>\d+)"
)
#: How long to wait for a burst's connections to leave /proc/PID/fd (s).
SETTLE_S = 10.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600, help="total seconds of soak (default 600)")
    p.add_argument("--burst", type=int, default=5, help="seconds per wrk burst (default 5)")
    p.add_argument("--pause", type=float, default=1.0, help="idle seconds between bursts (default 1)")
    p.add_argument("--connections", type=int, default=1024, help="wrk -c (default 1024)")
    p.add_argument("--threads", type=int, default=2, help="wrk -t (default 2)")
    p.add_argument("--backend", default="auto", help="CWIST_REACTOR_BACKEND (default auto)")
    p.add_argument("--path", default="/", help="request path (default /)")
    return p.parse_args(argv)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1])
    return out


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle(pid: int, baseline: int) -> tuple[int, float]:
    """Poll until ``pid`` is back to ``baseline`` descriptors (or SETTLE_S); return (count, seconds)."""
    t0 = time.monotonic()
    while (n := open_fds(pid)) != baseline and time.monotonic() - t0 < SETTLE_S:
        time.sleep(0.01)
    return n, time.monotonic() - t0


def start_server(backend: str) -> tuple[subprocess.Popen, int, int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CWIST_")}
    env["CWIST_REACTOR_BACKEND"] = backend
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailreactor.http.server", "--port", "0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    seen = ""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if select.select([proc.stderr], [], [], 0.5)[0]:
            chunk = os.read(proc.stderr.fileno(), 4096).decode(errors="replace")
            if not chunk:
                break
            seen += chunk
            m = START_RE.search(seen)
            if m:
                return proc, int(m["port"]), int(m["pid"]), m["backend"]
    proc.kill()
    raise SystemExit(f"soak: the server did not start: {seen!r}")


def wrk_burst(wrk: str, args: argparse.Namespace, port: int) -> dict[str, str]:
    done = subprocess.run(
        [
            wrk,
            f"-t{args.threads}",
            f"-c{args.connections}",
            f"-d{args.burst}s",
            f"http://127.0.0.1:{port}{args.path}",
        ],
        capture_output=True,
        text=True,
        timeout=args.burst + 60,
        check=False,
    )
    out = done.stdout
    reqs = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests": reqs.group(1) if reqs else "?",
        "rps": rps.group(1) if rps else "?",
        "errors": errors.group(1).strip() if errors else "none",
        "non2xx": non2xx.group(1) if non2xx else "0",
        "code": str(done.returncode),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    wrk = shutil.which("wrk")
    if not wrk:
        raise SystemExit("soak: wrk is not installed (scripts/bootstrap.sh --wrk installs it)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 64
    if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # wrk inherits it

    proc, port, pid, backend = start_server(args.backend)
    ok = True
    try:
        idle_fds = open_fds(pid)
        idle = proc_status(pid)
        print(
            f"soak: tailreactor-bench pid {pid}, backend {backend}, port {port}; wrk -t{args.threads} "
            f"-c{args.connections} bursts of {args.burst}s every {args.burst + args.pause:g}s "
            f"for {args.duration:g}s"
        )
        print(f"idle: {idle_fds} fds, RSS {idle['VmRSS']} KiB")
        header = (
            f"{'t(s)':>6} {'burst':>5} {'requests':>9} {'req/s':>9} {'fds':>4} {'settle(s)':>9} "
            f"{'RSS KiB':>8} {'HWM KiB':>8}  wrk errors"
        )
        print(header)
        print("-" * len(header))
        t0 = time.monotonic()
        burst = 0
        rows = []
        while time.monotonic() - t0 < args.duration:
            burst += 1
            w = wrk_burst(wrk, args, port)
            fds, took = settle(pid, idle_fds)
            st = proc_status(pid)
            if fds != idle_fds or w["code"] != "0":
                ok = False
            errors = w["errors"] + ("" if w["non2xx"] == "0" else f"; non-2xx {w['non2xx']}")
            print(
                f"{time.monotonic() - t0:6.0f} {burst:5d} {w['requests']:>9} {w['rps']:>9} {fds:4d} "
                f"{took:9.2f} {st['VmRSS']:8d} {st['VmHWM']:8d}  {errors}",
                flush=True,
            )
            rows.append((fds, st["VmRSS"]))
            time.sleep(args.pause)  # an idle gap between bursts, as between real load spikes
        rss = [r for _, r in rows]
        if rss:
            half = len(rss) // 2
            print(
                f"summary: {burst} bursts; fds idle {idle_fds}, after every burst "
                f"{'equal' if all(f == idle_fds for f, _ in rows) else 'NOT equal'}; "
                f"RSS KiB idle {idle['VmRSS']}, first burst {rss[0]}, max {max(rss)}, last {rss[-1]}; "
                f"max of the first half {max(rss[:half] or rss)}, of the second half {max(rss[half:])}"
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -9
        print(f"server exit status after SIGTERM: {code}")
        ok = ok and code == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
