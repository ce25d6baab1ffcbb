"""Arm A on the code of a git ref (``--a-ref REF``): a temporary worktree and the import path to it.

:func:`checkout` checks the ref's commit out in a temporary detached ``git worktree``, removed however
the job ends.  Both tiers take the ref's code from its ``reference/``: the sim tier's arm-A workers
put it first on ``sys.path`` (:func:`use`, before anything imports :mod:`tailreactor`); the live
tier's arm-A server gets it first on ``PYTHONPATH`` (:func:`server_env`) and says on stderr where its
:mod:`tailreactor` lives (:func:`server_command`, :data:`CODE_LINE`), which the job checks every run.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

CODE_LINE = re.compile(r"^tailjob: tailreactor from (?P<path>\S.*)$")
"""The line a server started by :func:`server_command` prints first: its :mod:`tailreactor`'s directory."""

# Run as ``python -c _REPORT_AND_RUN MODULE ARGS...``: import tailreactor (from wherever the import path
# finds it), say where it is, then run MODULE as ``python -m MODULE ARGS...`` would.
_REPORT_AND_RUN = (
    "import runpy, sys, tailreactor; "
    "print('tailjob: tailreactor from ' + tailreactor.__path__[0], file=sys.stderr, flush=True); "
    "module = sys.argv.pop(1); "
    "runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


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
    """Worker initializer: import :mod:`tailreactor` from ``code_dir`` (a tree's ``reference/``);
    Ctrl-C is the parent's to handle (it ends its workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "tailreactor" in sys.modules:
        raise RuntimeError("tailreactor was imported before the --a-ref worker could choose its code")
    sys.path.insert(0, code_dir)


def label_arms(arms: tuple, ref: str) -> tuple:
    """``arms`` (two :class:`tailjob.plan.Arm`) labelled with their code: arm A ``REF`` (or
    ``LABEL @ REF``), arm B ``working tree`` (or ``LABEL @ working tree``); knobs unchanged."""
    from .plan import Arm

    a, b = arms
    return (
        Arm("A", f"{a.label} @ {ref}" if a.label != "A" else ref, a.env),
        Arm("B", f"{b.label} @ working tree" if b.label != "B" else "working tree", b.env),
    )


def server_env(env: dict[str, str], code_dir: str) -> dict[str, str]:
    """``env`` with ``code_dir`` (a tree's ``reference/``) first on ``PYTHONPATH``: a server process
    started with it, and every process it forks or spawns, imports :mod:`tailreactor` from there."""
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": code_dir + (os.pathsep + rest if rest else "")}


def server_command(python: str, module: str, args: list[str]) -> list[str]:
    """``python -m module args...``, preceded by the :data:`CODE_LINE` of the server's :mod:`tailreactor`."""
    return [python, "-c", _REPORT_AND_RUN, module, *args]


def imported(line: str) -> str | None:
    """The :mod:`tailreactor` directory a :data:`CODE_LINE` names (None: another line)."""
    m = CODE_LINE.match(line)
    return m.group("path") if m else None


def own_code() -> str:
    """The ``reference/`` directory this process imports :mod:`tailreactor` from (the working tree's)."""
    import tailreactor

    return os.path.dirname(tailreactor.__path__[0])
