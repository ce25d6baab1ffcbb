"""The virtual-time tier: :class:`SimMeasure`, the measure (``run(plan) -> record``) of ``ab --tier sim``.

The sim A/B is the live job's trial loop (:func:`tailjob.runner.run_trials`, :class:`tailjob.runner.ABDesign`,
:func:`tailjob.runner.decide`) with this measure: one :class:`~tailjob.measure.RunPlan` becomes one
simulated run (:func:`tailjob.sim.engine.simulate`).  Trial ``t`` of a job seeded ``s`` runs with seed
``s + t``, the same for both arms (common random numbers: the same client schedules, so the pair's
difference is the arms').  A run is a function of its inputs, so the runs of a leg are independent:
:meth:`SimMeasure.map` runs them in worker processes, and two arms doing the same work give the same
figures to the last digit.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from .. import stats
from ..loadspec import ClientClass, LoadSpec
from ..measure import RunPlan, RunRecord
from ..metrics import LATENCY_KEYS
from . import costs as _costs
from .engine import SimRun, simulate

CAPACITY_S = 0.5
"""Virtual seconds of the closed-loop run that measures capacity for a rate like ``0.7x`` (arm A)."""
COUNTERS = ("rounds", "dispatched", "tail_elevations", "harvested")
"""The reactor's counters a report shows: rounds, callbacks, elevated by age, harvested."""


