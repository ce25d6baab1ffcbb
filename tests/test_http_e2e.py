"""End to end: real wrk against the real tailreactor-bench, on each backend.

Functional only (2 s, one thread, 16 connections): requests were served and
wrk saw no socket errors and no non-2xx answers.  Throughput and latency are
measured by the tail-latency job, not here.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from http_helpers import bench_env, start_bench

pytestmark = pytest.mark.wrk


def test_wrk_two_seconds(backend_name):
    wrk = shutil.which("wrk")
    assert wrk, "wrk is not installed (the README's commands install it with apt-get)"
    srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=backend_name))
    try:
        assert srv.backend == backend_name
        run = subprocess.run([wrk, "-t1", "-c16", "-d2s", f"http://127.0.0.1:{srv.port}/"],
                             capture_output=True, text=True, timeout=30)
        code, err = srv.stop()
    finally:
        srv.kill()
    assert run.returncode == 0, run.stderr
    served = re.search(r"(\d+) requests in", run.stdout)
    assert served and int(served.group(1)) > 0, run.stdout
    assert "Socket errors" not in run.stdout, run.stdout
    assert "Non-2xx" not in run.stdout, run.stdout
    assert code == 0, err
