"""benchmarks/results/ keeps only the latest deliberate measurement of each kind.

A measurement is a stem ``<UTC time>-<profile>-<kind>`` with its report, plot
and whole-job files; the job's history files (``peers.jsonl``,
``tail-latency.jsonl``) and git's log keep the earlier ones.  A study (a set of
different experiments run together, each with its command in the docs) lives in
a subfolder of its own, such as ``benchmarks/results/study/``, and is not counted.
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEM = re.compile(r"^(?P<time>\d{8}T\d{6}Z)-(?P<kind>[a-z0-9-]+?)\.(?:json|md|svg|png)$")


def test_one_committed_measurement_of_each_kind():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    times: dict[str, set[str]] = defaultdict(set)
    for name in (Path(f).name for f in files if Path(f).parent == Path("benchmarks/results")):
        m = STEM.match(name)
        if m:
            times[m["kind"]].add(m["time"])
    several = {kind: sorted(t) for kind, t in times.items() if len(t) > 1}
    assert not several, (f"benchmarks/results/ holds more than one measurement of a kind: {several}; "
                         f"keep the latest (git rm the others: git's log and the history files keep them)")
