"""``scripts/gate-code.sh``, the code gate of ``.ci/run``: the sim tier with ``--gate --a-ref BASE``.

Each test works in a temporary clone of this repository's HEAD (the gate script as committed), with a
local ``main`` at HEAD and a scratch branch on top: a real slowdown committed there exits 1, a commit
that changes no code exits 0 with every class's p99 carrying its samples, and a clone without the base
says so in one line and exits 0.  The gate runs as from a fresh shell (no ``TAILREACTOR_PY``): it sets
itself up with scripts/bootstrap.sh, here reusing this checkout's bootstrapped ``.venv``.  To keep the
suite's time, the job runs on epoll (``--backend`` is passed through), and the slowdown with 1 virtual
second per run; .ci/run runs both backends (docs/en/gate.md, "The code gate").
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tailjob_testdata import ROOT

SERVE = "reference/tailreactor/http/connection.py"
YIELD_EVERY = "if not late and served % yield_every == 0 and pipeline:"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.invalid", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


VENV = ROOT / ".venv"
STAMP = VENV / ".tailreactor-installed"  # scripts/bootstrap.sh's: the venv is up to date with pyproject.toml
EPOLL = ["--backend", "epoll"]
SMALL = [*EPOLL, "--duration", "1"]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of HEAD on branch ``scratch``, with ``main`` at HEAD: the base is HEAD.

    Its pyproject.toml is dated before this checkout's bootstrap stamp, so the gate's bootstrap reuses
    ``.venv`` as it is (an editable install of this checkout; the job puts the clone's code first).
    """
    if not STAMP.exists() or STAMP.stat().st_mtime < (ROOT / "pyproject.toml").stat().st_mtime:
        pytest.skip(
            "needs this checkout's .venv bootstrapped since pyproject.toml changed (scripts/bootstrap.sh)"
        )
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    _git(repo, "checkout", "-q", "-b", "scratch")
    _git(repo, "branch", "-f", "main", "HEAD")
    older = STAMP.stat().st_mtime_ns - 1_000_000_000  # bootstrap reinstalls when pyproject.toml is newer
    os.utime(repo / "pyproject.toml", ns=(older, older))
    return repo


def _gate(repo: Path, out: Path, *argv: str) -> subprocess.CompletedProcess:
    """The gate as from a fresh shell: no TAILREACTOR_PY, no venv on PATH."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(out), "TAILREACTOR_VENV": str(VENV)}
    done = subprocess.run(
        [str(repo / "scripts" / "gate-code.sh"), *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert "bootstrap: installing" not in done.stderr, "the gate reinstalled .venv from the clone"
    return done


def _result(out: Path) -> dict:
    return json.loads(next((out / "results").glob("*-quick-aref-sim.json")).read_text())


def test_a_slowdown_committed_on_a_branch_fails_the_gate(clone, tmp_path):
    base = _git(clone, "rev-parse", "HEAD").strip()
    path = clone / SERVE
    text = path.read_text()
    assert text.count(YIELD_EVERY) == 1
    path.write_text(text.replace(YIELD_EVERY, "if not late and pipeline:"))  # yield after every request
    _git(clone, "commit", "-q", "-am", "scratch: Connection._serve yields after every request")
    done = _gate(clone, tmp_path / "out", *SMALL)
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"gate-code: arm A runs {base[:12]} (the merge base with main)" in done.stderr
    assert "--gate: a metric regressed in virtual time" in done.stderr
    doc = _result(tmp_path / "out")
    assert doc["a_ref"] == {"ref": base, "commit": base}
    verdicts = {k: c["verdict"] for k, c in doc["legs"][0]["comparisons"].items()}
    assert verdicts["rps"] == "regression" and verdicts["p99"] == "regression"


def test_a_change_that_touches_no_code_passes_the_gate_seeing_every_class_p99(clone, tmp_path):
    (clone / "NOTES.txt").write_text("a change outside the code\n")
    _git(clone, "add", "NOTES.txt")
    _git(clone, "commit", "-q", "-m", "scratch: a note")
    done = _gate(clone, tmp_path / "out", *EPOLL)  # the gate's own duration
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    doc = _result(tmp_path / "out")
    # the same code on both arms: every ratio exactly 1, whatever the machine is doing
    [leg] = doc["legs"]
    ratios = {c["ratio"] for c in leg["comparisons"].values() if c["ratio"] is not None}
    assert ratios == {1.0}
    # each class's p99 carries its samples (a verdict, not `n/a (needs N samples)`), the open-loop
    # interactive class's at 200 req/s too: the gate sees a change to its tail
    assert set(leg["classes"]) == {"interactive", "bulk"}
    p99 = {name: c["p99"] for name, c in leg["classes"].items()}
    assert {name: c["verdict"] for name, c in p99.items()} == dict.fromkeys(p99, "equivalent"), p99


def test_without_head_1_the_gate_says_so_and_passes(clone, tmp_path):
    """HEAD on main (``main`` at HEAD) in a ``--depth 1`` clone: the base would be HEAD~1, not there."""
    repo = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", "-b", "main", f"file://{clone}", str(repo)], check=True
    )
    done = _gate(repo, tmp_path / "out")
    assert done.returncode == 0
    assert done.stderr == (
        "gate-code: HEAD~1 is not in this clone (a shallow clone, or the first commit): "
        "the code gate is skipped\n"
    )
    assert not (tmp_path / "out").exists()


def test_without_the_merge_base_the_gate_says_so_and_passes(clone, tmp_path):
    """A branch off main in a ``--depth 1`` clone of both: the merge base is cut off."""
    (clone / "NOTES.txt").write_text("a change outside the code\n")
    _git(clone, "add", "NOTES.txt")
    _git(clone, "commit", "-q", "-m", "scratch: a note")
    repo = tmp_path / "shallow"
    subprocess.run(
        [
            "git",
            "clone",
            "-q",
            "--depth",
            "1",
            "--no-single-branch",
            "-b",
            "scratch",
            f"file://{clone}",
            str(repo),
        ],
        check=True,
    )
    done = _gate(repo, tmp_path / "out")
    assert done.returncode == 0
    assert done.stderr == (
        "gate-code: HEAD and origin/main have no merge base in this clone (a shallow clone, or unrelated "
        "histories): the code gate is skipped\n"
    )
    assert not (tmp_path / "out").exists()


GATE = ROOT / "scripts" / "gate-code.sh"


@pytest.mark.parametrize("args", [["--tier", "wall"], ["--tier=wall"]], ids=["tier wall", "tier=wall"])
def test_the_live_tier_is_refused_in_one_line(args):
    """The code gate is deterministic (the sim tier): live load is another job, refused before any setup."""
    out = subprocess.run([str(GATE), *args], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("gate-code: --tier wall: ") and "accepted: --tier sim" in out.stderr


def test_help_anywhere_is_the_help_alone_with_its_exit_codes():
    out = subprocess.run(
        [str(GATE), *EPOLL, "--help"], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.startswith("usage: scripts/gate-code.sh") and "exit status:" in out.stdout, out.stdout
    assert "0 " in out.stdout and "1 " in out.stdout and "2 " in out.stdout and "3 " in out.stdout
