"""The latency probe's files read back: one worker's, every worker's, merged, as a table.

Role
----
Each worker's :class:`~tailreactor.probe.LatencyProbe` writes one JSON
document (``CWIST_LATENCY_PROBE_FILE``, named by
:func:`~tailreactor.config.probe_file_path`) when its reactor closes.  This
module reads them back for the tail-latency job's ``--probe`` leg and for
people: :func:`load_probe_file` checks the format and decodes the
HdrHistograms, :func:`load_probe_files` finds every worker's file of a
template, :func:`merge` adds workers together, :func:`worker_table` prints
the figures the seed quoted, and ``python -m tailreactor.probe_files
TEMPLATE_OR_FILE...`` prints that table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from hdrh.histogram import HdrHistogram

from .probe import COUNTERS, FORMAT, HISTOGRAMS, new_histogram, summarize

__all__ = ["probe_file_glob", "load_probe_file", "load_probe_files", "merge", "worker_table", "main"]


def probe_file_glob(template: str) -> str:
    """A glob pattern matching every :func:`~tailreactor.config.probe_file_path` of ``template``."""
    marker = "\0"
    parts = template.replace("{pid}", marker).replace("{worker}", marker).split(marker)
    pattern = "*".join(glob.escape(part) for part in parts)
    if "{pid}" not in template:
        pattern += ".*"
    if "{worker}" not in template:
        pattern += ".*"
    return pattern


def load_probe_file(path: str) -> dict:
    """Read one worker's JSON file; return it with ``decoded: {name: HdrHistogram}`` added.

    Raises ``OSError`` if it cannot be read and ``ValueError`` (one line
    naming the path) if it is not a probe document of this :data:`FORMAT`.
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a latency probe file (invalid JSON: {exc})") from None
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt != FORMAT:
        raise ValueError(f"{path}: format {fmt!r} is not a latency probe file; accepted {FORMAT!r}")
    doc["decoded"] = {}
    for name in HISTOGRAMS:
        try:
            doc["decoded"][name] = HdrHistogram.decode(doc["histograms"][name]["hdr"])
        except Exception as exc:  # noqa: BLE001 -- hdrh raises several types for a bad blob
            raise ValueError(
                f"{path}: histogram {name!r} is missing or not HdrHistogram base64 "
                f"({type(exc).__name__}: {exc})"
            ) from None
    doc["path"] = path
    return doc


def load_probe_files(template: str) -> list[dict]:
    """Every worker's file for ``CWIST_LATENCY_PROBE_FILE=template``, sorted by (worker, pid)."""
    docs = [load_probe_file(p) for p in glob.glob(probe_file_glob(template))]
    return sorted(docs, key=lambda d: (d["worker"], d["pid"]))


def merge(docs: list[dict]) -> dict:
    """Add the histograms and counters of several :func:`load_probe_file` documents.

    Returns the same shape (``worker: "all"``, ``pid: None``, ``backend``: the
    backends joined by ``,``, plus ``workers``: how many were merged), so
    :func:`~tailreactor.probe.format_report` prints it.  ``ValueError`` if ``docs`` is empty.
    """
    if not docs:
        raise ValueError("merge() needs at least one probe document, got none")
    decoded, summaries = {}, {}
    for name, (_, unit) in HISTOGRAMS.items():
        h = new_histogram(name)
        for d in docs:
            h.add(d["decoded"][name])
        decoded[name] = h
        summaries[name] = summarize(h, sum(d["histograms"][name]["sum"] for d in docs), unit)
    reactors = [d.get("reactor") or {} for d in docs]
    keys = dict.fromkeys(k for r in reactors for k in r)  # union, first-seen order
    reactor = {k: sum(r.get(k, 0) for r in reactors) for k in keys} or None
    return {
        "format": FORMAT,
        "pid": None,
        "worker": "all",
        "backend": ",".join(sorted({d["backend"] for d in docs})),
        "workers": len(docs),
        "counters": {k: sum(d["counters"].get(k, 0) for d in docs) for k in COUNTERS},
        "reactor": reactor,
        "histograms": summaries,
        "decoded": decoded,
    }


_TABLE = (
    ("pid", 8),
    ("worker", 6),
    ("backend", 9),
    ("tail_elevations", 15),
    ("over_5ms", 9),
    ("arm_p50_us", 10),
    ("arm_p99_us", 10),
    ("ready_p50_us", 12),
    ("ready_p99_us", 12),
    ("dispatched", 10),
)


def worker_table(docs: list[dict]) -> str:
    """Per worker, then all merged: the figures the seed quoted.

    Columns: pid, worker, backend, tail_elevations, over_5ms (queue delay since
    arm > 5 ms), queue_delay_arm p50/p99 and queue_delay_ready p50/p99 (us),
    dispatched.  The last row (pid ``all``) is :func:`merge` of every doc.
    """

    def row(d, pid, worker):
        qa, qr = d["histograms"]["queue_delay_arm"], d["histograms"]["queue_delay_ready"]
        c = d["counters"]
        return (
            pid,
            worker,
            d["backend"],
            c["tail_elevations"],
            c["over_5ms"],
            qa["p50"],
            qa["p99"],
            qr["p50"],
            qr["p99"],
            c["dispatched"],
        )

    rows = [row(d, d["pid"], d["worker"]) for d in docs]
    if docs:
        rows.append(row(merge(docs), "all", "*"))
    fmt = " ".join(f"{{:>{w}}}" for _, w in _TABLE)
    return "\n".join([fmt.format(*(n for n, _ in _TABLE))] + [fmt.format(*map(str, r)) for r in rows])


def main(argv: list[str] | None = None) -> int:
    """``python -m tailreactor.probe_files TEMPLATE_OR_FILE...``: print :func:`worker_table`.

    Each argument is a ``CWIST_LATENCY_PROBE_FILE`` template (expanded with
    :func:`probe_file_glob`) or an existing file.  Exit 1 if nothing matched.
    """
    parser = argparse.ArgumentParser(
        prog="python -m tailreactor.probe_files",
        description="Print the latency probe's per-worker table (and all workers merged) from the "
        "files CWIST_LATENCY_PROBE_FILE made the workers write.",
    )
    parser.add_argument(
        "files",
        nargs="+",
        metavar="TEMPLATE_OR_FILE",
        help="a CWIST_LATENCY_PROBE_FILE template ({pid}, {worker}) or a probe file",
    )
    args = parser.parse_args(argv).files
    docs = []
    for arg in args:
        if os.path.isfile(arg) and "{" not in arg:
            docs.append(load_probe_file(arg))
        else:
            docs.extend(load_probe_files(arg))
    if not docs:
        print(f"no latency probe files match {args!r}", file=sys.stderr)
        return 1
    print(worker_table(docs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
