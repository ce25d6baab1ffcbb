"""What cannot run here is skipped with a one-line reason, never failed (issue 21).

The suite must pass in the places people run CI: a container whose seccomp
profile refuses ``io_uring_setup`` (Docker's default, EPERM), a machine
without wrk and without root or apt.  Each test runs part of the suite, or the
bootstrap script, in a child process in that situation made real: a seccomp
filter refusing ``io_uring_setup`` (tests/seccomp_deny.py), a PATH without wrk,
apt-get and sudo.

``TAILREACTOR_REQUIRE_IO_URING=1`` (CWIST's ``CWIST_TEST_REQUIRE_IO_URING``)
turns the io_uring skips into failures: ``.ci/run`` sets it where io_uring
works, so a CI machine that lost io_uring cannot pass by skipping.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from http_helpers import DENY_IO_URING

ROOT = Path(__file__).resolve().parent.parent
REQUIRE = "TAILREACTOR_REQUIRE_IO_URING"
#: A slice of the suite: io_uring-parametrized reactor tests, tests that use io_uring without a
#: parameter, and the fallback's own tests (which must run either way).
PART = ["tests/test_posts.py", "tests/test_backend_selection.py"]
FALLBACK_TESTS = [
    "test_explicit_io_uring_unavailable_is_a_clear_error",
    "test_auto_falls_back_to_epoll_and_logs_one_line",
]


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k != REQUIRE and not k.startswith(("PYTEST_", "HYPOTHESIS_"))
    }
    env.update(extra)
    return env


def run_part(env: dict[str, str], prefix: list[str] = DENY_IO_URING) -> subprocess.CompletedProcess:
    cmd = [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA", *PART]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def outcomes(stdout: str) -> dict[str, str]:
    """``{test id: PASSED|SKIPPED|FAILED|ERROR}`` from ``-rA``'s short summary."""
    got = {}
    for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+)", stdout, re.M):
        got[m[2]] = m[1]
    return got


