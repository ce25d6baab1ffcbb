"""The sweep's runs in virtual time (:mod:`tailjob.sim.sweep`): an :class:`AbPlan` per cell, its runs keyed
by seed, a :class:`LegResult` decided by :func:`tailjob.runner.decide`.

``ab --tier sim`` runs through the live job's trial loop with :class:`tailjob.sim.measure.SimMeasure`;
this module keeps the plan and run shapes the sweep and its grid (:mod:`tailjob.sim.grid`) are built
on, made of that measure's parts (:func:`~tailjob.sim.measure.record`,
:func:`~tailjob.sim.measure.new_executor`, :func:`~tailjob.sim.measure.capacity_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import stats
from ..loadgen import ClientClass, LoadSpec
from ..workloads import LoadPlan, Traffic, classes_for, resolve
from . import costs as _costs
from .engine import SimRun
from .measure import capacity_rps, capacity_run, new_executor, record  # noqa: F401  (the sweep's executor)


@dataclass(frozen=True)
class AbPlan:
    """One cell of the sweep.  ``load``: ``open``/``closed``/None as ``--load``; ``rate`` as ``--rate``
    (``2000`` or ``0.7x``)."""

    backend: str
    a_env: Mapping[str, str]
    b_env: Mapping[str, str]
    seeds: tuple[int, ...]
    workload: str | Traffic = "uniform"
    load: str | None = None
    rate: str | None = None
    connections: int = 64
    duration_s: float = 2.0
    schedule: str = "poisson"
    bootstrap_seed: int = 1
    min_effect: float | None = None

    def backend_for(self, key: str) -> str:
        """The backend arm ``key`` runs on: its own ``CWIST_REACTOR_BACKEND``, else the leg's."""
        return (self.a_env if key == "A" else self.b_env).get("CWIST_REACTOR_BACKEND") or self.backend

    def costs_for(self, key: str) -> _costs.CostModel:
        """The cost model of arm ``key``'s backend."""
        return _costs.for_backend(self.backend_for(key))

    def arm_env(self, key: str) -> dict[str, str]:
        """Arm ``key``'s server environment: its variables, then the workload's (both arms, as live)."""
        env = dict(self.a_env if key == "A" else self.b_env)
        env.update(resolve(self.workload).env())
        return env

    def load_plan(self) -> LoadPlan | None:
        """The cell's load as the live job plans it (None: wrk's closed loop), its rate the
        workload's default where it has an open-loop class and none was given."""
        if self.closed_uniform():
            return None
        w = resolve(self.workload)
        own = not isinstance(w, Traffic) and (w.open_classes or self.workload == "uniform")
        return LoadPlan(self.workload, (self.rate or w.default_rate) if own else None, self.schedule)

    def closed_uniform(self) -> bool:
        return self.workload == "uniform" and self.load in (None, "closed")

    @property
    def client(self) -> str:
        """Whose closed loop the leg's clients are, as live: wrk's for closed-loop ``uniform``."""
        return "wrk" if self.closed_uniform() else "loadgen"


def load_spec(plan: AbPlan, seed: int, rate_rps: float | None, capacity_rps: float | None = None) -> LoadSpec:
    """The client classes of ``plan`` for one seed: wrk's closed loop (depth 1, no think) for
    closed-loop ``uniform``, a traffic's classes (its relative rates of ``capacity_rps``), the
    workload's classes otherwise."""
    classes: tuple[ClientClass, ...]
    if isinstance(plan.workload, Traffic):
        classes = plan.workload.client_classes(capacity_rps)
    elif plan.closed_uniform():
        classes = (ClientClass("all", plan.connections, "closed"),)
    else:
        classes = classes_for(
            plan.workload, connections=plan.connections, rate_rps=rate_rps, schedule=plan.schedule
        )
    spec = LoadSpec(classes=classes, duration_s=float(plan.duration_s), seed=seed)
    spec.check()
    return spec


