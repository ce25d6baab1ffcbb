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
        run = subprocess.run(
            [wrk, "-t1", "-c16", "-d2s", f"http://127.0.0.1:{srv.port}/"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        code, err = srv.stop()
    finally:
        srv.kill()
    assert run.returncode == 0, run.stderr
    served = re.search(r"(\d+) requests in", run.stdout)
    assert served and int(served.group(1)) > 0, run.stdout
    assert "Socket errors" not in run.stdout, run.stdout
    assert "Non-2xx" not in run.stdout, run.stdout
    assert code == 0, err


def test_settings_that_do_nothing_are_named_at_start(tmp_path):
    """A misspelt knob, a probe file without the probe, and RX-uring asked of a backend
    without a receive operation: the server starts, and says each in one line first."""
    env = bench_env(
        CWIST_REACTOR_BACKEND="epoll",
        CWIST_RX_URING="1",
        CWIST_REACTOR_TAILUS="5",
        CWIST_LATENCY_PROBE_FILE=str(tmp_path / "p.json"),
        CWIST_POOL_SHARDS="4",
    )
    server = start_bench(env=env)
    code, rest = server.stop()
    said = server.before
    assert code == 0
    assert (
        "CWIST_REACTOR_TAILUS is not a setting of the reference and is ignored; "
        "did you mean CWIST_REACTOR_TAIL_US?" in said
    )
    assert "CWIST_LATENCY_PROBE_FILE is set but CWIST_LATENCY_PROBE is not 1" in said
    assert "CWIST_RX_URING=1, but the epoll backend has no receive operation" in said
    assert "CWIST_POOL_SHARDS" not in said + rest  # CWIST's own settings share the environment
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("workers", [["--workers", "2"], []])
def test_a_bad_probe_file_with_several_workers_is_one_line_and_exit_2(workers):
    """Checked before the workers fork: one line naming the knob, not a traceback per worker."""
    from http_helpers import run_bench

    env = bench_env(
        CWIST_LATENCY_PROBE="1", CWIST_LATENCY_PROBE_FILE="/nonexistent/x.json", CWIST_WORKERS="2"
    )
    res = run_bench(["--port", "0", *workers], env=env)
    assert res.returncode == 2, res.stderr
    assert (
        res.stderr.count("\n") == 1
        and "CWIST_LATENCY_PROBE_FILE='/nonexistent/x.json' is invalid" in res.stderr
    )
    assert "Traceback" not in res.stderr