def test_io_uring_refused_means_skipped_with_the_errno_and_the_fallback_still_runs():
    done = run_part(child_env())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    skips = [ln for ln in done.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert skips, done.stdout[-4000:]
    io_uring_skips = [ln for ln in skips if "io_uring unavailable" in ln]
    assert io_uring_skips and all("errno EPERM" in ln for ln in io_uring_skips), skips
    # One reason, one line: the skips share it (pytest groups them by reason and place).
    assert len(io_uring_skips) == 1 and re.match(r"SKIPPED \[\d+\]", io_uring_skips[0]), skips
    got = outcomes(done.stdout)
    passed = [t for t, o in got.items() if o == "PASSED"]
    assert any("[epoll" in t for t in passed), passed
    for name in FALLBACK_TESTS:
        assert any(t.endswith("::" + name) for t in passed), (name, passed)
    assert not [t for t, o in got.items() if o in ("FAILED", "ERROR")]


def test_require_io_uring_turns_the_skips_into_failures_naming_the_reason():
    done = run_part(child_env(**{REQUIRE: "1"}))
    assert done.returncode == 1, done.stdout[-4000:]
    failed = [t for t, o in outcomes(done.stdout).items() if o in ("FAILED", "ERROR")]
    assert failed and all(
        "io_uring" in t or "auto_prefers_io_uring" in t or "shipped_backends" in t for t in failed
    ), failed
    assert f"{REQUIRE}=1 but io_uring unavailable" in done.stdout and "errno EPERM" in done.stdout
    assert not [ln for ln in done.stdout.splitlines() if ln.startswith("SKIPPED") and "io_uring" in ln]


def test_require_io_uring_with_a_bad_value_is_a_usage_error():
    done = run_part(child_env(**{REQUIRE: "yes"}), prefix=[])
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{REQUIRE}='yes'" in done.stderr and "accepted: 0, 1 or unset" in done.stderr


#: Tests that build an io_uring backend by name, outside the reactor-parametrized slice above: the sim
#: tier's engine (a real ring under a virtual clock) and the backends' harvest.  ``-k io_uring`` keeps the
#: io_uring cases only: each must skip, or fail under TAILREACTOR_REQUIRE_IO_URING=1, never raise.
BY_NAME = ["tests/ci/test_tailjob_sim.py", "tests/test_backend_harvest.py", "-k", "io_uring"]


@pytest.mark.parametrize("require", ["", "1"], ids=["skipped", "required"])
def test_a_backend_made_by_name_skips_with_the_errno_or_fails_when_required(require):
    env = child_env(**{REQUIRE: require}) if require else child_env()
    cmd = [*DENY_IO_URING, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA"]
    done = subprocess.run(
        [*cmd, *BY_NAME], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    got = outcomes(done.stdout)
    assert "PASSED" not in got.values(), done.stdout[-4000:]
    if require:
        assert done.returncode == 1 and got and set(got.values()) <= {"FAILED", "ERROR"}, done.stdout[-4000:]
        assert f"{REQUIRE}=1 but io_uring unavailable" in done.stdout and "errno EPERM" in done.stdout
        return
    assert done.returncode == 0 and not got, done.stdout[-4000:]
    skips = [ln for ln in done.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert skips and all("io_uring unavailable" in ln and "errno EPERM" in ln for ln in skips), skips
    assert len(skips) == 1  # one reason, one line: the marker's skip, shared by every file


# -- missing tools ---------------------------------------------------------------
def bare_path(tmp_path: Path, *tools: str) -> str:
    """A PATH directory holding only ``tools`` (symlinks): no wrk, apt-get or sudo."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_wrk_the_wrk_tests_skip_with_how_to_install_it(tmp_path):
    env = child_env(PATH=bare_path(tmp_path, "true"))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-rA",
        "tests/test_http_e2e.py",
        "tests/test_reliability_shutdown.py",
        "-k",
        "wrk",
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:]
    skips = [ln for ln in done.stdout.splitlines() if ln.startswith("SKIPPED")]
    wrk_skips = [ln for ln in skips if "wrk" in ln]
    assert len(wrk_skips) == 1 and "wrk not found on PATH" in wrk_skips[0], skips
    assert "scripts/bootstrap.sh --wrk" in wrk_skips[0] and "apt-get install wrk" in wrk_skips[0]
    # Where io_uring is refused too, its tests say so instead (checked first): nothing else skips.
    assert all(ln in wrk_skips or "io_uring unavailable" in ln for ln in skips), skips
    assert "PASSED" not in done.stdout and "FAILED" not in done.stdout


def test_bootstrap_without_wrk_and_without_apt_goes_on_and_says_so(tmp_path):
    venv = ROOT / ".venv"
    stamp = venv / ".tailreactor-installed"
    if not stamp.exists() or stamp.stat().st_mtime < (ROOT / "pyproject.toml").stat().st_mtime:
        pytest.skip(
            "needs this checkout's .venv bootstrapped since pyproject.toml changed (scripts/bootstrap.sh)"
        )
    env = child_env(PATH=bare_path(tmp_path, "bash", "dirname", "id"), TAILREACTOR_VENV=str(venv))
    done = subprocess.run(
        [shutil.which("bash"), str(ROOT / "scripts" / "bootstrap.sh"), "--wrk"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if "wrk" in ln]
    assert len(lines) == 1, done.stderr
    assert "cannot install it here" in lines[0] and "what needs it is skipped" in lines[0]
    assert "apt-get install wrk" in lines[0]


def test_tail_latency_help_installs_nothing(tmp_path):
    # No venv to reuse and no wrk or apt-get on PATH: the help comes from the base Python, which
    # has none of the job's dependencies (they are in the venv).
    path = bare_path(tmp_path, "bash", "dirname")
    (Path(path) / "python3").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
    env = child_env(PATH=path, TAILREACTOR_VENV=str(tmp_path / "no-venv"), PYTHON="python3")
    done = subprocess.run(
        [shutil.which("bash"), str(ROOT / "scripts" / "tail-latency.sh"), "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: scripts/tail-latency.sh") and "peers" in done.stdout
    assert "bootstrap" not in done.stderr and not (tmp_path / "no-venv").exists()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["ab", "--duration", "0"], "--duration: '0': accepted whole seconds"),
        (["--runs", "100000"], "--runs: '100000': accepted an integer from 1 to 1000"),
        (["calibrate", "2", "--seed", "-1"], "--seed: '-1': accepted an integer from 0"),
    ],
)
def test_tail_latency_refuses_bad_options_before_setting_up_anything(tmp_path, argv, says):
    # Issue 38: a fresh clone spent 32 s making .venv before `ab --duration 0`'s one-line error.
    path = bare_path(tmp_path, "bash", "dirname")
    (Path(path) / "python3").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
    env = child_env(PATH=path, TAILREACTOR_VENV=str(tmp_path / "no-venv"), PYTHON="python3")
    done = subprocess.run(
        [shutil.which("bash"), str(ROOT / "scripts" / "tail-latency.sh"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert not (tmp_path / "no-venv").exists()
