"""The per-clause table prints what a user copies whole (issue 41): a backend's name is never
folded or cut, a failing test's id and a skip reason are one line each, and the pytest short
summary names the suite's tests by their id in the suite, not by a chain of ../ from the
directory the user ran the command in."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tailreactor_conformance.table import render
from test_conformance_meta import ROOT, TIMEOUT_S, child_env, rerun_command

LONG = "fixtures.backends.a_backend_with_a_rather_long_module_name:make_the_backend"
NODEID = "test_backend_reuse.py::test_an_arming_of_a_closed_fd_never_reports_the_readiness_of_the_file[x]"
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


def test_a_failing_clauses_sentence_is_one_line_with_no_trailing_space():
    """Under "failing clauses" a clause's sentence is printed whole, on its own line (the
    terminal folds it): never broken mid-sentence with a trailing space (issue 41's reader 10:
    "returns no earlier \\nthan timeout_s seconds" could not be grepped or quoted)."""
    from tailreactor_conformance.clauses import clause

    summary = {
        "backends": ["cabi:libx"],
        "reactor": "tailreactor.reactor:Reactor",
        "profile": "ci",
        "seed": "derandomized",
        "clauses": {"B8": {"cabi:libx": _cell("FAIL", [NODEID])}},
    }
    out = io.StringIO()
    render(summary, out, width=80)
    lines = out.getvalue().splitlines()
    assert f"  B8 on cabi:libx: {clause('B8').text}" in lines, out.getvalue()
    assert not [line for line in lines if line != line.rstrip()], out.getvalue()


def test_a_failing_test_is_followed_by_its_reason_and_skips_in_a_clause_that_ran_are_listed_once():
    """Under "failing clauses" each failing test's id, then its reason (the first E line of
    pytest's report: no scrolling back through the FAILURES); tests skipped inside a clause that
    ran are listed with their reasons, which pytest's short summary no longer repeats."""
    reason = "AssertionError: wait(0.0025) returned early in 3 of 40 waits timed in C around tr_backend_wait"
    summary = {
        "backends": ["cabi:libx"],
        "reactor": "tailreactor.reactor:Reactor",
        "profile": "ci",
        "seed": "derandomized",
        "clauses": {
            "B8": {"cabi:libx": _cell("FAIL", [NODEID]) | {"reasons": {NODEID: reason}}},
            "B10": {"cabi:libx": _cell("pass", reasons=[REASON]) | {"skips": ["t1", "t2"]}},
        },
    }
    out = io.StringIO()
    render(summary, out, width=80)
    lines = [line.strip() for line in out.getvalue().splitlines()]
    at = lines.index(NODEID)
    assert lines[at + 1] == reason, out.getvalue()
    assert f"B10 on cabi:libx: 2 test(s): {REASON}" in lines, out.getvalue()
    assert "skipped tests in clauses that ran" in lines, out.getvalue()


def test_a_failure_reason_is_the_first_e_line_or_the_message():
    from tailreactor_conformance.failures import failure_reason

    report = "    def test_x():\n>       assert 1 == 2, 'why'\nE       AssertionError: why\nE       assert 1 == 2\n"
    assert failure_reason(report) == "AssertionError: why"
    assert failure_reason("\nthe backend changed the process's signal state: ...\n") == (
        "the backend changed the process's signal state: ..."
    )
    assert len(failure_reason("E   " + "x" * 5000)) == 1000


def test_a_test_stopped_at_its_bound_says_what_reaches_it_and_where_to_look_first():
    """pytest-timeout's "Timeout (>60.0s)" names no cause (issue 41: a reader's B1 failure read
    only that, while its wait spun, which B7 named): the reason says what reaches the bound and
    points to the clauses that measure waits."""
    from tailreactor_conformance.failures import failure_reason

    report = "    def test_x():\n>       time.sleep(0.0005)\nE           Failed: Timeout (>60.0s) from pytest-timeout.\n"
    reason = failure_reason(report)
    assert reason.startswith("Failed: Timeout (>60.0s) from pytest-timeout."), reason
    assert "never ends or spins" in reason and "B7's and B8's failures first" in reason, reason
    assert failure_reason("E       AssertionError: Timeout (>60.0s) is a value here") == (
        "AssertionError: Timeout (>60.0s) is a value here"
    )


