"""Arm A on the code of a git ref (``--a-ref REF``): a temporary worktree and the import path to it.

Role
----
:func:`checkout` resolves ``REF`` to a commit of this repository, checks it
out in a temporary ``git worktree`` (detached) and removes it afterwards.
:func:`use` is the initializer of the worker processes that simulate arm A:
it puts the worktree's ``reference/`` first on ``sys.path`` before anything
imports :mod:`tailreactor`, so those runs use the ref's reactor, backends and
HTTP code, and the working tree's simulator (this package) around them.
Nothing here imports :mod:`tailreactor`: the initializer must run first.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["RefError", "resolve", "checkout", "use"]


class RefError(ValueError):
    """A ref that names no commit here, or a worktree git cannot make; the message is one line."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    # check=False: the callers read returncode (a ref that names no commit is a RefError, not a crash)
    return subprocess.run(["git", "-C", str(repo), *args], check=False, capture_output=True, text=True)


def resolve(repo: Path, ref: str) -> str:
    """The commit ``ref`` names in ``repo``; :class:`RefError` naming the option otherwise."""
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise RefError(
            f"--a-ref {ref!r}: not a commit of this repository (accepted a branch, tag, "
            "commit id or an expression like HEAD~1)"
        )
    return done.stdout.strip()


@contextlib.contextmanager
def checkout(repo: Path, commit: str):
    """A detached worktree of ``commit`` in a temporary directory; yields its path, then removes it."""
    with tempfile.TemporaryDirectory(prefix="tailjob-a-ref-") as tmp:
        path = Path(tmp) / "tree"
        done = _git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
        if done.returncode != 0:
            raise RefError(f"--a-ref: git worktree add failed: {done.stderr.strip().splitlines()[-1:]}")
        try:
            yield path
        finally:
            _git(repo, "worktree", "remove", "--force", str(path))


def use(code_dir: str) -> None:
    """Worker initializer: import :mod:`tailreactor` from ``code_dir`` (a tree's ``reference/``)."""
    if "tailreactor" in sys.modules:
        raise RuntimeError("tailreactor was imported before the --a-ref worker could choose its code")
    sys.path.insert(0, code_dir)
