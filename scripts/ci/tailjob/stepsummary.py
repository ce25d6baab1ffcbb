"""A CI's job summary: where ``GITHUB_STEP_SUMMARY`` names a file, the job appends its verdicts there.

GitHub Actions sets ``GITHUB_STEP_SUMMARY`` for every step to a file whose Markdown it shows on the
run's page.  :func:`append` adds the report the job printed -- its title, setup, verdicts and the
verdict table of each leg -- without the explanation of the figures that follows them
(``## What the numbers are``), so a pull request's checks show the verdicts without opening a log.
Elsewhere (the variable unset or empty) it does nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["append", "VARIABLE"]

VARIABLE = "GITHUB_STEP_SUMMARY"
_EXPLANATION = "\n## What the numbers are"


def append(
    report: str, environ: Mapping[str, str] = os.environ, *, prog: str = "tail_latency"
) -> Path | None:
    """Append ``report`` (Markdown) up to its explanation to the file ``$GITHUB_STEP_SUMMARY``.

    Returns the file, or None when the variable is unset or the file cannot be written (then one
    line on stderr says so: the job's result stands, only the summary is missing)."""
    target = environ.get(VARIABLE)
    if not target:
        return None
    text = report.split(_EXPLANATION, 1)[0].rstrip() + "\n\n"
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        print(f"{prog}: {VARIABLE}={target}: cannot append the verdicts: {e.strerror}", file=sys.stderr)
        return None
    return Path(target)
