"""A job's files: ``<results_dir>/<stem><suffix>`` each written whole, and the "Files:" list that names them.

One writer for every mode (A/B, sim, sweep, validate, calibrate, peers, instructions): the history
line goes through :func:`tailjob.history.append_history`.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path


def dumps(doc: dict) -> bytes:
    """A JSON document as the job writes it (``indent=1``, one trailing newline)."""
    return (json.dumps(doc, indent=1) + "\n").encode()


def _umask() -> int:
    """The process's umask, read without setting it (``os.umask`` sets it, for every thread)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write ``path`` through a temporary file in its directory: a reader never sees half of it.  The
    file gets the mode ``open`` would give it (0644 under umask 022), not the temporary file's 0600:
    others read the reports (a CI artifact, a shared results folder)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def write_files(results_dir: Path, stem: str, files: Mapping[str, bytes | str]) -> list[Path]:
    """Write ``<results_dir>/<stem><suffix>`` for each ``suffix -> data`` (``.md``, ``-x.svg``), in order."""
    results_dir.mkdir(parents=True, exist_ok=True)
    return [write_atomic(results_dir / f"{stem}{suffix}", data) for suffix, data in files.items()]


def files_text(
    paths: Sequence[Path | str], *, appended: Path | None = None, notes: Sequence[str] = ()
) -> str:
    """'Files:' and a line per path; ``appended``: the history file a line went to; ``notes``: more lines."""
    lines = ["Files:", *(f"- {p}" for p in paths)]
    if appended is not None:
        lines.append(f"- {appended} (one line appended)")
    return "\n".join([*lines, *(f"- {n}" for n in notes)])


def partial(why: str, done: int, total: int, missed: Sequence[str] = (), error: object = None) -> str:
    """What a job stopped before its last run is marked with (its result's ``partial``): why, after how
    many of its planned runs, the legs it did not reach, and the error that stopped it."""
    text = f"{why} after {done} of {total} runs"
    if missed:
        text += f"; not reached: {', '.join(missed)}"
    return text + (f" ({error})" if error is not None else "")


def kept(done: int, total: int, files: Sequence[Path | str]) -> str:
    """What a failed or interrupted job's one line ends with: the runs it finished and the files that
    keep them."""
    return f" ({done} of {total} runs finished, kept as partial: {', '.join(map(str, files))})"
