"""The sim tier behind the trial loop's measure interface: the live job's A/B loop in virtual time."""

from __future__ import annotations

import pytest
import tailjob_testdata  # noqa: F401  (puts scripts/ci on sys.path)

from tailjob import runner, stats
from tailjob.measure import Settings
from tailjob.plan import Arm, Leg, arms_for
from tailjob.sim.measure import SimMeasure
from tailjob.workloads import plan_load


def _job(b_env: str):
    legs = [Leg(0, "epoll", 1, 8, 1, 8)]
    settings = Settings(seed=1, load=plan_load("uniform", "open", "1000", None))
    [lr] = runner.run_job(legs, arms_for(None, a="", b=b_env), settings, ambient={}, tier=SimMeasure())
    return {c.metric.key: c for c in lr.comparisons}


def test_the_trial_loop_on_the_sim_tier_gives_a_a_ratio_one_and_calls_a_slowdown():
    aa = _job("")
    assert all(c.ratio == 1.0 for c in aa.values() if c.ratio is not None)
    assert not any(c.verdict in (stats.GAIN, stats.REGRESSION) for c in aa.values())
    slow = _job("CWIST_BENCH_DELAY_US=4")
    assert slow["p50"].verdict == stats.REGRESSION and slow["cpu_us_per_req"].verdict == stats.REGRESSION


def test_a_leg_in_worker_processes_gives_the_records_of_the_runs_one_by_one_and_trial_t_has_seed_s_plus_t():
    # What ab --tier sim relies on: the runs are a function of their plans, so mapping them over
    # workers changes nothing but the time; trial t of a job seeded s runs with seed s + t.
    legs = [Leg(0, "epoll", 1, 8, 1, 3)]
    settings = Settings(seed=5, warmup=False, load=plan_load("uniform", "open", "1000", None))
    arms = arms_for(None, a="", b="CWIST_BENCH_DELAY_US=4")
    [serial] = runner.run_job(legs, arms, settings, ambient={}, tier=SimMeasure())
    with SimMeasure(processes=2) as measure:
        [mapped] = runner.run_job(legs, arms, settings, ambient={}, tier=measure)
    assert [r.as_dict() for r in mapped.runs] == [r.as_dict() for r in serial.runs]
    assert sorted({(r.trial, r.wrk["seed"]) for r in mapped.runs}) == [(0, 5), (1, 6), (2, 7)]


def test_a_sweep_cell_is_the_a_b_of_the_sim_tier_with_its_arms_load_and_seeds():
    # The sweep plans its cells' runs for SimMeasure and decides them as the trial loop does: a cell
    # gives the verdicts `ab --tier sim` gives for its arms, its load point and its seeds.
    from tailjob.sim.grid import parse_grid
    from tailjob.sim.sweep import run_sweep

    grid = parse_grid(
        'name = "one"\nbackends = ["epoll"]\nseeds = 3\nfirst_seed = 4\nconnections = 16\n\n'
        '[[load]]\nworkload = "mixed"\nrate = "200"\nduration = 1\n\n'
        "[[policy]]\nCWIST_REACTOR_TAIL_US = [500]\n",
        where="one",
    )
    [cell] = run_sweep(grid, processes=2).cells
    arms = (Arm("A", "A", dict(cell.cell.policy.a)), Arm("B", "B", dict(cell.cell.policy.b)))
    settings = Settings(seed=4, warmup=False, load=plan_load("mixed", None, "200", None))
    with SimMeasure(processes=2) as measure:
        [lr] = runner.run_job([Leg(0, "epoll", 1, 16, 1, 3)], arms, settings, ambient={}, tier=measure)
    assert cell.leg.comparisons == lr.comparisons and cell.leg.class_comparisons == lr.class_comparisons
    assert {c.metric.key for c in lr.comparisons} >= {"p50", "p99", "cpu_us_per_req"}


class _Failing:
    """A tier that measures by ``tier`` and fails its run number ``fail_at`` (0-based) with ``error``;
    ``at_once``: by ``map``, its runs ending in reverse order."""

    def __init__(self, tier, fail_at: int, error: BaseException, at_once: bool = False):
        self.tier, self.fail_at, self.error, self.calls = tier, fail_at, error, 0
        if at_once:
            self.map = self._map

    def run(self, plan):
        if self.calls == self.fail_at:
            raise self.error
        self.calls += 1
        return self.tier.run(plan)

    def _map(self, plans, done):
        records = [self.run(p) for p in plans[: self.fail_at - self.calls]]
        for i in reversed(range(len(records))):
            done(i, records[i])
        raise self.error


def test_a_job_stopped_mid_leg_keeps_its_finished_runs_in_the_callers_list():
    # What a failed or interrupted A/B writes (marked partial): the legs before the stop as they
    # were, the leg it stopped in decided on the runs that finished, the legs after it absent.
    from tailjob.measure import JobError

    legs = [Leg(0, "epoll", 1, 8, 1, 8), Leg(1, "epoll", 1, 16, 1, 8), Leg(2, "epoll", 1, 32, 1, 8)]
    arms = arms_for(None, a="", b="CWIST_BENCH_DELAY_US=4")
    settings = Settings(seed=1, warmup=False, load=plan_load("uniform", "open", "1000", None))
    kept: list = []
    tier = _Failing(SimMeasure(), 16 + 5, JobError("the server died"))
    with pytest.raises(JobError):
        runner.run_trials(legs, runner.ABDesign(arms, settings, {}, tier), settings, into=kept)
    whole, cut = kept  # the third leg was not reached
    assert len(whole.runs) == 16 and whole.comparisons[0].n_pairs == 8
    assert whole.comparisons[0].verdict != stats.NO_VERDICT
    pairs = sum(len({r.arm for r in cut.runs if r.trial == t}) == 2 for t in range(8))
    assert len(cut.runs) == 5 and {c.n_pairs for c in cut.comparisons} == {pairs}
    assert {c.verdict for c in cut.comparisons} == {stats.NO_VERDICT}  # fewer than 8 pairs


def test_a_tier_interrupted_in_its_map_keeps_the_runs_that_ended_in_the_order_of_the_plans():
    legs = [Leg(0, "epoll", 1, 8, 1, 3)]
    arms = arms_for(None, a="", b="CWIST_BENCH_DELAY_US=4")
    settings = Settings(seed=1, warmup=False, load=plan_load("uniform", "open", "1000", None))
    kept: list = []
    tier = _Failing(SimMeasure(), 4, KeyboardInterrupt(), at_once=True)
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(legs, runner.ABDesign(arms, settings, {}, tier), settings, into=kept)
    [lr] = kept
    order = [(t, key) for t, keys in enumerate(lr.schedule) for key in keys][:4]
    assert [(r.trial, r.arm) for r in lr.runs] == order and lr.comparisons[0].n_pairs == 2
