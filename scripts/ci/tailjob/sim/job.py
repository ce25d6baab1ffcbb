"""A/B in virtual time: paired seeds, the live job's verdict rule, the report.

An :class:`AbPlan` is one leg of the sim tier: a backend, the two arms'
``CWIST_*`` variables, the workload (its client classes, from
:mod:`tailjob.workloads`, or wrk's closed loop for ``uniform``), connections,
virtual seconds per run, the cost model and the seeds.  :func:`run_ab` runs,
for every seed, arm A and arm B with **that same seed** (common random numbers:
both arms see the same client schedules, so the pair's difference is the
arms'), in worker processes, and compares the arms with
:func:`tailjob.runner.decide` -- the live job's median ratio, paired
bootstrap interval (here over seeds) and verdict rule, unchanged.

Because a run is a function of its inputs, two arms that do the same work give
the same figures to the last digit: an A/A leg has ratio 1.000 and interval
1.000-1.000 on every metric (``equivalent``), and the same plan twice gives
the same result document byte for byte (:func:`result_document` holds no
wall-clock time).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import stats
from ..loadgen import ClientClass, LoadSpec
from ..metrics import LATENCY_KEYS
from ..workloads import Traffic, classes_for, parse_rate, resolve
from . import costs as _costs
from .engine import SimRun, simulate

CAPACITY_S = 0.5
"""Virtual seconds of the closed-loop run that measures capacity for a rate like ``0.7x`` (arm A)."""
DRAIN_S = 10.0
"""Virtual seconds a run waits for answers still owed after its end (as the load client)."""


@dataclass(frozen=True)
class AbPlan:
    """One leg (see the module docstring).  ``load``: ``open``/``closed``/None as ``--load``;
    ``rate`` as ``--rate`` (``2000`` or ``0.7x``); ``cost_overrides``: ``--sim-cost``."""

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
    cost_overrides: str | None = None
    bootstrap_seed: int = 1
    min_effect: float | None = None
    a_code: str | None = None
    """``--a-ref``: the ``reference/`` directory whose :mod:`tailreactor` arm A runs (None: this tree's)."""

    def backend_for(self, key: str) -> str:
        """The backend arm ``key`` runs on: its own ``CWIST_REACTOR_BACKEND``, else the leg's."""
        return (self.a_env if key == "A" else self.b_env).get("CWIST_REACTOR_BACKEND") or self.backend

    def costs_for(self, key: str) -> _costs.CostModel:
        """The cost model of arm ``key``'s backend, with ``--sim-cost`` applied."""
        return _costs.with_overrides(_costs.for_backend(self.backend_for(key)), self.cost_overrides)

    def arm_env(self, key: str) -> dict[str, str]:
        """Arm ``key``'s server environment: its variables, then the workload's (both arms, as live)."""
        env = dict(self.a_env if key == "A" else self.b_env)
        env.update(resolve(self.workload).env())
        return env

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
    spec = LoadSpec(classes=classes, duration_s=float(plan.duration_s), seed=seed, drain_s=DRAIN_S)
    spec.check()
    return spec


def capacity(plan: AbPlan) -> float:
    """Requests/s of a closed-loop run of ``plan.connections`` on arm A for :data:`CAPACITY_S`
    virtual seconds (what a relative ``--rate`` multiplies)."""
    spec = LoadSpec(
        classes=(ClientClass("all", plan.connections, "closed"),),
        duration_s=CAPACITY_S,
        seed=plan.seeds[0],
        drain_s=DRAIN_S,
    )
    doc = simulate(SimRun(plan.backend_for("A"), plan.arm_env("A"), spec, plan.costs_for("A"), plan.client))
    return doc["all"]["answered_in_window"] / CAPACITY_S


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
    code: str = ""
    """Where this run's :mod:`tailreactor` came from (a path: not in the result document)."""
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

    def as_dict(self) -> dict:
        return {
            "arm": self.arm,
            "seed": self.seed,
            "offered": self.offered,
            "metrics": self.metrics,
            "classes": {
                name: {k: v for k, v in c.items() if k != "histogram"} for name, c in self.classes.items()
            },
            "server": self.server,
        }


def _figures(arm: str, seed: int, doc: dict) -> SimRunResult:
    merged = doc["all"]
    pct = {q["p"]: q["us"] for q in merged["latency"]["percentiles"]}
    server = doc["server"]
    requests = server["requests"]
    metrics = {
        "rps": merged["answered_in_window"] / (merged["duration_us"] / 1e6),
        "cpu_us_per_req": server["busy_us"] / requests if requests else None,
        **{key: pct[p] for key, p in LATENCY_KEYS.items()},
    }
    classes = {}
    for name, c in doc["classes"].items():
        cp = {q["p"]: q for q in c["latency"]["percentiles"]}
        figs = {
            "rps": c["achieved_rps"],
            "offered_rps": c["offered_rps"],
            "answered": c["answered"],
            "saturated": c["saturated"],
            "errors": sum(c["errors"].values()),
            "loop": c["loop"],
            "connections": c["connections"],
            "histogram": c["latency"]["histogram"],
        }
        for key, p in LATENCY_KEYS.items():
            figs[key] = cp[p]["us"]
            figs[f"{key}_samples"] = cp[p]["samples"]
        classes[name] = figs
    errors = sum(merged["errors"].values())
    import tailreactor

    return SimRunResult(
        arm,
        seed,
        merged["offered"],
        metrics,
        classes,
        {**server, "errors": errors},
        code=os.path.dirname(tailreactor.__file__),
        samples={q["p"]: q["samples"] for q in merged["latency"]["percentiles"]},
        histogram=merged["latency"]["histogram"],
    )


def run_one(task) -> SimRunResult:
    """One simulated run of ``(plan, arm, seed, rate_rps, capacity_rps)`` (in a worker)."""
    plan, arm, seed, rate_rps, capacity_rps = task
    spec = load_spec(plan, seed, rate_rps, capacity_rps)
    doc = simulate(SimRun(plan.backend_for(arm), plan.arm_env(arm), spec, plan.costs_for(arm), plan.client))
    return _figures(arm, seed, doc)


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


def _rate(plan: AbPlan) -> tuple[float, bool] | None:
    """The leg's own open-loop rate, parsed (None: a traffic's classes have theirs, or no open loop)."""
    w = plan.workload
    if isinstance(w, Traffic) or plan.closed_uniform() or not resolve(w).open_classes and w != "uniform":
        return None
    rate = plan.rate or resolve(w).default_rate
    assert rate is not None  # every workload with an open-loop class has a default rate
    return parse_rate(rate)


def needs_capacity(plan: AbPlan) -> bool:
    """True when ``plan``'s rate (a traffic: a class's) is a fraction of the capacity (``0.7x``)."""
    if isinstance(plan.workload, Traffic):
        return plan.workload.relative
    rate = _rate(plan)
    return rate is not None and rate[1]


def resolve_rate(plan: AbPlan, capacity_rps: float | None) -> float | None:
    """The open-loop rate of ``plan`` in requests/s (None without an open-loop class, and for a
    traffic: each of its classes has its own, :func:`load_spec`)."""
    rate = _rate(plan)
    if rate is None or not rate[1]:
        return None if rate is None else rate[0]
    assert capacity_rps is not None  # needs_capacity(plan): the caller measured it
    return rate[0] * capacity_rps


def run_ab(plan: AbPlan, *, processes: int | None = None, executor=None, progress=None) -> LegResult:
    """Run every seed on both arms (in ``processes`` worker processes, default: the CPUs this process
    may use) and compare them.  ``progress(done, total)`` is called as runs finish.  With
    ``plan.a_code`` arm A (and the capacity run, which is arm A's) runs in workers of its own that
    import that code."""
    own = executor is None
    if own:
        executor = new_executor(processes)
    executor_a = new_executor(processes, code=plan.a_code) if plan.a_code else executor
    try:
        cap = executor_a.submit(capacity, plan).result() if needs_capacity(plan) else None
        rate_rps = resolve_rate(plan, cap)
        tasks = [(plan, arm, seed, rate_rps, cap) for seed in plan.seeds for arm in ("A", "B")]
        futures = [
            (executor_a if arm == "A" else executor).submit(run_one, t) for t in tasks for arm in [t[1]]
        ]
        done = 0
        for _ in concurrent.futures.as_completed(futures):
            done += 1
            if progress:
                progress(done, len(futures))
        results = [f.result() for f in futures]  # in task order, whatever order they finished in
    finally:
        if executor_a is not executor:
            executor_a.shutdown()
        if own:
            executor.shutdown()
    runs = {"A": [r for r in results if r.arm == "A"], "B": [r for r in results if r.arm == "B"]}
    leg = LegResult(plan, rate_rps, cap, runs)
    leg.compare()
    return leg


def new_executor(
    processes: int | None = None, *, code: str | None = None
) -> concurrent.futures.ProcessPoolExecutor:
    """Worker processes for simulated runs (spawned: no state of this process is inherited); ``code``:
    the ``reference/`` directory they import :mod:`tailreactor` from (``--a-ref``)."""
    n = processes or len(os.sched_getaffinity(0))
    ctx = multiprocessing.get_context("spawn")
    if code is None:
        return concurrent.futures.ProcessPoolExecutor(max_workers=n, mp_context=ctx)
    from ..refcode import use

    return concurrent.futures.ProcessPoolExecutor(
        max_workers=n, mp_context=ctx, initializer=use, initargs=(code,)
    )
