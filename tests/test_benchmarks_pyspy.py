"""benchmarks/pyspy_profile.py: a py-spy sampling profile of a real server under real wrk (issue 9).

No share is asserted (figures are benchmarks); this keeps the tool working: a
short real run of the bench server and of the asyncio peer prints parts that
add up to the whole and top lines with their source, and missing tools or bad
arguments get one clear line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "pyspy_profile.py"
PY_SPY = Path(sys.executable).parent / "py-spy"


def run(*args: str, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def blocks(text: str) -> dict[str, dict]:
    """{server: {"samples": n, "parts": {part: %}, "lines": [(%, where, source)]}} from the output."""
    out, cur, section = {}, None, None
    for line in text.splitlines():
        m = re.match(r"(\S+): ([\d,]+) samples, ([\d,]+) requests/s under the profiler$", line)
        if m:
            cur = out[m[1]] = {"samples": int(m[2].replace(",", "")), "parts": {}, "lines": []}
            continue
        if line.strip() in ("by part:", "top lines (self time):"):
            section = line.strip()
            continue
        m = re.match(r"\s+([\d.]+)%  (.+)$", line)
        if cur is not None and m:
            if section == "by part:":
                cur["parts"][m[2]] = float(m[1])
            else:
                where, _, source = m[2].partition("  ")
                cur["lines"].append((float(m[1]), where, source.strip()))
    return out


@pytest.mark.bench_extras  # py-spy; without it, or without wrk, skipped with how to install it
@pytest.mark.wrk
def test_a_short_real_run_profiles_the_bench_server_and_the_asyncio_peer():
    res = run(
        "--server",
        "bench-epoll",
        "--server",
        "asyncio",
        "--connections",
        "16",
        "--duration",
        "2",
        "--warmup",
        "1",
        "--top",
        "5",
    )
    if res.returncode == 2 and "cannot attach" in res.stderr:
        pytest.skip(res.stderr.strip())  # a sandbox without ptrace: the tool says so in one line
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("pyspy_profile: py-spy ")
    got = blocks(res.stdout)
    assert set(got) == {"bench-epoll", "asyncio"}
    for server, b in got.items():
        assert b["samples"] > 0, server
        assert sum(b["parts"].values()) == pytest.approx(100.0, abs=0.1 * len(b["parts"])), (server, b)
        assert 0 < len(b["lines"]) <= 5
        shares = [share for share, _, _ in b["lines"]]
        assert shares == sorted(shares, reverse=True)
    # Which parts a 2 s profile samples depends on what the machine lets the server run (a busy one
    # leaves a handful of samples); that every sample lands in a named part of its own server's code
    # does not.  The attribution itself: benchmarks/bytecodes.py's PARTS, tested with it.
    own = {
        "bench-epoll": {
            "request parsing (shared)",
            "connection",
            "routes (shared)",
            "backend",
            "reactor core",
            "other",
        },
        "asyncio": {
            "request parsing (shared)",
            "routes (shared)",
            "protocol (peer)",
            "transport (asyncio)",
            "loop (asyncio)",
            "other",
        },
    }
    for server, b in got.items():
        assert b["parts"] and set(b["parts"]) <= own[server], (server, b["parts"])
    # Every top line names its file and line and shows that line's source.
    for _, where, source in got["bench-epoll"]["lines"]:
        assert re.fullmatch(r"\S+\.py:\d+ \S+", where), where
        assert source, where


@pytest.mark.bench_extras  # py-spy must be there for the missing wrk to be the one named
def test_missing_tools_are_named_with_how_to_install():
    env = {**os.environ, "PATH": "/nonexistent"}  # no wrk (py-spy is found next to python)
    res = run("--server", "asyncio", env=env, timeout=300)
    assert res.returncode == 2 and res.stdout == ""
    assert "wrk is not installed; install it: scripts/bootstrap.sh --wrk" in res.stderr


@pytest.mark.wrk  # the tool looks for wrk before it checks --py-spy
def test_bad_arguments_get_one_clear_error():
    res = run("--duration", "0", timeout=300)
    assert res.returncode == 2 and "must be >= 1" in res.stderr
    res = run("--rate", "5000", timeout=300)
    assert res.returncode == 2 and "--rate must be 1 to 1000, got 5000" in res.stderr
    res = run("--set", "CWIST_REACTOR_TAIL_US=abc", timeout=300)
    assert res.returncode == 2 and res.stdout == ""
    assert "pyspy_profile: CWIST_REACTOR_TAIL_US='abc' is invalid" in res.stderr
    # A py-spy named on the command line is used or refused, never silently replaced.
    res = run("--py-spy", "/nonexistent/py-spy", timeout=300)
    assert res.returncode == 2 and "--py-spy /nonexistent/py-spy is not an executable file" in res.stderr
    res = run("--py-spy", "/bin/false", timeout=300)
    assert res.returncode == 2 and "/bin/false is not py-spy" in res.stderr
    # --server chooses the backend; a knob that would silently lose to it is refused.
    res = run("--set", "CWIST_REACTOR_BACKEND=io_uring", timeout=300)
    assert res.returncode == 2 and "--set CWIST_REACTOR_BACKEND is not accepted" in res.stderr