def capacity(plan: AbPlan) -> float:
    """Requests/s of arm A's capacity run (:func:`tailjob.sim.measure.capacity_run`)."""
    a = plan.backend_for("A"), plan.arm_env("A"), plan.costs_for("A")
    return capacity_rps(capacity_run(*a, plan.connections, plan.seeds[0]))


@dataclass(frozen=True)
class SimRunResult:
    """The figures of one simulated run: ``metrics`` by :data:`tailjob.stats.METRICS` key,
    ``classes`` by class then :data:`tailjob.metrics.CLASS_METRICS` key (with their samples)."""

    arm: str
    seed: int
    offered: int
    metrics: dict
    classes: dict
    server: dict
    samples: dict = field(default_factory=dict)
    """Samples at or beyond each whole-run percentile's rank (what bounds it: :func:`tailjob.runner.compare_leg`)."""
    histogram: str | None = None
    """The whole run's latency histogram (HdrHistogram, encoded): the extreme percentiles are compared on
    each arm's histograms merged over the seeds, as the live job merges its runs' (:mod:`tailjob.pooled`).
    The class figures carry theirs as ``histogram``.  Neither is in the result document."""

    # What the trial loop's comparison reads of a run record (:class:`tailjob.measure.RunRecord`):
    # the pair is the seed, and no sim run is a warm-up.
    warmup = False

    @property
    def trial(self) -> int:
        return self.seed

    @property
    def wrk(self) -> dict:
        return {
            "percentiles": [{"p": p, "samples": n} for p, n in self.samples.items()],
            "histogram": self.histogram,
        }


def run_one(task) -> SimRunResult:
    """One simulated run of ``(plan, arm, seed, rate_rps, capacity_rps)`` (in a worker): its
    :func:`tailjob.sim.measure.record`, in the sweep's shape."""
    plan, arm, seed, rate_rps, capacity_rps = task
    spec = load_spec(plan, seed, rate_rps, capacity_rps)
    run = SimRun(plan.backend_for(arm), plan.arm_env(arm), spec, plan.costs_for(arm), plan.client)
    r = record(run, dict(leg=0, trial=seed, position=0, arm=arm, warmup=False))
    w, samples = r.wrk, {q["p"]: q["samples"] for q in r.wrk["percentiles"]}
    return SimRunResult(
        arm,
        seed,
        w["offered"],
        r.metrics,
        r.classes or {},
        w["server"],
        samples,
        w["histogram"],
    )


@dataclass
class LegResult:
    """One leg's runs (by arm, in seed order) and comparisons (whole run, and per class)."""

    plan: AbPlan
    rate_rps: float | None
    capacity_rps: float | None
    runs: dict[str, list[SimRunResult]]
    comparisons: dict[str, stats.Comparison] = field(default_factory=dict)
    class_comparisons: dict[str, dict[str, stats.Comparison]] = field(default_factory=dict)

    def compare(self) -> None:
        """The live job's verdicts (:func:`tailjob.runner.decide`: the metric table, the verdict rule,
        ``n/a`` for a percentile its runs cannot bound), pairs by seed."""
        from ..runner import decide

        names = list(self.runs["A"][0].classes) if self.runs["A"] else []
        whole, classes = decide(
            [*self.runs["A"], *self.runs["B"]],
            names if len(names) > 1 else (),  # one class is the whole run: its table would repeat the leg's
            seed=self.plan.bootstrap_seed,
            min_effect=self.plan.min_effect,
        )
        self.comparisons = {c.metric.key: c for c in whole}
        self.class_comparisons = {n: {c.metric.key: c for c in cs} for n, cs in classes.items()}


def needs_capacity(plan: AbPlan) -> bool:
    """True when ``plan``'s rate (a traffic: a class's) is a fraction of the capacity (``0.7x``)."""
    load = plan.load_plan()
    return load is not None and load.relative


def resolve_rate(plan: AbPlan, capacity_rps: float | None) -> float | None:
    """The open-loop rate of ``plan`` in requests/s (None without an open-loop class, and for a
    traffic: each of its classes has its own, :func:`load_spec`)."""
    load = plan.load_plan()
    return None if load is None else load.resolve_rate(capacity_rps)
