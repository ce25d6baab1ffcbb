"""A command's optional dependencies: is its extra installed, and if not, the one line that says so.

Python-only machinery (packaging), not part of the reactor.  The base install is the reference's
(``dependencies`` in pyproject.toml); each command's own dependencies are an extra named for who needs
it: ``conformance`` (``tailreactor-conformance``: pytest, its plugins, Hypothesis), ``job``
(``tailreactor-tail-latency``: numpy, scipy, matplotlib), ``sweep`` (Dask).  pyproject.toml is the one
list: :func:`missing` reads it from the installed project's metadata, so a command checks its extra
before it imports what needs it, and a user without it reads which ``pip install`` to run, not a
traceback.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from urllib.parse import unquote, urlparse

__all__ = ["PROJECT", "MISSING_EXIT", "missing", "install_command", "require"]

PROJECT = "tailreactor"
#: A command's exit status when its environment lacks what it needs (the job's "environment" status).
MISSING_EXIT = 3
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def missing(extra: str) -> list[str]:
    """The distributions ``extra`` requires that are not installed, in pyproject.toml's order.

    ``[]`` when the project itself is not installed (modules run from a checkout on ``PYTHONPATH``):
    there is no metadata to read, and the import that follows fails as it would.
    """
    try:
        required = metadata.requires(PROJECT) or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""\bextra\s*==\s*["']{re.escape(extra)}["']""")
    out = []
    for req in required:
        spec, _, condition = req.partition(";")
        match = _NAME.match(spec.strip())
        if not match or not marker.search(condition):
            continue
        try:
            metadata.distribution(match[0])
        except metadata.PackageNotFoundError:
            out.append(match[0])
    return out


def install_command(extra: str) -> str:
    """The ``pip install`` that brings ``extra``: of the checkout an editable install came from, else
    of the project on the package index."""
    # The installed one records where it came from; a checkout's build metadata (tailreactor.egg-info,
    # found first when the checkout is the working directory) does not.
    recorded = (d.read_text("direct_url.json") for d in metadata.distributions(name=PROJECT))
    origin = json.loads(next((text for text in recorded if text), "{}"))
    url = urlparse(origin.get("url", ""))
    if origin.get("dir_info", {}).get("editable") and url.scheme == "file":
        return f"pip install -e '{unquote(url.path)}[{extra}]'"
    return f"pip install '{PROJECT}[{extra}]'"


def require(extra: str, command: str) -> None:
    """Return if ``extra`` is installed; else one line on stderr and exit :data:`MISSING_EXIT`."""
    gone = missing(extra)
    if gone:
        print(
            f"{command}: needs the {extra!r} extra; not installed for {sys.executable}: "
            f"{', '.join(gone)}; install it: {install_command(extra)}",
            file=sys.stderr,
        )
        raise SystemExit(MISSING_EXIT)