#: pytest's report of a Hypothesis state machine's test run by pytest-xdist (R20's, abridged):
#: xdist's header line first, then an exception group's traceback, with no ``E`` line.
XDIST_GROUP_REPORT = """[gw0] linux -- Python 3.11.7 /somewhere/.venv/bin/python
  + Exception Group Traceback (most recent call last):
  |   File "machine.py", line 115, in run
  |     run_state_machine_as_test(machine, settings=settings)
  | ExceptionGroup: Hypothesis found 2 distinct failures. (2 sub-exceptions)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "driver.py", line 176, in check
    |     assert not self.model.violations, "reactor disagrees with the model:\\n  " + "\\n  ".join(
    | AssertionError: reactor disagrees with the model:
    |   pairs [1] armed and readable, not delivered after 50 rounds
    |
    | Failing test case: <state machine>
"""


def test_a_failure_reason_is_the_error_not_xdists_header_line():
    """Under pytest-xdist a report starts with the worker's line ("[gw0] linux -- Python ..."):
    a report with no ``E`` line (an exception group's, Hypothesis's distinct failures) gives the
    first error it holds, with its message's next line when it ends in a colon, never that line."""
    from tailreactor_conformance.failures import failure_reason

    assert failure_reason(XDIST_GROUP_REPORT) == (
        "AssertionError: reactor disagrees with the model: "
        "pairs [1] armed and readable, not delivered after 50 rounds"
    )
    assert (
        failure_reason("[gw1] linux -- Python 3.11.7 /x/python\nthe backend crashed\n")
        == "the backend crashed"
    )


def test_a_hung_test_and_a_crashed_one_are_told_apart_each_with_its_rerun_line():
    """A worker the watchdog ended is ``FAIL (hung)``, its line quoted whole with the limit in
    seconds; a worker a signal ended is ``FAIL (crashed)``; each keeps its rerun line."""
    line = "cabi:libx: tr_backend_wait(timeout 500000 ns) did not return within 6.0005 s; exiting: ..."
    hung = {"test": "test_backend_timeout.py::t[cabi-libx]", "clause": "B8", "backend": "cabi:libx"}
    hung |= {"rerun": "rerun-the-hung-one", "hung": {"limit_s": 6.0005, "watchdog": line}}
    crashed = {"test": "test_backend_reuse.py::u[cabi-liby]", "clause": "B5", "backend": "cabi:liby"}
    crashed |= {"rerun": "rerun-the-crashed-one"}
    summary = {
        "backends": ["cabi:libx", "cabi:liby"],
        "reactor": "tailreactor.reactor:Reactor",
        "profile": "ci",
        "seed": "derandomized",
        "clauses": {
            "B5": {
                "cabi:libx": _cell("pass"),
                "cabi:liby": _cell("FAIL", [crashed["test"]]) | {"crashed": [1]},
            },
            "B8": {
                "cabi:libx": _cell("FAIL", [hung["test"]]) | {"crashed": [1], "hung": [1]},
                "cabi:liby": _cell("pass"),
            },
        },
        "crashed": [hung, crashed],
    }
    out = io.StringIO()
    render(summary, out, width=80)
    text = out.getvalue()
    lines = [line.strip() for line in text.splitlines()]
    assert "FAIL (hung)" in text and "FAIL (crashed)" in text, text
    assert f"watchdog (6.0005 s): {line}" in lines and "rerun-the-hung-one" in lines, text
    assert "rerun-the-crashed-one" in lines, text
    flat = " ".join(text.split())
    assert "hung: 1 test(s) did not return from a call into the library within the watchdog's limit" in flat
    assert "crashed: 1 test(s) ended their worker process (a signal" in flat, text
    assert flat.index("rerun-the-hung-one") < flat.index("crashed: 1 test(s)"), text  # each under its heading


