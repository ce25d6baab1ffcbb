"""Tests of the tail-latency job: make ``scripts/ci`` importable (package ``tailjob``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI_DIR = ROOT / "scripts" / "ci"
FIXTURES = ROOT / "fixtures" / "wrk"

if str(CI_DIR) not in sys.path:
    sys.path.insert(0, str(CI_DIR))


import pytest  # noqa: E402


def _record(leg, trial, position, arm, *, warmup=False, scale=1.0, flags=(), errors=None):
    """A RunRecord with made-up but self-consistent figures; ``scale`` multiplies latency and CPU."""
    from tailjob.runner import RunRecord

    base = 1000 + 10 * trial + position  # us at p50, a little different per run
    pct = {50: base, 75: 1.2 * base, 90: 1.5 * base, 99: 3 * base, 99.9: 5 * base,
           99.99: 8 * base, 99.999: 9 * base}
    samples = {50: 30000, 75: 15000, 90: 6000, 99: 600, 99.9: 60, 99.99: 6, 99.999: 1}
    rps = 40000 / scale + 100 * trial
    requests = int(rps * 2)
    errors = errors or {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    spectrum = [[100 * (1 - 10 ** (-k / 10)), int(base * scale * (1 + k / 5))] for k in range(51)]
    wrk = {"requests": requests, "duration_us": 2_000_000, "bytes": requests * 40, "rps": rps,
           "text_rps": rps, "latency_samples": 60000, "latency_us": {"min": 50, "max": 9 * base,
                                                                     "mean": base, "stdev": base / 3},
           "percentiles": [{"p": p, "us": int(v * scale), "samples": samples[p]} for p, v in pct.items()],
           "spectrum": spectrum, "errors": errors}
    metrics = {"rps": rps, "cpu_us_per_req": 25.0 * scale + trial / 10}
    metrics.update({f"p{p:g}": int(v * scale) for p, v in pct.items() if p not in (75, 90)})
    return RunRecord(leg=leg, trial=trial, position=position, arm=arm, warmup=warmup, backend="epoll",
                     port=3000, started_at="2026-11-29T21:00:00+00:00", wall_s=2.0,
                     wrk_argv=["wrk", "-t2", "-c64", "-d2s"], wrk=wrk, server_cpu_s=requests * 25e-6,
                     wrk_cpu_s=2.5, self_cpu_s=0.01, machine_busy_s=6.0, steal_s=0.0,
                     other_cpu_s=0.3 if "polluted" in flags else 0.01,
                     other_cores=0.1 if "polluted" in flags else 0.003, metrics=metrics,
                     flags=list(flags))


@pytest.fixture(scope="session")
def synthetic_job():
    """A finished JobResult: one epoll leg, 8 trials + warm-up; B is twice as slow as A.

    Session-scoped (the bootstrap takes a moment); tests must not modify it.
    """
    from tailjob import runner
    from tailjob.plan import Leg, arm_knobs, arms_for, rmit_schedule, server_env

    arms = arms_for(None, a="", b="CWIST_BENCH_DELAY_US=200")
    leg = Leg(0, "epoll", 2, 64, 2, 8)
    schedule = rmit_schedule(8, seed=1)
    runs = [_record(0, -1, 0, "A", warmup=True)]
    for t, order in enumerate(schedule):
        for pos, key in enumerate(order):
            flags = ("polluted",) if (t, key) == (2, "A") else ()
            errors = {"connect": 0, "read": 3, "write": 0, "status": 0, "timeout": 1} \
                if (t, key) == (7, "B") else None
            if errors:
                flags = ("socket-errors",)
            runs.append(_record(0, t, pos, key, scale=2.0 if key == "B" else 1.0, flags=flags,
                                errors=errors))
    envs = {a.key: server_env({}, leg, a) for a in arms}
    lr = runner.LegResult(leg=leg, arms=arms, env=envs, knobs={k: arm_knobs(e) for k, e in envs.items()},
                          schedule=schedule, runs=runs)
    lr.comparisons = runner.compare_leg(runs, seed=1)
    settings = runner.Settings(seed=1)
    return runner.JobResult(
        argv=["--a", "", "--b", "CWIST_BENCH_DELAY_US=200"], profile="quick", ab="custom", arms=arms,
        settings=settings, legs=[lr],
        provenance={"git_commit": "0" * 40, "git_dirty": False, "python": "3.11.7", "kernel": "6.18",
                    "cpu_model": "Test CPU", "cpus": 2, "wrk_version": "wrk 4.1.0"},
        started_at="2026-11-29T21:00:00+00:00", finished_at="2026-11-29T21:01:00+00:00")