def figures(doc: dict) -> tuple[dict, dict]:
    """A simulated run's ``metrics`` (by :data:`tailjob.metrics.METRICS` key; CPU per request the
    server served) and ``classes`` (per class the compared figures, their samples and histogram)."""
    merged, server = doc["all"], doc["server"]
    pct = {q["p"]: q["us"] for q in merged["latency"]["percentiles"]}
    metrics = {
        "rps": merged["answered_in_window"] / (merged["duration_us"] / 1e6),
        "cpu_us_per_req": server["busy_us"] / server["requests"] if server["requests"] else None,
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
            figs[key], figs[f"{key}_samples"] = cp[p]["us"], cp[p]["samples"]
        classes[name] = figs
    return metrics, classes


def record_fields(run: SimRun) -> dict:
    """Simulate ``run`` (in a worker, or here): the fields of its :class:`~tailjob.measure.RunRecord`.
    ``wrk`` is the simulation's own record: ``seed``, ``offered``, ``server`` (requests, virtual busy
    time, the reactor's counters, client errors), the whole run's percentiles (with their samples)
    and histogram."""
    import tailreactor

    doc = simulate(run)
    merged = doc["all"]
    metrics, classes = figures(doc)
    errors = sum(merged["errors"].values())
    saturated = any(c["saturated"] for c in classes.values())
    return dict(
        backend=run.backend,
        wrk={
            "seed": run.spec.seed,
            "offered": merged["offered"],
            "server": {**doc["server"], "errors": errors},
            "percentiles": merged["latency"]["percentiles"],
            "histogram": merged["latency"]["histogram"],
        },
        server_cpu_s=doc["server"]["busy_us"] / 1e6,
        metrics=metrics,
        flags=[f for f, raised in (("socket-errors", errors), ("saturated", saturated)) if raised],
        classes=classes,
        code=os.path.dirname(tailreactor.__file__),
    )


def median_counters(records: Sequence[RunRecord]) -> dict:
    """The median over ``records`` of each of the reactor's :data:`COUNTERS`."""
    return {k: stats.median([r.wrk["server"]["counters"][k] for r in records]) for k in COUNTERS}


def capacity_rps(run: SimRun) -> float:
    """Requests/s answered in a capacity run (:meth:`SimMeasure.capacities`; in a worker, or here)."""
    return simulate(run)["all"]["answered_in_window"] / run.spec.duration_s


class SimMeasure:
    """The sim tier (``name``, ``run(plan)``, ``map(plans)``, ``capacity(plan)``); a context manager
    that shuts its worker processes down.  ``cost_overrides``: ``--sim-cost``; ``code``: per arm key,
    the ``reference/`` directory that arm's runs import :mod:`tailreactor` from (``--a-ref``: arm A's);
    ``processes``: worker processes for the runs (None: each run in this process, but an arm with
    ``code`` always runs in workers of its own); ``pool``: an executor of its owner's to run the
    other runs in instead (the sweep's on Dask), left open."""

    name = "sim"

    def __init__(
        self,
        cost_overrides: str | None = None,
        *,
        code: Mapping[str, str] | None = None,
        processes: int | None = None,
        pool: concurrent.futures.Executor | None = None,
    ):
        self.cost_overrides, self.code = cost_overrides, dict(code or {})
        self.processes, self.pool = processes, pool
        self._pools: dict[str | None, concurrent.futures.ProcessPoolExecutor] = {}

    def costs_for(self, backend: str) -> _costs.CostModel:
        """The cost model of ``backend`` with ``--sim-cost`` applied."""
        return _costs.with_overrides(_costs.for_backend(backend), self.cost_overrides)

    def task(self, plan: RunPlan) -> SimRun:
        """The simulated run of ``plan``: its arm's backend and environment, the leg's load (the
        closed loop of wrk without one), the trial's seed, the backend's cost model."""
        backend = (
            plan.leg.backend_for(plan.arm) or plan.backend or plan.env.get("CWIST_REACTOR_BACKEND") or "epoll"
        )
        seed = plan.settings.seed + plan.trial
        if plan.load is not None:
            spec = replace(plan.load, seed=seed)
        else:  # the leg's closed loop, as wrk: one request per connection, no think
            closed = (ClientClass("all", plan.leg.connections, "closed"),)
            spec = LoadSpec(classes=closed, duration_s=float(plan.leg.duration_s), seed=seed)
        client = "loadgen" if plan.load is not None else "wrk"
        return SimRun(
            backend, {**plan.env, "CWIST_REACTOR_BACKEND": backend}, spec, self.costs_for(backend), client
        )

    def run(self, plan: RunPlan) -> RunRecord:
        return self.map([plan])[0]

    def map(
        self, plans: Sequence[RunPlan], done: Callable[[int, RunRecord], None] | None = None
    ) -> list[RunRecord]:
        """Every run of ``plans`` (in worker processes where :attr:`processes`, :attr:`pool` or an
        arm's code says so), their records in the order of ``plans``; ``done(index, record)`` as
        each finishes."""
        out: list = [None] * len(plans)
        futures = {self._submit(p.arm, record_fields, self.task(p)): i for i, p in enumerate(plans)}
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            out[i] = RunRecord.of(plans[i], **future.result())
            if done:
                done(i, out[i])
        return out

    def capacity(self, plan: RunPlan) -> dict:
        return self.capacities([plan])[0]

    def capacities(self, plans: Sequence[RunPlan]) -> list[dict]:
        """The capacity of each plan's arm, what a relative rate (``0.7x``) multiplies: a closed loop
        of the leg's connections (the load client's) for :data:`CAPACITY_S` virtual seconds, seeded
        as trial 0, run as :meth:`map`'s."""
        futures = []
        for plan in plans:
            closed = (ClientClass("all", plan.leg.connections, "closed"),)
            spec = LoadSpec(classes=closed, duration_s=CAPACITY_S, seed=plan.settings.seed)
            run = replace(self.task(plan), spec=spec, client="loadgen")
            futures.append(self._submit(plan.arm, capacity_rps, run))
        return [{"rps": f.result(), "virtual_s": CAPACITY_S} for f in futures]

    def _submit(self, arm: str, fn: Callable, run: SimRun) -> concurrent.futures.Future:
        """``fn(run)`` in arm ``arm``'s worker processes, or here (its future already done)."""
        pool = self._pool(arm)
        if pool is not None:
            return pool.submit(fn, run)
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(fn(run))
        return future

    def _pool(self, arm: str) -> concurrent.futures.Executor | None:
        """Arm ``arm``'s worker processes: spawned (no state of this process is inherited), ignoring
        Ctrl-C (the parent's to handle: :meth:`close`); with the arm's ``code``, importing
        :mod:`tailreactor` from there (:func:`tailjob.refcode.use` does both)."""
        code = self.code.get(arm)
        if code is None and self.pool is not None:
            return self.pool
        if code not in self._pools and (code is not None or self.processes):
            from ..refcode import use

            init: Callable[..., object] = signal.signal if code is None else use
            args: tuple = (signal.SIGINT, signal.SIG_IGN) if code is None else (code,)
            self._pools[code] = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.processes or len(os.sched_getaffinity(0)),
                mp_context=multiprocessing.get_context("spawn"),
                initializer=init,
                initargs=args,
            )
        return self._pools.get(code)

    def close(self, *, cancel: bool = False) -> None:
        """Shut the worker processes down; ``cancel`` (the job was interrupted or failed): kill them
        first, so neither their running simulations nor the interpreter's exit wait for them."""
        for pool in self._pools.values():
            if cancel:
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.kill()
            pool.shutdown(wait=not cancel, cancel_futures=cancel)
        self._pools.clear()

    def __enter__(self) -> SimMeasure:
        return self

    def __exit__(self, kind, *_) -> None:
        self.close(cancel=kind is not None)
