"""calibrate K: A/A legs and legs with an injected slowdown, summarised per metric."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailjob import calibrate, stats


def comps(verdicts: dict[str, str], detectable: float = 0.1) -> list[stats.Comparison]:
    out = []
    for m in stats.METRICS:
        v = verdicts.get(m.key, "equivalent")
        out.append(
            stats.Comparison(
                m,
                8,
                1.0,
                1.0,
                1.0,
                (1 - detectable, 1 + detectable),
                m.min_effect,
                v,
                "",
                detectable=detectable,
                pairs_needed=8,
            )
        )
    return out


def test_delays_are_the_slowdowns_share_of_the_measured_cpu_per_request():
    assert calibrate.delays_for(40.0) == {"slow10": 4, "slow25": 10}
    assert calibrate.delays_for(3.0) == {"slow10": 1, "slow25": 1}  # at least 1 us
    with pytest.raises(ValueError, match="CPU per request"):
        calibrate.delays_for(0.0)


def test_summary_counts_false_calls_detections_and_median_detectable():
    legs = [
        calibrate.CalibrationLeg("aa", 0, "io_uring", None, comps({}, 0.04)),
        calibrate.CalibrationLeg("aa", 1, "io_uring", None, comps({"p99": "gain"}, 0.08)),
        calibrate.CalibrationLeg("aa", 2, "io_uring", None, comps({"p99": "inconclusive"}, 0.30)),
        calibrate.CalibrationLeg("slow10", 0, "io_uring", 4, comps({"cpu_us_per_req": "regression"})),
        calibrate.CalibrationLeg("slow10", 1, "io_uring", 4, comps({"cpu_us_per_req": "inconclusive"})),
        calibrate.CalibrationLeg(
            "slow25", 0, "io_uring", 10, comps({"cpu_us_per_req": "regression", "p99": "regression"})
        ),
        calibrate.CalibrationLeg(
            "slow25", 1, "io_uring", 10, comps({"cpu_us_per_req": "regression", "p99": "gain"})
        ),
    ]
    text = calibrate.render_table(legs, profile="quick", k=3, wrk="-t1 -c64 -d2s")
    rows = {ln.split(" | ")[1]: ln for ln in text.splitlines() if ln.startswith("| io_uring |")}
    # p99: 3 A/A legs, 1 false call, 1 equivalent, median detectable 8%; under +25% one regression
    # and one gain (not a detection: the wrong way)
    assert rows["p99 ms"] == "| io_uring | p99 ms | 10% | 1/3 | 1/3 | ±8.0% | 0/2 | 1/2 (1 gain) |"
    assert rows["Server CPU us/request"].endswith("| 0/3 | 3/3 | ±8.0% | 1/2 | 2/2 |")
    assert rows["p50 ms"].split(" | ")[3:5] == ["0/3", "3/3"]


def test_the_table_names_k_profile_backend_and_delays():
    legs = [
        calibrate.CalibrationLeg("aa", 0, "epoll", None, comps({})),
        calibrate.CalibrationLeg("slow10", 0, "epoll", 4, comps({})),
        calibrate.CalibrationLeg("slow25", 0, "epoll", 10, comps({})),
    ]
    text = calibrate.render_table(legs, profile="quick", k=1, wrk="-t2 -c64 -d2s")
    assert "K = 1" in text and "profile `quick`" in text and "epoll" in text
    assert "CWIST_BENCH_DELAY_US=4" in text and "CWIST_BENCH_DELAY_US=10" in text
    assert (
        "| Backend | Metric | Min. effect | A/A: false gain/regression | A/A: equivalent "
        "| A/A: median detectable | +10%: detected | +25%: detected |"
    ) in text.splitlines()
    rows = [ln for ln in text.splitlines() if ln.startswith("| epoll |")]
    assert len(rows) == len(stats.METRICS)
    assert rows[0].startswith("| epoll | Requests/s | 5% | 0/1 | 1/1 | ±10.0% | 0/1 | 0/1 |")


def test_a_calibration_that_could_reach_no_verdict_says_so_above_the_table():
    """Issue 38: ``calibrate 1 --runs 2`` printed 0/1 false and 0/1 detected from verdicts all n/a."""
    few = [replace(c, n_pairs=2, verdict=stats.NO_VERDICT) for c in comps({})]
    legs = [calibrate.CalibrationLeg(kind, 0, "epoll", None, few) for kind in calibrate.KINDS]
    text = calibrate.render_table(legs, profile="quick", k=1, wrk="-t2 -c64 -d2s")
    assert (
        "No verdict was possible: every leg's verdicts are n/a (2 paired runs per leg; a verdict "
        f"needs {stats.MIN_PAIRS}: --runs {stats.MIN_PAIRS} or more), so the counts below say nothing."
    ) in text.splitlines()
    ok = calibrate.render_table(
        [calibrate.CalibrationLeg(k, 0, "epoll", None, comps({})) for k in calibrate.KINDS],
        profile="quick",
        k=1,
        wrk="-t2 -c64 -d2s",
    )
    assert "No verdict was possible" not in ok
