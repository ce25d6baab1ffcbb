"""The repository stands alone: no pointer to files outside it, a licence file, git and .gitignore agree."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: A pointer to the team's notes, which a clone does not contain (``shared/notes/x.md``, ``../shared/``).
OUTSIDE = re.compile(r"(?<![\w/.-])(?:(?:\.\./)+shared/[\w./-]*|shared/notes/[\w./-]*)")


def _git(*args: str) -> list[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()


def test_no_file_points_outside_the_repository():
    found = []
    for name in _git("ls-files"):
        path = ROOT / name
        if name == "tests/test_repository.py":  # names the patterns it looks for
            continue
        if not path.is_file() or path.suffix in (".png", ".so", ".gz"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{n}: {m}" for m in OUTSIDE.findall(line)]
    assert not found, (
        "pointers to files this repository does not contain (cite the public source: "
        "CWIST PR or issue number, a man page):\n" + "\n".join(found)
    )


def test_the_pattern_catches_the_pointers_it_is_for():
    assert OUTSIDE.findall("see ``shared/notes/upstream-cwist.md`` section 2") == [
        "shared/notes/upstream-cwist.md"
    ]
    assert OUTSIDE.findall("[notes](../shared/notes/x.md)") == ["../shared/notes/x.md"]
    assert not OUTSIDE.findall("lib/shared/notes/x, the shared/ring, a shared memory map")


def test_there_is_a_licence_file_and_it_is_the_one_the_project_declares():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = { text = "MIT" }' in pyproject or 'license = "MIT"' in pyproject
    assert "[LICENSE](LICENSE)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_no_tracked_file_is_ignored():
    """A file is either tracked or ignored.  The one exception is by design: benchmarks/results/ is
    ignored so that smoke runs stay out of git status, and deliberate measurements are added with
    ``git add -f`` (benchmarks/README.md)."""
    both = [
        f for f in _git("ls-files", "-ci", "--exclude-standard") if not f.startswith("benchmarks/results/")
    ]
    assert not both, f"tracked and ignored at once: {both}"


def test_the_readme_starts_with_the_two_commands_and_says_setup_may_call_sudo():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert headings[0] == "## The two commands", headings
    first_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [ln.split()[0] for ln in first_block.splitlines()] == [
        "scripts/test.sh",
        "scripts/tail-latency.sh",
    ]
    assert text.index("```sh") < text.index("CWIST_REACTOR_TAIL_US")  # the commands before the statistics
    assert "sudo apt-get install wrk" in text and "install wrk yourself first" in text
    assert len(text.splitlines()) <= 60, "the rest belongs in docs/ (en and ko)"
