"""Issue 33: io_uring rings sized for a normal user's locked-memory limit.

A ring's queues are locked memory: for a process without ``CAP_IPC_LOCK`` (any
user but root) the kernel charges them to ``RLIMIT_MEMLOCK``, shared by all
of that user's processes, and ``io_uring_setup`` fails with ENOMEM past it.
A stock limit is 8 MiB.  These tests run the real kernel under a real limit
(``tests/memlock_limit.py``, which also drops root's ``CAP_IPC_LOCK``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from http_helpers import IO_TIMEOUT_S, bench_env, run_bench, start_bench
from tailreactor import Config, Reactor

pytestmark = pytest.mark.io_uring

MEMLOCK = [sys.executable, str(Path(__file__).resolve().parent / "memlock_limit.py")]

#: Rings held at once by one process: more than the suite ever holds in one test.
RINGS = 64

HOLD_RINGS = """
import sys
from tailreactor import Config
from tailreactor.backends import IoUringBackend
entries = Config.default().uring_entries if sys.argv[2] == "default" else int(sys.argv[2])
held = []
try:
    for _ in range(int(sys.argv[1])):
        held.append(IoUringBackend(entries))
except OSError as exc:
    print(f"{len(held)} fit; then: {exc}")
else:
    print(f"{len(held)} fit")
"""


def hold_rings(kib: int, n: int, entries: str) -> str:
    done = subprocess.run(
        [*MEMLOCK, str(kib), "--", sys.executable, "-c", HOLD_RINGS, str(n), entries],
        capture_output=True,
        text=True,
        timeout=IO_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_ring_has_cwist_uring_entries_entries():
    r = Reactor("io_uring", config=Config.default().replace(uring_entries=64))
    try:
        assert r.backend._ring.sq_entries == 64
    finally:
        r.close()
    r = Reactor("io_uring")
    try:
        assert r.backend._ring.sq_entries == Config.default().uring_entries == 256
    finally:
        r.close()


def test_default_rings_fit_a_stock_8_mib_memlock_limit_and_cwists_4096_do_not():
    assert hold_rings(8 * 1024, RINGS, "default") == f"{RINGS} fit"
    assert hold_rings(8 * 1024, RINGS, "4096") != f"{RINGS} fit"  # 64 x ~390 KiB is over 8 MiB


def test_enomem_names_the_limit_and_both_ways_out():
    out = hold_rings(16, 1, "default")
    assert out.startswith("0 fit; then: ") and "errno ENOMEM" in out, out
    assert "RLIMIT_MEMLOCK 16 KiB" in out and "ulimit -l" in out and "CWIST_URING_ENTRIES" in out, out
    assert "256 entries" in out and "KiB of locked memory" in out, out


def test_bench_workers_that_do_not_fit_fall_back_to_epoll_with_one_line():
    srv = start_bench(
        ["--workers", "4"], env=bench_env(CWIST_URING_ENTRIES="256"), prefix=[*MEMLOCK, "64", "--"]
    )
    try:
        assert srv.backend == "epoll" and srv.workers == 4
        lines = srv.before.strip().splitlines()
        assert len(lines) == 1, srv.before
        # 64 KiB holds two rings of 256 entries, so the probe's first ring fits and the fourth does not,
        # unless other processes of this user hold locked memory at the same time (the kernel charges
        # the user, not the process: as nobody under xdist, other workers' rings count), and then the
        # first ring is refused already.  Either way: one line, the limit and both ways out.
        assert (
            "4 workers need 4 io_uring rings" in lines[0] or "ring setup failed; errno ENOMEM" in lines[0]
        ), lines[0]
        assert "RLIMIT_MEMLOCK 64 KiB" in lines[0], lines[0]
        assert "ulimit -l" in lines[0] and "CWIST_URING_ENTRIES" in lines[0] and "epoll" in lines[0]
    finally:
        code, err = srv.stop()
    assert code == 0, err
    assert "ENOMEM" not in err and "falling back" not in err, err  # no worker logs a line of its own


def test_bench_workers_on_an_explicit_io_uring_that_do_not_fit_exit_naming_the_limit():
    done = run_bench(
        ["--port", "0", "--workers", "4"],
        env=bench_env(CWIST_REACTOR_BACKEND="io_uring", CWIST_URING_ENTRIES="256"),
        prefix=[*MEMLOCK, "64", "--"],
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "RLIMIT_MEMLOCK 64 KiB" in lines[0] and "ulimit -l" in lines[0], done.stderr


def test_bench_workers_that_fit_run_on_io_uring():
    srv = start_bench(["--workers", "4"], prefix=[*MEMLOCK, str(8 * 1024), "--"])
    try:
        assert (srv.backend, srv.workers, srv.before) == ("io_uring", 4, "")
    finally:
        code, err = srv.stop()
    assert code == 0, err


def test_ring_memlock_counts_rings_until_enomem_under_a_limit():
    script = str(Path(__file__).resolve().parents[1] / "benchmarks" / "ring_memlock.py")
    done = subprocess.run(
        [*MEMLOCK, "1024", "--", sys.executable, script, "256"],
        capture_output=True,
        text=True,
        timeout=IO_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith("entries 256: ") and "under RLIMIT_MEMLOCK 1024 KiB (then errno 12)" in line, line
    assert int(line.split(": ")[1].split()[0]) <= 1024 // 28  # never more than the limit holds
