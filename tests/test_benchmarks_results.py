"""benchmarks/results/ keeps only the latest deliberate measurement of each kind.

A measurement is a stem ``<UTC time>-<profile>-<kind>`` with its report, plot
and compact whole-job files; git's log keeps the earlier ones.  The results stay
small (a report, a compact JSON, one SVG plot each) and every result file a page
names is committed.  A study (a set of
different experiments run together, each with its command in the docs) lives in
a subfolder of its own, such as ``benchmarks/results/study/``, and is not counted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEM = re.compile(r"^(?P<time>\d{8}T\d{6}Z)-(?P<kind>[a-z0-9-]+?)\.(?:json|md|svg|png)$")


def test_one_committed_measurement_of_each_kind():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(
        ["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    times: dict[str, set[str]] = defaultdict(set)
    for name in (Path(f).name for f in files if Path(f).parent == Path("benchmarks/results")):
        m = STEM.match(name)
        if m:
            times[m["kind"]].add(m["time"])
    several = {kind: sorted(t) for kind, t in times.items() if len(t) > 1}
    assert not several, (
        f"benchmarks/results/ holds more than one measurement of a kind: {several}; "
        f"keep the latest (git rm the others: git's log and the history files keep them)"
    )


def _tracked(under: str) -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", under], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / f for f in out.stdout.split()]


#: What benchmarks/results/ may hold in all, and one file at most: reports, compact JSONs, one plot each.
# 1.2 MB until the dispatch policies' counts and sweep (issue 40) added about 0.15 MB of evidence, and
# their counts at four batch sizes (the per-round and per-event fit) another 0.05 MB; 1.4 MB until the
# age order's recount and the moonshot's sim and live reports (issue 40) added about 0.1 MB.
BUDGET_TOTAL, BUDGET_FILE = 1_500_000, 450_000


def test_committed_results_are_small():
    files = _tracked("benchmarks/results")
    sizes = {f.relative_to(ROOT).as_posix(): f.stat().st_size for f in files}
    big = {f: s for f, s in sizes.items() if s > BUDGET_FILE}
    assert not big, (
        f"over {BUDGET_FILE:,} bytes: {big}; compact a result JSON with benchmarks/compact_result.py"
    )
    assert sum(sizes.values()) <= BUDGET_TOTAL, f"benchmarks/results holds {sum(sizes.values()):,} bytes"


def test_committed_result_jsons_are_compact():
    """No raw distribution (HdrHistogram base64, wrk's spectrum): benchmarks/compact_result.py was run."""
    for f in _tracked("benchmarks/results"):
        if f.suffix == ".json":
            text = f.read_text(encoding="utf-8")
            assert '"histogram":"HISTF' not in text.replace(" ", "") and '"spectrum"' not in text, f
            assert "\n  " not in text, (
                f"{f}: indented; python benchmarks/compact_result.py {f.relative_to(ROOT)}"
            )


def test_only_svg_plots_are_committed():
    """The job writes each plot as SVG and PNG; the SVG is committed, the PNG is the same picture."""
    assert not [f for f in _tracked("benchmarks/results") if f.suffix == ".png"]


_NAMED = re.compile(r"(?:benchmarks/)?results/((?:study/)?\d{8}T\d{6}Z-[a-z0-9-]+\.(?:json|md|svg|png))")


def test_every_result_file_the_docs_name_is_committed():
    """A figure the docs quote is traceable: each concrete results/<stem>.* path they name is in git."""
    tracked = {f.relative_to(ROOT).as_posix() for f in _tracked("benchmarks/results")}
    pages = [f for f in _tracked(".") if f.suffix == ".md" and "benchmarks/results" not in f.as_posix()]
    named = {
        (p.relative_to(ROOT).as_posix(), m)
        for p in pages
        for m in _NAMED.findall(p.read_text(encoding="utf-8"))
    }
    assert named, "no page names a committed result (the pattern is out of date)"
    missing = sorted((page, m) for page, m in named if f"benchmarks/results/{m}" not in tracked)
    assert not missing, f"named but not committed: {missing}"


def test_compact_result_drops_the_raw_distributions_and_refuses_what_is_not_a_result(tmp_path):
    run = {
        "wrk": {"histogram": "HISTFAAAx", "spectrum": [[50.0, 7]], "percentiles": [{"p": 50.0, "us": 7}]},
        "metrics": {"p50": 7},
    }
    doc = {
        "profile": "quick",
        "legs": [{"name": "epoll", "runs": [run]}, {"leg": {"runs": [json.loads(json.dumps(run))]}}],
    }
    good, bad = tmp_path / "r.json", tmp_path / "x.json"
    good.write_text(json.dumps(doc, indent=2))
    bad.write_text('{"not": "a result"}')
    script = [sys.executable, str(ROOT / "benchmarks/compact_result.py")]
    refused = subprocess.run([*script, str(good), str(bad)], capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "x.json" in refused.stderr
    assert json.loads(good.read_text()) == doc  # nothing written: the bad file was found first
    done = subprocess.run([*script, str(good)], capture_output=True, text=True, check=True)
    assert "r.json:" in done.stdout
    out = json.loads(good.read_text())
    for r in (out["legs"][0]["runs"][0], out["legs"][1]["leg"]["runs"][0]):
        assert r == {"wrk": {"percentiles": [{"p": 50.0, "us": 7}]}, "metrics": {"p50": 7}}
    assert out["profile"] == "quick" and "\n" not in good.read_text().rstrip("\n")
