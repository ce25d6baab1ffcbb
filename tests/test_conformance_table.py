"""The per-clause table prints what a user copies whole (issue 41): a backend's name is never
folded or cut, a failing test's id and a skip reason are one line each, and the pytest short
summary names the suite's tests by their id in the suite, not by a chain of ../ from the
directory the user ran the command in."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from tailreactor_conformance.table import render
from test_conformance_meta import ROOT, TIMEOUT_S, child_env

LONG = "fixtures.backends.a_backend_with_a_rather_long_module_name:make_the_backend"
NODEID = "test_backend_library.py::test_an_arming_of_a_closed_fd_never_reports_the_readiness_of_the_file[x]"
REASON = "x does not declare ordered=True: clause B9 applies only to a backend that claims it (base.py)"


def _cell(status, failures=(), reasons=()):
    return {"status": status, "failures": list(failures), "skip_reasons": list(reasons)}


def test_names_ids_and_reasons_are_whole_lines_at_any_width():
    backends = ["epoll", LONG]
    summary = {
        "backends": backends,
        "reactor": "tailreactor.reactor:Reactor",
        "profile": "ci",
        "seed": "derandomized",
        "capabilities": {b: {"ordered": True, "max_batch": None} for b in backends},
        "clauses": {
            "B5": {"epoll": _cell("pass"), LONG: _cell("FAIL", [NODEID])},
            "B9": {"epoll": _cell("pass"), LONG: _cell("skip", reasons=[REASON])},
        },
    }
    out = io.StringIO()
    render(summary, out, width=80)
    lines = out.getvalue().splitlines()
    assert any(LONG in line for line in lines), out.getvalue()  # the column header, whole
    assert any(line.strip() == NODEID for line in lines), out.getvalue()
    assert any(line.strip() == f"B9 on {LONG}: {REASON}" for line in lines), out.getvalue()


def test_the_short_summary_names_tests_without_a_chain_of_dot_dots(tmp_path):
    """Run from a directory far from the suite: no path in the output climbs out with ../."""
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    script = Path(sys.executable).with_name("tailreactor-conformance")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "tailreactor_conformance"]
    env = child_env(PYTHONPATH=str(ROOT), TAILREACTOR_CONFORMANCE_LIVENESS_S="1")
    proc = subprocess.run(
        [*cmd, "--backend", "fixtures.backends.early_timeout:backend", "--clause", "B8,B17", "-n", "0"],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    summary = out[out.index("short test summary info") :]
    assert "../" not in summary, summary
    assert "FAILED test_backend.py::test_wait_timeout_is_never_early[" in summary, summary
    assert "SKIPPED [" in summary and "tests/test_backend.py:" in summary, summary
