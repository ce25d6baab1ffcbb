"""The --probe leg: every worker's probe file gathered per run, summarised per arm and worker.

The probe files are written by the real :class:`tailreactor.probe.LatencyProbe`
(fed known durations), so the job reads exactly what a server writes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailjob import probeleg, report
from tailreactor import Config
from tailreactor.probe import LatencyProbe


def write_worker(
    template: str, worker: int, *, delays_us: list[int], elevated: int, round_us: int = 1000
) -> None:
    """One worker's probe file: one dispatch per delay (queue delay since arm = since ready = delay),
    all in one round of ``round_us``."""
    probe = LatencyProbe("epoll", worker=worker, config=Config.default().replace(latency_probe_file=template))
    for i, us in enumerate(delays_us):
        probe.dispatch(us * 1000, us * 1000, 5_000, i < elevated)
    probe.round(len(delays_us), round_us * 1000)
    probe.finish({"rounds": len(delays_us)})


@pytest.fixture
def two_workers(tmp_path):
    template = probeleg.probe_env(tmp_path)["CWIST_LATENCY_PROBE_FILE"]
    write_worker(template, 0, delays_us=[100] * 98 + [6000, 7000], elevated=2)
    write_worker(template, 1, delays_us=[200] * 10, elevated=0, round_us=5000)
    return template


def test_probe_env_turns_the_probe_on_with_a_per_worker_template(tmp_path):
    env = probeleg.probe_env(tmp_path / "leg0-t1-A")
    assert env == {
        "CWIST_LATENCY_PROBE": "1",
        "CWIST_LATENCY_PROBE_FILE": str(tmp_path / "leg0-t1-A" / "probe-{pid}-{worker}.json"),
    }


def test_gather_reads_every_worker_and_merges_them(two_workers):
    got = probeleg.gather(two_workers, workers=2)
    w0, w1 = got["workers"]
    assert (w0["worker"], w1["worker"]) == (0, 1)
    assert (w0["dispatched"], w0["tail_elevations"], w0["over_5ms"], w0["over_5ms_ready"]) == (100, 2, 2, 2)
    assert (w0["arm_p50_us"], w0["ready_p50_us"]) == (100, 100)
    assert w0["arm_p99_us"] == 6000 or w0["arm_p99_us"] == pytest.approx(6000, rel=1e-3)
    assert (w1["dispatched"], w1["arm_p50_us"], w1["arm_p99_us"], w1["over_5ms"]) == (10, 200, 200, 0)
    assert (w0["round_p50_us"], w0["round_p99_us"]) == (1000, 1000)  # round time: is a round > TAIL_US?
    assert w1["round_p50_us"] == pytest.approx(5000, rel=1e-3)
    merged = got["all"]
    assert merged["worker"] == "all"
    assert (merged["dispatched"], merged["tail_elevations"], merged["over_5ms"]) == (110, 2, 2)
    assert merged["arm_p50_us"] == 100  # 98 + 10 samples: the 55th is one of worker 0's 100 us
    assert len(got["files"]) == 2 and got["template"] == two_workers


def test_a_missing_worker_file_stops_with_one_line_naming_the_worker(two_workers):
    with pytest.raises(probeleg.ProbeError) as e:
        probeleg.gather(two_workers, workers=3)
    message = str(e.value)
    assert "worker 2 wrote no latency probe file" in message and two_workers in message
    assert "\n" not in message


def test_no_file_at_all_is_an_error_too(tmp_path):
    template = probeleg.probe_env(tmp_path)["CWIST_LATENCY_PROBE_FILE"]
    with pytest.raises(probeleg.ProbeError, match="worker 0 wrote no latency probe file"):
        probeleg.gather(template, workers=1)


def _with_probe(record, *, scale: int):
    """A copy of a synthetic RunRecord with a 2-worker probe whose figures are multiples of ``scale``."""

    def figures(worker):
        k = scale * (1 if worker == 0 else 10)
        return {
            "pid": 100 + worker,
            "worker": worker,
            "backend": "epoll",
            "tail_elevations": k,
            "over_5ms": 2 * k,
            "over_5ms_ready": k,
            "arm_p50_us": 3 * k,
            "arm_p99_us": 4 * k,
            "ready_p50_us": 5 * k,
            "ready_p99_us": 6 * k,
            "round_p50_us": 7 * k,
            "round_p99_us": 8 * k,
            "dispatched": 1000 * k,
        }

    merged = {**figures(0), "worker": "all", "pid": None, "dispatched": 11000 * scale}
    return replace(
        record, probe={"template": "t", "files": [], "workers": [figures(0), figures(1)], "all": merged}
    )


@pytest.fixture
def probe_job(synthetic_job):
    """The synthetic job with probe figures: run t of arm A has scale t+1, of arm B 100 (t+1)."""
    lr = synthetic_job.legs[0]
    runs = [_with_probe(r, scale=(r.trial + 1) * (100 if r.arm == "B" else 1)) for r in lr.runs]
    leg = replace(lr, runs=runs)
    leg.probe = probeleg.summarize(leg.runs)
    return replace(
        synthetic_job, legs=[leg], settings=replace(synthetic_job.settings, probe_dir="out/x-probe")
    )


def test_summary_is_the_median_over_measured_runs_per_arm_and_worker(probe_job):
    summary = probe_job.legs[0].probe
    assert summary["A"]["runs"] == 8 and summary["B"]["runs"] == 8
    rows = {row["worker"]: row for row in summary["A"]["rows"]}
    assert list(rows) == [0, 1, "all"]
    # scales 1..8 (the warm-up's scale 0 is left out): median 4.5
    assert rows[0]["tail_elevations"] == 4.5 and rows[1]["tail_elevations"] == 45
    assert rows["all"]["dispatched"] == 11000 * 4.5
    assert {row["worker"]: row for row in summary["B"]["rows"]}[0]["arm_p99_us"] == 4 * 450


def test_report_has_a_probe_table_with_one_row_per_arm_and_worker(probe_job):
    text = report.render(probe_job, runs=False)
    assert "## Latency probe: epoll, c64, medians over 8 runs per arm" in text
    section = text.split("## Latency probe: epoll, c64")[1].split("\n## ")[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| Arm ")]
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| A", "0"],
        ["| A", "1"],
        ["| A", "all"],
        ["| B", "0"],
        ["| B", "1"],
        ["| B", "all"],
    ]
    assert rows[0].split(" | ")[2:] == [
        "4.5",
        "9",
        "4.5",
        "13.5",
        "18",
        "22.5",
        "27",
        "31.5",
        "36",
        "4,500 |",
    ]


def test_job_without_probe_has_no_probe_section(synthetic_job):
    assert "Latency probe" not in report.render(synthetic_job, runs=False)
