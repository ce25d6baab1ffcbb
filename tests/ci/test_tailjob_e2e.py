"""End to end: the real job against the real bench server under real wrk, at a tiny profile."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import CI_DIR

pytestmark = [pytest.mark.wrk,
              pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")]


def test_tiny_tail_job_on_both_backends_writes_report_plot_and_history(tmp_path):
    out = subprocess.run(
        [sys.executable, str(CI_DIR / "tail_latency.py"), "--ab", "tail", "--threads", "1",
         "--connections", "8", "--duration", "1", "--runs", "1", "--no-warmup", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "## Verdicts" in out.stdout
    assert "io_uring, c8: no verdict (1 paired run; a verdict needs 8)" in out.stdout
    assert "epoll, c8: no verdict" in out.stdout

    results = tmp_path / "results"
    for suffix in (".md", ".svg", ".png", ".json"):
        assert len(list(results.glob(f"*-quick-tail{suffix}"))) == 1, suffix
    report = next(results.glob("*.md")).read_text()
    assert "| Requests/s |" in report and "### Runs: epoll, c8" in report

    lines = (tmp_path / "tail-latency.jsonl").read_text().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert [leg["backend"] for leg in line["legs"]] == ["io_uring", "epoll"]
    assert line["legs"][0]["knobs"]["B"]["CWIST_REACTOR_TAIL_US"] == 3500
    result = json.loads((tmp_path / line["result"]).read_text())
    for leg in result["legs"]:
        assert [r["backend"] for r in leg["runs"]] == [leg["leg"]["backend"]] * 2
        for r in leg["runs"]:
            assert r["wrk"]["requests"] > 0
            assert r["metrics"]["cpu_us_per_req"] > 0
            assert r["wrk"]["errors"] == {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}


def test_probe_leg_gathers_every_workers_file_on_both_backends(tmp_path):
    out = subprocess.run(
        [sys.executable, str(CI_DIR / "tail_latency.py"), "--ab", "tail", "--probe", "--workers", "2",
         "--threads", "1", "--connections", "8", "--duration", "1", "--runs", "1", "--no-warmup",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    for backend in ("io_uring", "epoll"):
        section = out.stdout.split(f"## Latency probe: {backend}, c8, medians over 1 runs per arm")[1]
        rows = [ln.split(" | ")[:2] for ln in section.split("\n## ")[0].splitlines()
                if ln.startswith("| ") and not ln.startswith("| Arm ")]
        assert rows == [["| A: tail off", w] for w in ("0", "1", "all")] + \
                      [["| B: tail on", w] for w in ("0", "1", "all")], backend

    result = json.loads(next((tmp_path / "results").glob("*-quick-tail.json")).read_text())
    for leg in result["legs"]:
        assert leg["env"]["A"]["CWIST_LATENCY_PROBE"] == "1"
        for r in leg["runs"]:
            probe = r["probe"]
            assert [w["worker"] for w in probe["workers"]] == [0, 1]
            assert {w["backend"] for w in probe["workers"]} == {leg["leg"]["backend"]}
            # the files describe this run: a closed-loop, unpipelined client needs a read callback
            # per request (the margin allows for a request picked up without one)
            assert probe["all"]["dispatched"] >= r["wrk"]["requests"] // 2 > 0
            assert len(probe["files"]) == 2 and all(f.startswith(str(tmp_path)) for f in probe["files"])
        assert set(leg["probe"]) == {"A", "B"}
    line = json.loads((tmp_path / "tail-latency.jsonl").read_text())
    assert line["probe"] is True and line["legs"][0]["probe"]["B"]["worker"] == "all"
