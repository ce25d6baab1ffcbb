"""The job where the kernel refuses io_uring (Docker's default seccomp profile): io_uring is skipped with
the reason when it was not asked for, and an explicit request for it is a clear error (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tailjob_testdata import CI_DIR

pytestmark = pytest.mark.wrk  # skipped without wrk (tests/conftest.py)

DENY_IO_URING = [sys.executable, str(Path(__file__).resolve().parents[1] / "seccomp_deny.py"), "EPERM", "--"]
TINY = ["--threads", "1", "--connections", "8", "--duration", "1", "--runs", "1", "--no-warmup"]


def job(tmp_path, *args):
    return subprocess.run(
        [*DENY_IO_URING, sys.executable, str(CI_DIR / "tail_latency.py"), *args, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_default_backends_skip_io_uring_with_the_reason_and_measure_epoll(tmp_path):
    out = job(tmp_path, "--ab", "tail", *TINY)
    assert out.returncode == 0, out.stderr[-2000:]
    skipped = [line for line in out.stderr.splitlines() if "io_uring skipped" in line]
    assert len(skipped) == 1 and "EPERM" in skipped[0], out.stderr[-2000:]
    assert "epoll, c8: no verdict" in out.stdout
    assert "io_uring, c8" not in out.stdout
    line = json.loads((tmp_path / "tail-latency.jsonl").read_text())
    assert [leg["backend"] for leg in line["legs"]] == ["epoll"]


@pytest.mark.parametrize("args", [["--backend", "io_uring"], ["--ab", "backend"]], ids=["--backend", "--ab"])
def test_an_explicit_io_uring_is_one_line_and_exit_3(tmp_path, args):
    out = job(tmp_path, *args, *TINY)  # the environment refuses what was asked for: exit 3
    assert out.returncode == 3, (out.stdout[-1000:], out.stderr[-1000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "io_uring" in lines[0] and "EPERM" in lines[0], lines
    assert not (tmp_path / "tail-latency.jsonl").exists()


@pytest.mark.bench_extras
def test_peers_go_on_without_the_io_uring_server_saying_why(tmp_path):
    out = job(tmp_path, "--peers", "--no-pin", *TINY[2:])
    assert out.returncode == 0, out.stderr[-2000:]
    skipped = [line for line in out.stderr.splitlines() if "tailreactor (io_uring) skipped" in line]
    assert len(skipped) == 1 and "EPERM" in skipped[0], out.stderr[-2000:]
    result = json.loads(next((tmp_path / "results").glob("*-peers.json")).read_text())
    servers = result["legs"][0]["servers"]
    assert "tailreactor-epoll" in servers and "tailreactor-io_uring" not in servers
