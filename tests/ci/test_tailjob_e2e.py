"""End to end: the real job against the real bench server under real wrk, at a tiny profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tailjob_testdata import CI_DIR

from tailjob import pooled

pytestmark = pytest.mark.wrk  # skipped without wrk (tests/conftest.py)


@pytest.mark.io_uring
def test_tiny_tail_job_on_both_backends_writes_report_plot_and_history(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            "--ab",
            "tail",
            "--threads",
            "1",
            "--connections",
            "8",
            "--duration",
            "1",
            "--runs",
            "1",
            "--no-warmup",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
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
            # wrk's whole histogram came through (LuaJIT ffi) and agrees with wrk's own figures
            h = pooled.decode(r["wrk"]["histogram"])
            assert abs(h.get_total_count() - r["wrk"]["latency_samples"]) <= 1
            assert h.get_max_value() == pytest.approx(r["wrk"]["latency_us"]["max"], rel=1e-3)
            # to p99 the rank rules of wrk and HdrHistogram differ by at most one sample: wrk's value
            # lies between the histogram's one sample either side (a short run on a loaded machine
            # has few samples, and neighbours can be far apart)
            one = 100.0 / h.get_total_count()
            for q in r["wrk"]["percentiles"][:4]:
                lo = h.get_value_at_percentile(max(q["p"] - one, 0.0))
                hi = h.get_value_at_percentile(min(q["p"] + one, 100.0))
                assert lo * (1 - 5e-3) - 2 <= q["us"] <= hi * (1 + 5e-3) + 2, (q, lo, hi)
        estimators = {c["metric"]: c["estimator"] for c in leg["comparisons"]}
        assert estimators == {
            "rps": "median",
            "cpu_us_per_req": "median",
            "p50": "median",
            "p99": "median",
            "p99.9": "pooled",
            "p99.99": "pooled",
            "p99.999": "pooled",
        }


def test_calibrate_runs_aa_and_slowdown_legs_and_writes_the_table(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            "calibrate",
            "1",
            "--backend",
            "epoll",
            "--threads",
            "1",
            "--connections",
            "8",
            "--duration",
            "1",
            "--runs",
            "1",
            "--no-warmup",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Calibration: K = 1 rounds, profile `quick` (`wrk -t1 -c8 -d1s`)" in out.stdout
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| epoll, c8 |")]
    assert len(rows) == 7
    assert all(" | 0/1 | 0/1 | - | 0/1 | 0/1 |" in r for r in rows)  # 1 pair: n/a everywhere
    data = json.loads(next((tmp_path / "results").glob("*-quick-calibrate.json")).read_text())
    assert [leg["kind"] for leg in data["legs"]] == ["aa", "slow10", "slow25"]
    delays = [leg["delay_us"] for leg in data["legs"]]
    assert delays[0] is None and 1 <= delays[1] <= delays[2]
    b_env = data["legs"][2]["leg"]["env"]["B"]
    assert b_env["CWIST_BENCH_DELAY_US"] == str(delays[2])
    assert len(list((tmp_path / "results").glob("*-quick-calibrate.md"))) == 1


@pytest.mark.io_uring
def test_probe_leg_gathers_every_workers_file_on_both_backends(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            "--ab",
            "tail",
            "--probe",
            "--workers",
            "2",
            "--threads",
            "1",
            "--connections",
            "8",
            "--duration",
            "1",
            "--runs",
            "1",
            "--no-warmup",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for backend in ("io_uring", "epoll"):
        section = out.stdout.split(f"## Latency probe: {backend}, c8, medians over 1 run per arm")[1]
        rows = [
            ln.split(" | ")[:2]
            for ln in section.split("\n## ")[0].splitlines()
            if ln.startswith("| ") and not ln.startswith("| Arm ")
        ]
        assert rows == [["| A: tail off", w] for w in ("0", "1", "all")] + [
            ["| B: tail on", w] for w in ("0", "1", "all")
        ], backend

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


@pytest.mark.io_uring
@pytest.mark.bench_extras
def test_peers_comparison_runs_every_server_and_writes_the_readme_table(tmp_path):
    from tailjob import peers

    nginx = peers.find_nginx()  # the test installs nothing: without nginx there is no ceiling row
    no_pin = [] if len(os.sched_getaffinity(0)) >= 2 else ["--no-pin"]
    out = subprocess.run(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            "peers",
            "--connections",
            "8",
            "--duration",
            "1",
            "--runs",
            "1",
            "--no-warmup",
            "--write-readme",
            "--out",
            str(tmp_path),
            *no_pin,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    missing_lines = [ln for ln in out.stderr.splitlines() if "nginx not found" in ln]
    if nginx:
        assert missing_lines == []
    else:
        assert missing_lines == [f"tail_latency: {peers.NGINX_MISSING}"]

    labels = ["tailreactor (io_uring)", "tailreactor (epoll)", "asyncio", "uvloop"] + (
        ["nginx (ceiling)"] if nginx else []
    )
    readme = (tmp_path / "README.md").read_text()
    for text in (out.stdout, readme):
        for header in ("| Server | Requests/s |", "| Server | Req/s ÷ asyncio |"):
            table = text.split(header)[1].split("\n\n")[0]
            rows = [ln.split(" | ")[0][2:] for ln in table.splitlines()[2:]]
            assert rows == labels, (header, rows)
    assert ("nginx (ceiling)" in readme) == bool(nginx)

    result = json.loads(next((tmp_path / "results").glob("*-quick-peers.json")).read_text())
    (leg,) = result["legs"]
    assert sorted(r["arm"] for r in leg["runs"]) == sorted(leg["servers"])
    assert [r["backend"] for r in leg["runs"] if r["arm"].startswith("tailreactor-")] == [
        r["arm"].split("-", 1)[1] for r in leg["runs"] if r["arm"].startswith("tailreactor-")
    ]
    for r in leg["runs"]:  # every server answered every request with a 2xx
        assert r["wrk"]["requests"] > 0, r["arm"]
        assert r["wrk"]["errors"] == {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}, r[
            "arm"
        ]
        assert r["metrics"]["cpu_us_per_req"] > 0
        if not no_pin:
            assert r["wrk_argv"][:3] == ["taskset", "-c", "1"] and "-t1" in r["wrk_argv"]
    assert result["settings"]["server_cpus"] == ("0" if not no_pin else None)
    assert leg["ratios"]["asyncio"]["asyncio"]["cpu_us_per_req"] == 1.0
    assert len((tmp_path / "peers.jsonl").read_text().splitlines()) == 1


def _children(pid: int, marker: bytes) -> list[int]:
    """Pids of the direct children of ``pid`` whose command line contains ``marker``."""
    found = []
    try:
        kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return found
    for kid in kids:
        try:
            cmd = open(f"/proc/{kid}/cmdline", "rb").read()
        except OSError:
            continue
        if marker in cmd:
            found.append(int(kid))
    return found


def test_sigterm_to_the_job_stops_its_bench_server(tmp_path):
    """A CI timeout or Ctrl-C on the job must not leave a bench server running (and holding a core)."""
    import select
    import signal
    import time

    job = subprocess.Popen(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            "--ab",
            "aa",
            "--backend",
            "epoll",
            "--threads",
            "1",
            "--connections",
            "4",
            "--duration",
            "30",
            "--runs",
            "1",
            "--no-warmup",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        servers: list[int] = []
        loads: list[int] = []
        # No event marks "wrk started": look until both are there or the job is gone (no deadline of
        # ours: a busy machine may take long to get there; the run itself then lasts 30 s).
        while not (servers and loads) and job.poll() is None:
            servers = _children(job.pid, b"tailreactor.http.server")
            loads = _children(job.pid, b"wrk")
            time.sleep(0.05)
        assert servers and loads, f"the job exited {job.returncode} before it started a measured run"
        pidfds = [os.pidfd_open(servers[0]), os.pidfd_open(loads[0])]
        try:
            job.send_signal(signal.SIGTERM)
            assert job.wait(120) != 0  # (hang guards, not bounds: the job stops them at once)
            for fd, what in zip(pidfds, ("bench server", "wrk")):
                assert select.select([fd], [], [], 60)[0], f"the {what} outlived the job"
        finally:
            for fd in pidfds:
                os.close(fd)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
