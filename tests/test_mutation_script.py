"""scripts/mutation.sh: bad input to an option is one line naming the option, the value and what is
accepted, exit 2, and nothing is written (the sessions' directory is not even made)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "mutation.sh"


@pytest.mark.parametrize(
    "args, says",
    [
        (["--timeout", "abc"], "--timeout 'abc': accepted a number of seconds > 0"),
        (["--timeout", "0"], "--timeout '0': accepted a number of seconds > 0"),
        (["--timeout"], "--timeout '': accepted a number of seconds > 0"),
        (["--sample", "-3"], "--sample '-3': accepted a whole number > 0"),
        (["--clause", "B;true"], "--clause 'B;true': accepted clause ids or letters"),
        (["--bogus"], "option '--bogus': accepted --clause LIST, --timeout S"),
        (["no_such_target"], "TARGET 'no_such_target': accepted poll selectors_poll batch16"),
        (["--only", "no/such.toml"], "--only 'no/such.toml': accepted an existing reasons file"),
        (["--only"], "--only '': accepted an existing reasons file"),
        (
            ["--only", "conformance/mutation-survivors.toml", "c"],
            "TARGET 'c': accepted with --only: poll selectors_poll batch16 selectors epoll io_uring",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    out = tmp_path / "sessions"
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "MUTATION_OUT": str(out)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scripts/mutation.sh: ") and says in lines[0], proc.stderr
    assert not out.exists()


def test_every_listed_survivor_names_a_line_its_file_still_has():
    """An entry of conformance/mutation-survivors.toml is keyed by its source line's text: a line
    reworded or reformatted since the run leaves an entry that names nothing (and its mutant, on the
    next run, unlisted).  The C example's entries are checked too."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    listed = tomllib.loads((ROOT / "conformance" / "mutation-survivors.toml").read_text(encoding="utf-8"))
    stale = []
    for entry in listed["survivor"]:
        lines = {raw.strip() for raw in (ROOT / entry["file"]).read_text(encoding="utf-8").splitlines()}
        if entry["line"].strip() not in lines:
            stale.append(f"{entry['file']}: {entry['line']!r}")
    assert listed["survivor"] and not stale, stale


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "cosmic-ray").exists(),
    reason="the mutation extra is not installed in .venv (cosmic-ray, universalmutator)",
)
def test_check_without_a_session_says_so_per_target_and_exits_1(tmp_path):
    """--check runs nothing: a target with no session is one line naming it (no traceback, and no
    empty session left behind for the next check to read as 0 mutants)."""
    out = tmp_path / "sessions"
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--check", "epoll", "c"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "MUTATION_OUT": str(out)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"epoll: no session in {out} to check" in proc.stdout, proc.stdout
    assert f"c: no session in {out} to check" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not list(out.glob("*.sqlite"))
