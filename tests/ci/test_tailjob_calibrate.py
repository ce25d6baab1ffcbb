"""--calibrate: A/A legs and legs with an injected slowdown, summarised per metric."""

from __future__ import annotations

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
    rows = {r.metric.key: r for r in calibrate.summarize(legs)}
    p99, cpu = rows["p99"], rows["cpu_us_per_req"]
    assert (p99.aa_legs, p99.false_calls, p99.aa_equivalent, p99.aa_inconclusive) == (3, 1, 1, 1)
    assert p99.median_detectable == pytest.approx(0.08)
    assert (cpu.slow_legs["slow10"], cpu.detected["slow10"]) == (2, 1)
    assert (cpu.slow_legs["slow25"], cpu.detected["slow25"]) == (2, 2)
    assert p99.detected["slow25"] == 1  # a gain under a slowdown is not a detection
    assert p99.wrong_way["slow25"] == 1  # ... it is counted as the wrong way
    assert rows["p50"].false_calls == 0


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
