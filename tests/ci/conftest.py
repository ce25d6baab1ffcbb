"""Fixtures of the tail-latency job's tests (helpers: :mod:`tailjob_testdata`)."""

from __future__ import annotations

import pytest
from tailjob_testdata import record


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
    runs = [record(0, -1, 0, "A", warmup=True)]
    for t, order in enumerate(schedule):
        for pos, key in enumerate(order):
            flags = ("polluted",) if (t, key) == (2, "A") else ()
            errors = (
                {"connect": 0, "read": 3, "write": 0, "status": 0, "timeout": 1}
                if (t, key) == (7, "B")
                else None
            )
            if errors:
                flags = ("socket-errors",)
            runs.append(record(0, t, pos, key, scale=2.0 if key == "B" else 1.0, flags=flags, errors=errors))
    envs = {a.key: server_env({}, leg, a) for a in arms}
    lr = runner.LegResult(
        leg=leg,
        arms=arms,
        env=envs,
        knobs={k: arm_knobs(e) for k, e in envs.items()},
        schedule=schedule,
        runs=runs,
    )
    lr.comparisons = runner.compare_leg(runs, seed=1)
    settings = runner.Settings(seed=1)
    return runner.JobResult(
        argv=["--a", "", "--b", "CWIST_BENCH_DELAY_US=200"],
        profile="quick",
        ab="custom",
        arms=arms,
        settings=settings,
        legs=[lr],
        provenance={
            "git_commit": "0" * 40,
            "git_dirty": False,
            "python": "3.11.7",
            "kernel": "6.18",
            "cpu_model": "Test CPU",
            "cpus": 2,
            "wrk_version": "wrk 4.1.0",
        },
        started_at="2026-11-29T21:00:00+00:00",
        finished_at="2026-11-29T21:01:00+00:00",
    )
