"""benchmarks/instructions.py: callgrind's instructions per request of a real server under real wrk.

No figure is asserted (figures are benchmarks); this keeps the tool working:
a short real run of the bench server prints a plausible count, and missing
tools or bad arguments get one clear line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "instructions.py"


def run(*args: str, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("wrk") is None,
    reason="needs valgrind and wrk; install them: apt-get install valgrind wrk",
)
def test_a_short_real_run_of_the_bench_server_is_counted():
    res = run("--server", "bench-epoll", "--connections", "8", "--duration", "2", "--warmup", "1")
    assert res.returncode == 0, res.stderr
    m = re.fullmatch(
        r"bench-epoll: ([\d,]+) instructions/request \(([\d,]+) instructions, ([\d,]+) requests\)\n",
        res.stdout,
    )
    assert m, res.stdout
    per_request, total, requests = (int(g.replace(",", "")) for g in m.groups())
    # Fewer than 100 requests per connection (likely, for 2 s under valgrind): the tool says so.
    assert ("under 100 the figure reads high" in res.stderr) == (requests < 100 * 8)
    assert requests > 0 and total > 0
    # A Python request is thousands of instructions, and far from the whole run's total.
    assert 5_000 < per_request < total


def test_missing_tools_are_named_with_how_to_install(tmp_path):
    # A PATH with python's directory and nothing else: no valgrind, no wrk.
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    res = run("--server", "asyncio", env=env, timeout=300)
    assert res.returncode == 2
    assert "is not on PATH; install it:" in res.stderr and res.stdout == ""


def test_bad_arguments_get_one_clear_error():
    res = run("--set", "CWIST_REACTOR_TAIL_US", timeout=300)
    assert res.returncode == 2 and "--set takes K=V, got 'CWIST_REACTOR_TAIL_US'" in res.stderr
    res = run("--duration", "0", timeout=300)
    assert res.returncode == 2 and "must be >= 1" in res.stderr
    res = run("--set", "CWIST_REACTOR_TAIL_US=abc", timeout=300)
    assert res.returncode == 2 and res.stdout == ""
    assert "instructions: CWIST_REACTOR_TAIL_US='abc' is invalid" in res.stderr
    res = run("--set", "CWIST_WORKERS=4", timeout=300)
    assert res.returncode == 2 and "--set CWIST_WORKERS is not accepted" in res.stderr
