"""benchmarks/bytecodes.py: the deterministic per-request bytecode count runs and adds up.

The figures themselves are benchmarks (printed, never asserted against a
target); this only keeps the tool working: every server it knows runs,
answers every request, and its parts add up to its total.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bytecodes.py"


def run(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


def blocks(stdout: str) -> dict[str, tuple[float, dict[str, float]]]:
    """server -> (total per request, {part: per request}) from the report."""
    out, parts = {}, None
    for line in stdout.splitlines():
        head = re.match(r"(\S+): ([\d.]+) bytecodes/request \(\d+ requests\)", line)
        if head:
            parts = {}
            out[head[1]] = (float(head[2]), parts)
        elif line.strip() == "top functions:":
            parts = None  # function lines follow, not parts
        elif parts is not None:
            n, part = line.split(None, 1)
            parts[part] = float(n)
    return out


def test_bench_server_and_asyncio_peer_are_counted_by_part(backend_name):
    backend = backend_name
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CWIST_")}
    res = run(
        "--clients",
        "3",
        "--cycles",
        "2",
        "--top",
        "0",
        "--server",
        f"bench-{backend}",
        "--server",
        "asyncio",
        env=clean,
    )
    assert res.returncode == 0, res.stderr
    # The first line says what was counted: clock step, knobs, clients x requests.
    assert res.stdout.splitlines()[0] == (
        "bench server: clock step 0 us per read; CWIST_HTTP_KEEP_ALIVE_TIMEOUT=0; 3 clients x 2 requests"
    )
    got = blocks(res.stdout)
    assert set(got) == {f"bench-{backend}", "asyncio"}
    assert res.stdout.count("(6 requests)") == 2
    for server, (total, parts) in got.items():
        assert total > 0
        assert sum(parts.values()) == pytest.approx(total, abs=0.1 * len(parts)), (server, parts)
    bench_parts = set(got[f"bench-{backend}"][1])
    assert {"reactor core", "backend", "connection", "request parsing (shared)"} <= bench_parts
    # The peer parses with the bench server's own request code (tests/test_peers_parity.py).
    assert {"loop (asyncio)", "transport (asyncio)", "protocol (peer)", "request parsing (shared)"} <= set(
        got["asyncio"][1]
    )


def test_bad_arguments_get_one_clear_error():
    res = run("--cycles", "0")
    assert res.returncode == 2
    assert "--cycles must be >= 1, got" in res.stderr
    res = run("--top", "-1")
    assert res.returncode == 2 and "--top must be >= 0, got -1" in res.stderr
    res = run("--clients", "1001")
    assert res.returncode == 2 and "--clients must be 1 to 1000" in res.stderr
    res = run("--server", "nginx")
    assert res.returncode == 2 and "invalid choice: 'nginx'" in res.stderr
    # The bench server reads its knobs from the environment, and says which one is bad.
    res = run("--server", "bench-epoll", env={**os.environ, "CWIST_REACTOR_TAIL_US": "soon"})
    assert res.returncode == 2 and res.stdout == ""
    assert "CWIST_REACTOR_TAIL_US='soon' is invalid" in res.stderr