def test_the_short_summary_names_tests_without_a_chain_of_dot_dots(tmp_path):
    """Run from a directory far from the suite: no path in the summary or in pytest's header
    climbs out with ../ (the header names the suite's own configuration, tests/suite.ini)."""
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
    # pytest's own header: the suite's configuration by its file name, not ../../../pyproject.toml.
    header = proc.stdout[: proc.stdout.index("plugins:")]
    assert "configfile: suite.ini" in header and "../" not in header, header
    assert "FAILED test_backend_timeout_rounding.py::test_wait_timeout_is_never_early[" in summary, summary
    # Skip reasons are said once, in the table's list of skipped clauses, not again by pytest.
    assert "SKIPPED [" not in summary, summary
    table = out[out.index("tailreactor conformance: reactor") : out.index("short test summary info")]
    assert "skipped clauses" in table and "B17 on fixtures.backends.early_timeout:backend: " in table, table
    # Each failing test is followed by why it failed: the first E line of pytest's report.
    lines = [line.strip() for line in table.splitlines()]
    at = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("test_backend_timeout_rounding.py::test_wait_timeout_is_never")
    )
    assert lines[at + 1].startswith("AssertionError: wait(") and " returned after " in lines[at + 1], table


CRASHING = "fixtures.backends.abort_on_closed_fd:backend"
CRASH_TEST = "test_an_fd_armed_and_closed_before_any_loop_run_is_dropped"


