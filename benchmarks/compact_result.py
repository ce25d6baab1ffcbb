"""Make a job's result JSON small enough to commit: the same document without the raw histograms.

The tail-latency job's ``benchmarks/results/<stem>.json`` holds every run's wrk figures, and with them
each run's raw latency distribution twice: ``wrk.histogram`` (HdrHistogram's base64 form, about 10 KB
a run) and ``wrk.spectrum`` (the percentile spectrum the plot draws).  The report (``<stem>.md``), the
plot (``<stem>.svg``) and the rest of the JSON -- settings, provenance, each run's percentiles with
their samples, CPU accounting, every comparison with its interval and verdict -- are what the docs
quote; the raw distributions stay in the job's own output (a CI artifact) and are dropped here.
The result is written without indentation.  See benchmarks/README.md for when to commit a result.

    python benchmarks/compact_result.py benchmarks/results/<stem>.json [...]

Each file is rewritten in place (through a temporary file, so a failure leaves it as it was), and one
line per file gives the sizes before and after.  Exit 2 for a file that is not a job result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

#: The keys of a run's ``wrk`` record that hold a raw distribution.
RAW = ("histogram", "spectrum")


def compact(doc):
    """``doc`` without the raw distributions: every ``wrk`` record loses :data:`RAW` (any depth:
    a ``--calibrate`` result nests each leg's whole job)."""
    if isinstance(doc, dict):
        return {
            k: (
                compact({x: y for x, y in v.items() if x not in RAW})
                if k == "wrk" and isinstance(v, dict)
                else compact(v)
            )
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [compact(v) for v in doc]
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/compact_result.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULT_JSON",
        help="a job's result, benchmarks/results/<stem>.json",
    )
    args = parser.parse_args(argv)
    docs = {}
    for path in args.results:  # check every file before writing any
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            parser.exit(
                2,
                f"{parser.prog}: {path}: cannot read a JSON document ({exc}); "
                f"accepted: a job's result JSON\n",
            )
        if not (isinstance(doc, dict) and isinstance(doc.get("legs"), list)):
            parser.exit(
                2,
                f'{parser.prog}: {path}: not a tail-latency job result (no "legs" list); '
                f"accepted: a job's result JSON\n",
            )
        docs[path] = doc
    for path, doc in docs.items():
        before = path.stat().st_size
        text = json.dumps(compact(doc), separators=(",", ":"), ensure_ascii=False) + "\n"
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        print(f"{path}: {before:,} -> {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
