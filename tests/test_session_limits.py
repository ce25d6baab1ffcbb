"""Issue 33: the suite's own guards -- limits raised, leaks named, memlock shortfalls skipped.

Each case runs a small inner pytest session (a subprocess) with this suite's
``tests/conftest.py`` and reads its outcome: the guards act on a whole session
(its limits, every test's teardown), so only a session can show them.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).parent
IO_TIMEOUT_S = 120

INNER_TESTS = """
import errno, os, resource, socket
import pytest
from limits import require_fds
from tailreactor.backends import IoUringUnavailable

KEPT = []

def test_soft_nofile_is_a_stock_one_unless_asked():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == min(1024, hard)
    require_fds(100)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == hard

def test_the_next_test_has_the_stock_limit_again():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == min(1024, hard)

def test_needs_many_files_and_does_not_say_so():
    made = []
    try:
        for _ in range(600):  # 1200 descriptors: more than a stock soft limit
            made.extend(socket.socketpair())
    finally:
        for s in made:
            s.close()

def test_leaks_a_socket():
    KEPT.append(socket.socket())

def test_leaks_a_pipe_in_a_cycle():
    class Holder:
        pass
    h = Holder()
    h.me = h
    h.r, h.w = os.pipe()
    KEPT.append(h.r); KEPT.append(h.w)

def test_closes_what_it_opens():
    with socket.socket():
        pass

def test_drops_a_socket_in_a_cycle():
    class Holder:
        pass
    h = Holder()
    h.me = h
    h.sock = socket.socket()

def test_needs_more_files_than_the_limit():
    require_fds(10 ** 9)

@pytest.mark.io_uring
def test_ring_setup_enomem():
    raise IoUringUnavailable(errno.ENOMEM, "io_uring unavailable: ring setup failed; errno ENOMEM")

@pytest.mark.io_uring
def test_ring_setup_eperm():
    raise IoUringUnavailable(errno.EPERM, "io_uring unavailable: ring setup failed; errno EPERM")
"""

RING_TEST = """
import uring_api
KEPT = []
def test_leaks_a_ring():
    KEPT.append(uring_api.Ring(8))
"""


def inner_session(tmp_path: Path, body: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    for helper in ("conftest.py", "limits.py"):
        (tmp_path / helper).write_text((HERE / helper).read_text())
    (tmp_path / "test_inner.py").write_text(body)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TAILREACTOR_REQUIRE"))}
    full_env.update(env)
    # Soft below hard, as a stock login gives it, when this process may lower it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)

    def lower():
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "-q",
            "-o",
            "markers=io_uring",
            "--junitxml=report.xml",
            *args,
            "test_inner.py",
        ],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=IO_TIMEOUT_S,
        preexec_fn=lower,
        check=False,
    )


def outcomes(tmp_path: Path) -> dict[str, str]:
    """The inner session's JUnit report: test name -> ``passed``, or ``failure: msg``,
    ``error: msg``, ``skipped: msg`` (an error at teardown wins over the pass)."""
    got = {}
    for case in ET.parse(tmp_path / "report.xml").getroot().iter("testcase"):
        name = case.get("name")
        got.setdefault(name, "passed")
        for tag in ("failure", "error", "skipped"):
            for el in case.findall(tag):
                got[name] = f"{tag}: {el.get('message', '')}"
    return got


@pytest.fixture(scope="module")
def inner(tmp_path_factory):
    where = tmp_path_factory.mktemp("inner")
    done = inner_session(where, INNER_TESTS)
    return done, outcomes(where)


def test_the_session_raises_soft_nofile_to_the_hard_limit_for_the_tests_that_ask(inner):
    # A test runs under a stock soft limit (1024) as every user has it, whoever runs the suite;
    # require_fds(n) lifts it to the hard limit the session raised it to, for that test only.
    done, lines = inner
    assert lines["test_soft_nofile_is_a_stock_one_unless_asked"] == "passed", done.stdout
    assert lines["test_the_next_test_has_the_stock_limit_again"] == "passed", done.stdout


def test_a_test_needing_more_than_a_stock_limit_without_require_fds_fails_naming_it(inner):
    # as root too (a hard limit far above 1024): a test that would pass only where the soft limit is
    # raised cannot land
    done, lines = inner
    line = lines["test_needs_many_files_and_does_not_say_so"]
    assert line.startswith("failure"), done.stdout
    assert "EMFILE" in line and "stock soft RLIMIT_NOFILE of 1024" in line and "require_fds(" in line, line


def test_a_leaked_socket_fails_its_test_naming_the_test_and_the_descriptor(inner):
    done, lines = inner
    line = lines["test_leaks_a_socket"]
    assert line.startswith("error"), done.stdout
    assert "test_inner.py::test_leaks_a_socket left 1 descriptor(s) open (0 io_uring ring(s))" in line
    assert "socket:[" in line
    assert done.returncode == 1


def test_leaked_pipes_are_named_and_the_next_test_is_not_blamed(inner):
    done, lines = inner
    line = lines["test_leaks_a_pipe_in_a_cycle"]
    assert line.startswith("error") and line.count("pipe:[") == 2, done.stdout
    assert lines["test_closes_what_it_opens"] == "passed", done.stdout


def test_a_descriptor_only_garbage_holds_is_collected_not_blamed(inner):
    done, lines = inner
    assert lines["test_drops_a_socket_in_a_cycle"] == "passed", done.stdout


def test_a_test_needing_more_files_than_the_limit_skips_naming_it(inner):
    done, lines = inner
    line = lines["test_needs_more_files_than_the_limit"]
    assert line.startswith("skipped"), done.stdout
    assert "RLIMIT_NOFILE allows" in line and "ulimit -n 10000" in line


@pytest.mark.io_uring  # the inner session's io_uring tests get as far as ENOMEM only where a ring works
def test_ring_setup_enomem_skips_naming_the_memlock_limit_other_errnos_fail(inner):
    done, lines = inner
    line = lines["test_ring_setup_enomem"]
    assert line.startswith("skipped"), done.stdout
    assert "ENOMEM" in line and "ulimit -l" in line and "CWIST_URING_ENTRIES" in line
    assert lines["test_ring_setup_eperm"].startswith("failure"), done.stdout


@pytest.mark.io_uring
def test_ring_setup_enomem_fails_when_io_uring_is_required(tmp_path):
    done = inner_session(tmp_path, INNER_TESTS, "-k", "enomem", TAILREACTOR_REQUIRE_IO_URING="1")
    line = outcomes(tmp_path)["test_ring_setup_enomem"]
    assert line.startswith("failure") and "TAILREACTOR_REQUIRE_IO_URING=1 but" in line, done.stdout


@pytest.mark.io_uring
def test_a_leaked_ring_is_counted_as_a_ring(tmp_path):
    done = inner_session(tmp_path, RING_TEST)
    line = outcomes(tmp_path)["test_leaks_a_ring"]
    assert line.startswith("error") and "(1 io_uring ring(s))" in line, done.stdout
    assert "anon_inode:[io_uring]" in line