def test_a_test_whose_worker_crashed_fails_its_clause_and_says_how_to_see_the_message(tmp_path):
    """A backend that aborts the process (a C library's assertion) in one B5 test under
    pytest-xdist: the clause fails in the table as crashed, the test is named, and the line
    to rerun it in-process with its output shown is printed and in the JSON (issue 41)."""
    from test_conformance_meta import cli

    proc, data = cli(
        "--backend",
        CRASHING,
        "--clause",
        "B5",
        "-n",
        "2",
        "--",
        "-k",
        CRASH_TEST,
        json_path=tmp_path / "r.json",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert data["failed_clauses"] == ["B5"], out[-4000:]
    nodeid = f"test_backend_reuse_pending.py::{CRASH_TEST}[{CRASHING.replace(':', '-')}]"
    assert data["clauses"]["B5"][CRASHING]["crashed"] == [nodeid], data["clauses"]["B5"]
    rerun = (
        f"{rerun_command()} --backend {CRASHING} -n 0 -- -s -k '{CRASH_TEST}[{CRASHING.replace(':', '-')}]'"
    )
    assert data["crashed"] == [{"test": nodeid, "clause": "B5", "backend": CRASHING, "rerun": rerun}]
    assert "FAIL (crashed)" in proc.stdout and "no clause failed" not in proc.stdout, out[-4000:]
    assert rerun in proc.stdout, out[-4000:]
    # The line does what it says: the test alone, in-process, shows the library's message.
    shown = subprocess.run(
        [*_cli_cmd(), *shlex.split(rerun)[1:]],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert "abort_on_closed_fd: epoll_ctl: fd" in shown.stdout + shown.stderr, (shown.stdout + shown.stderr)[
        -4000:
    ]


#: A backend that aborts the process in close() while a test's fixtures are torn down (a
#: library whose close frees what its loop still uses); everywhere else it is the epoll backend.
CLOSE_CRASHES = """
import os
from fixtures.backends._wrapped import TaggedBackend


class AbortInTeardownClose(TaggedBackend):
    def close(self):
        if os.environ.get("PYTEST_CURRENT_TEST", "").endswith("(teardown)"):
            os.abort()
        super().close()


backend = AbortInTeardownClose
"""


def test_a_worker_that_crashed_in_teardown_is_said_to_have_crashed_in_the_backends_close(tmp_path):
    """A crash after the test's call was reported is in its teardown, where the suite's fixtures
    close the backend: the crashed line says so (reader 12's libuv close that freed handles
    before their close callbacks was filed under B11, the test that ran, and said nothing more)."""
    from test_conformance_meta import cli

    (tmp_path / "close_crashes.py").write_text(CLOSE_CRASHES)
    test = "test_a_token_replaced_before_its_report_is_never_reported"
    proc, data = cli(
        "--backend",
        "close_crashes:backend",
        "--clause",
        "B1",
        "-n",
        "2",
        "--",
        "-k",
        test,
        json_path=tmp_path / "r.json",
        env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert [c.get("phase") for c in data["crashed"]] == ["teardown"], data["crashed"]
    flat = " ".join(proc.stdout.split())
    assert (
        "B1 on close_crashes:backend, crashed in teardown (tr_backend_close?): test_backend_reports.py::"
        + test
        in flat
    ), out[-4000:]


def test_a_crash_in_teardown_is_named_in_its_line_and_the_test_id_stays_last():
    crashed = {"test": "test_backend_order.py::t[cabi-liby]", "clause": "B11", "backend": "cabi:liby"}
    crashed |= {"rerun": "rerun-it", "phase": "teardown"}
    summary = {
        "backends": ["cabi:liby"],
        "reactor": "tailreactor.reactor:Reactor",
        "profile": "ci",
        "seed": "derandomized",
        "clauses": {"B11": {"cabi:liby": _cell("FAIL", [crashed["test"]]) | {"crashed": [1]}}},
        "crashed": [crashed],
    }
    out = io.StringIO()
    render(summary, out, width=200)
    lines = [line.strip() for line in out.getvalue().splitlines()]
    assert (
        "B11 on cabi:liby, crashed in teardown (tr_backend_close?): test_backend_order.py::t[cabi-liby]"
        in lines
    ), lines


def _cli_cmd() -> list[str]:
    script = Path(sys.executable).with_name("tailreactor-conformance")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tailreactor_conformance"]


def test_a_test_that_crashed_in_setup_is_found_by_its_marker_and_backend_parameter():
    """No setup report reached the controller (the worker died in setup): the clause comes
    from the test function's marker, the backend from its parameter id."""
    from tailreactor_conformance.failures import backend_of, crash_props
    from tailreactor_conformance.plugin import PACKAGE_DIR

    nodeid = f"test_backend_reuse_pending.py::{CRASH_TEST}[cabi-libfoo]"
    assert crash_props(nodeid, {}, PACKAGE_DIR) == {"clause": "B5"}
    assert crash_props(nodeid, {nodeid: {"clause": "B1", "backend": "x"}}, PACKAGE_DIR)["clause"] == "B1"
    assert crash_props("test_backend_reports.py::no_such_test[x]", {}, PACKAGE_DIR) == {}
    labels = ["epoll", "cabi:libfoo"]
    assert backend_of(nodeid, labels) == "cabi:libfoo"
    assert (
        backend_of("test_backend_ebadf.py::test_arming_a_closed_fd_raises_ebadf[read-epoll]", labels)
        == "epoll"
    )
    assert backend_of("test_http.py::test_x", labels) == "-"


def _summary_with_crashes(count: int, most: int) -> dict:
    return {
        "backends": ["cabi:libx"],
        "reactor": "tailreactor.reactor:Reactor",
        "profile": "ci",
        "seed": "derandomized",
        "clauses": {
            "B5": {"cabi:libx": _cell("FAIL", ["t"]) | {"crashed": [1]}},
            "B9": {"cabi:libx": _cell("not run")},
        },
        "crashed": [{"test": "t", "clause": "B5", "backend": "cabi:libx", "rerun": "r"}],
        "workers_crashed": {"count": count, "max_restart": most},
    }


def test_clauses_not_run_after_too_many_crashed_workers_say_why():
    """pytest-xdist stops after --max-worker-restart crashed workers and drops the tests left: the
    table says so under the crashes, names the clauses left not run and how to run the rest (a
    fresh reader saw `not run` rows with nothing said, issue 41)."""
    out = io.StringIO()
    render(_summary_with_crashes(9, 8), out, width=80)
    flat = " ".join(out.getvalue().split())
    assert (
        "not run: 9 worker process(es) crashed, more than pytest-xdist replaces (--max-worker-restart 8"
        in flat
    )
    assert "clauses B9 show not run" in flat and "-- --max-worker-restart=1000" in flat, flat
    out = io.StringIO()
    render(_summary_with_crashes(8, 8), out, width=80)  # replaced, the run went on: nothing to say
    assert "more than pytest-xdist replaces" not in " ".join(out.getvalue().split())


def test_a_rerun_line_names_the_backend_as_typed_and_keeps_the_sanitizer_environment(monkeypatch):
    """cabi:./libx.so runs as an absolute path; the rerun line shows what was typed, and the
    preload and options a sanitizer build needed (without them ASan only refuses to start)."""
    import json

    from tailreactor_conformance.failures import COMMAND_ENV, TYPED_ENV, rerun_hint

    monkeypatch.delenv(COMMAND_ENV, raising=False)  # an in-process runner of this session may have set it
    monkeypatch.setenv(TYPED_ENV, json.dumps({"cabi:/abs/dir/libx.so": "cabi:./libx.so"}))
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libasan.so.8")
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0")
    monkeypatch.setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    monkeypatch.delenv("LSAN_OPTIONS", raising=False)
    monkeypatch.delenv("TSAN_OPTIONS", raising=False)
    line = rerun_hint("test_backend_reports.py::test_x[cabi-libx]", "cabi:/abs/dir/libx.so")
    assert line == (
        "LD_PRELOAD=/usr/lib/libasan.so.8 ASAN_OPTIONS=detect_leaks=0 "
        "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "
        "tailreactor-conformance --backend cabi:./libx.so -n 0 -- -s -k 'test_x[cabi-libx]'"
    )


def test_a_run_stopped_by_crashed_workers_says_why_its_clauses_were_not_run(tmp_path):
    """The crashing backend with no worker restart allowed: xdist stops at the first crash. One
    worker: two that crash at once can meet pytest-xdist's own failure ("cannot send (already
    closed?)", exit 3), depending on which tests each was given first."""
    from test_conformance_meta import cli

    proc, data = cli(
        "--backend",
        CRASHING,
        "--clause",
        "B5,B6",
        "-n",
        "1",
        "--",
        "--max-worker-restart=0",
        json_path=tmp_path / "r.json",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert data["workers_crashed"]["count"] >= 1 and data["workers_crashed"]["max_restart"] == 0, data
    assert "more than pytest-xdist replaces (--max-worker-restart 0" in " ".join(proc.stdout.split()), out[
        -4000:
    ]


def test_a_rerun_line_names_the_runner_as_it_was_run(tmp_path):
    """A rerun line is pasted as printed (issue 41: a reader ran ../.venv/bin/tailreactor-conformance
    without the venv on PATH, and the bare name the line printed was "command not found"): the
    name where PATH finds that same script, else the path it was run by, else python -m."""
    from tailreactor_conformance.failures import invoked_as

    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "tailreactor-conformance"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    relative = "../venv/bin/tailreactor-conformance"
    assert invoked_as(relative, path="/usr/bin", cwd=tmp_path / "venv") == relative
    assert invoked_as(str(script), path=f"/usr/bin:{bin_dir}") == "tailreactor-conformance"
    assert invoked_as("/somewhere/else/tailreactor-conformance", path=str(bin_dir)) == (
        "/somewhere/else/tailreactor-conformance"
    )
    assert invoked_as("/x/tailreactor_conformance/__main__.py", path=str(bin_dir)).endswith(
        " -m tailreactor_conformance"
    )
