"""The bench server on a C backend (issue 32): it serves HTTP through ``cabi:PATH``, and a bad
``cabi:`` backend is one line and exit status 2.
"""

from __future__ import annotations

import pytest

from cabi_helpers import build, needs_cc


# -- the C backend under the bench server (issue 32) -------------------------------------
@needs_cc
def test_the_bench_server_serves_http_on_a_c_backend(tmp_path):
    """CWIST_REACTOR_BACKEND=cabi:PATH: the real tailreactor-bench on the example C backend
    answers real requests, then stops on SIGTERM with status 0."""
    from http_helpers import bench_env, connect, get, read_responses, start_bench

    lib = build(tmp_path, "tr_epoll")
    srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=f"cabi:{lib}"))
    try:
        assert srv.backend == "cabi:libtr_epoll", srv.line
        with connect(srv.port) as s:
            s.sendall(get("/") * 3)
            assert [r.status for r in read_responses(s, 3)] == [200, 200, 200]
        code, err = srv.stop()
    finally:
        srv.kill()
    assert code == 0, err


@pytest.mark.parametrize(
    "value, says",
    [
        (
            "cabi:",
            "CWIST_REACTOR_BACKEND='cabi:' is invalid: accepted one of auto, io_uring, epoll, selectors, "
            "or cabi:PATH",
        ),
        (
            "cabi:/nonexistent/libx.so",
            "CWIST_REACTOR_BACKEND=cabi:/nonexistent/libx.so cannot start: backend "
            "'cabi:/nonexistent/libx.so': no such file /nonexistent/libx.so (accepted: "
            "cabi:PATH to a shared library",
        ),
    ],
)
def test_a_bad_cabi_backend_for_the_bench_server_is_one_line_and_exit_2(value, says):
    from http_helpers import bench_env, run_bench

    proc = run_bench(["--port", "0"], env=bench_env(CWIST_REACTOR_BACKEND=value))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr
