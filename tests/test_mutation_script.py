"""scripts/mutation.sh: bad input to an option is one line naming the option, the value and what is
accepted, exit 2, and nothing is written (the sessions' directory is not even made)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "mutation.sh"


def run_script(args, out: Path, timeout: float) -> subprocess.CompletedProcess:
    """``scripts/mutation.sh ARGS`` from the repository, its sessions in ``out`` (MUTATION_OUT)."""
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "MUTATION_OUT": str(out)},
        timeout=timeout,
        check=False,
    )


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
    proc = run_script(args, out, timeout=60)
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
    proc = run_script(["--check", "epoll", "c"], out, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"epoll: no session in {out} to check" in proc.stdout, proc.stdout
    assert f"c: no session in {out} to check" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not list(out.glob("*.sqlite"))


TINY_BACKEND = '''"""The poll fixture with a wait whose try an exception passes through, past a handler as cosmic-ray's
ExceptionReplacer writes it: a name the module does not import."""

from fixtures.backends.poll import PollBackend


class ThroughAMutatedHandler(PollBackend):
    def wait(self, timeout_s):
        try:
            raise KeyError(timeout_s)
        except CosmicRayTestingException:  # noqa: F821
            pass
        except KeyError:
            pass
        return super().wait(timeout_s)


backend = ThroughAMutatedHandler
'''


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "cosmic-ray").exists(),
    reason="the mutation extra is not installed in .venv (cosmic-ray, universalmutator)",
)
def test_the_test_command_knows_the_name_the_exception_replacer_writes(tmp_path):
    """cosmic-ray's ExceptionReplacer turns `except KeyError:` into `except CosmicRayTestingException:`,
    a class of cosmic-ray's own package: a handler that catches nothing.  The suite runs in a process of
    its own (the config's test-command), so the name must exist there too: otherwise
    an exception through the try raises NameError and fails the suite whatever the clause says, and the
    mutant counts as killed.  A backend whose wait passes such a handler, and is otherwise the poll
    fixture, passes B1 under that command; the name is not put anywhere the repository imports from."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    out = tmp_path / "sessions"
    nothing = tmp_path / "nothing.toml"
    nothing.write_text("")  # --only a file that lists no survivor: every mutant skipped, none run
    made = run_script(["--clause", "B1", "--only", str(nothing), "batch16"], out, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    config = tomllib.loads((out / "batch16.toml").read_text(encoding="utf-8"))["cosmic-ray"]
    assert "fixtures.backends.batch16:backend" in config["test-command"], config
    (out / "tree" / "tiny_through_a_mutated_handler.py").write_text(TINY_BACKEND)
    proc = subprocess.run(
        config["test-command"].replace(
            "fixtures.backends.batch16:backend", "tiny_through_a_mutated_handler:backend"
        ),
        shell=True,
        cwd=out / "tree",
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "NameError" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tracked = subprocess.run(
        ["git", "ls-files", "*sitecustomize.py"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert (out / "site" / "sitecustomize.py").exists() and not tracked.stdout.strip()


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "cosmic-ray").exists(),
    reason="the mutation extra is not installed in .venv (cosmic-ray, universalmutator)",
)
def test_an_entry_naming_a_function_is_that_functions_only(monkeypatch):
    """`except OSError:` stands in several functions of one file, each surviving for its own reason: an
    entry with `function` names that function's mutant only and comes before one that names none."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import mutation_survivors as ms

    key = {"file": "f.py", "operator": "core/ExceptionReplacer", "line": "except OSError:", "mutant": "m"}
    anywhere = {**key, "kind": "unreachable", "reason": "any"}
    in_arm = {**key, "function": "arm", "kind": "equivalent", "reason": "arm's"}
    entries = [anywhere, in_arm]

    def mutant(function):
        return ms.Mutant("id", "f.py", "core/ExceptionReplacer", 7, "except OSError:", "m", function)

    assert ms.listed(mutant("arm"), entries) is in_arm
    assert ms.listed(mutant("wake"), entries) is anywhere
    assert ms.listed(mutant("wake"), [in_arm]) is None
    assert 'function = "arm"\n' in ms.stub(mutant("arm"))
