"""The conformance plugin stays out of other projects' pytest sessions.

A backend author installs tailreactor into the venv of their own project.  Their
pytest must not get our options (``--backend`` would clash with one of theirs),
our Hypothesis profile, or our hooks: the plugin loads only when asked for,
with ``-p tailreactor_conformance.plugin`` (what ``tailreactor-conformance``
and this repository's pytest configuration pass).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _pytest(cwd, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_another_project_can_define_its_own_backend_option_and_hypothesis_profile(tmp_path):
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""
        def pytest_addoption(parser):
            parser.addoption("--backend", default="theirs")
    """)
    )
    (tmp_path / "test_theirs.py").write_text(
        textwrap.dedent("""
        import sys

        def test_option(pytestconfig):
            assert pytestconfig.getoption("backend") == "theirs"

        def test_our_plugin_is_not_loaded_so_their_hypothesis_profile_is_theirs():
            # Not a check of the profile's name: Hypothesis itself picks a
            # profile called "ci" when the CI variable is set.
            assert "tailreactor_conformance.plugin" not in sys.modules
            assert "tailreactor_conformance.profiles" not in sys.modules
    """)
    )
    done = _pytest(tmp_path, "--backend", "theirs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_suite_runs_under_plain_pytest_with_the_plugin_asked_for(tmp_path):
    done = _pytest(
        tmp_path,
        "-p",
        "tailreactor_conformance.plugin",
        "--pyargs",
        "tailreactor_conformance.tests",
        "--backend",
        "epoll",
        "--clause",
        "B16",
        "-n",
        "0",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "B16" in done.stdout and "pass" in done.stdout


@pytest.mark.parametrize("jobs", ["0", "2"], ids=["in-process", "xdist"])
def test_the_suite_leaves_no_hypothesis_directory_where_it_is_run(tmp_path, jobs):
    """tailreactor-conformance run from a user's directory leaves no ``.hypothesis`` there: Hypothesis
    writes one in the current directory for its cache of the constants in the code under test, even
    with no example database.  The suite's own, in the temporary directory, is removed after the run."""
    from test_conformance_meta import ROOT, child_env, run, suite_command

    here, tmp = tmp_path / "user", tmp_path / "tmp"
    here.mkdir()
    tmp.mkdir()
    done = run(
        [*suite_command(), "--backend", "epoll", "--clause", "R10", "-n", jobs],
        env=child_env(PYTHONPATH=str(ROOT), TMPDIR=str(tmp)),
        cwd=here,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "no clause failed" in done.stdout
    assert list(here.iterdir()) == []
    assert [p for p in tmp.iterdir() if "hypothesis" in p.name] == []
