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


def dumps(doc: dict, *, indent: int | None = 1) -> bytes:
    """A JSON document as the job writes it (``indent=1``, one trailing newline)."""
    return (json.dumps(doc, indent=indent) + "\n").encode()


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write ``path`` through a temporary file in its directory: a reader never sees half of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
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
