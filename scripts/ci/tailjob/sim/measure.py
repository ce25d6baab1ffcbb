"""The virtual-time tier behind the trial loop's measure interface (:class:`tailjob.measure.Measure`).

:class:`SimMeasure` answers one :class:`~tailjob.measure.RunPlan` with one
simulated run (:func:`tailjob.sim.engine.simulate`), so every design of
:mod:`tailjob.runner` (the A/B, the calibration) can run in virtual time.  Each
trial gets a seed of its own and both arms of a trial share it (common random
numbers): the spread over trials is the seeds', as in :mod:`tailjob.sim.job`.
``--tier sim`` itself uses :func:`tailjob.sim.job.run_ab`, which runs the
seeds in parallel worker processes; this class runs in the loop's process.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..loadgen import ClientClass, LoadSpec
from . import costs as _costs
from .engine import SimRun, simulate
from .job import DRAIN_S


def trial_seed(base: int, trial: int) -> int:
    """The seed of ``trial`` (-1: the warm-up) of a job seeded ``base``: distinct per trial."""
    return base * 1000 + trial + 1


@dataclass(frozen=True)
class SimMeasure:
    """A tier (``name``, ``run(plan)``): ``cost_overrides`` as ``--sim-cost``."""

    cost_overrides: str | None = None
    name: str = "sim"

    def run(self, plan):
        from ..measure import RunRecord
        from ..metrics import run_metrics
        from ..workloads import LoadRunResult

        backend = plan.backend or plan.env.get("CWIST_REACTOR_BACKEND") or "epoll"
        seed = trial_seed(plan.settings.seed, plan.trial)
        if plan.load is not None:
            spec = replace(plan.load, seed=seed)
        else:  # the leg's closed loop, as wrk: one request per connection, no think
            spec = LoadSpec(
                classes=(ClientClass("all", plan.leg.connections, "closed"),),
                duration_s=float(plan.leg.duration_s),
                seed=seed,
                drain_s=DRAIN_S,
            )
        model = _costs.with_overrides(_costs.for_backend(backend), self.cost_overrides)
        client = "loadgen" if plan.load is not None else "wrk"
        doc = simulate(SimRun(backend, dict(plan.env), spec, model, client))
        result = LoadRunResult(doc)
        busy_s = doc["server"]["busy_us"] / 1e6
        flags = [
            flag
            for flag, raised in (("socket-errors", result.socket_errors), ("saturated", result.saturated))
            if raised
        ]
        return RunRecord(
            leg=plan.leg.index,
            trial=plan.trial,
            position=plan.position,
            arm=plan.arm,
            warmup=plan.warmup,
            backend=backend,
            wrk=result.as_dict(),
            server_cpu_s=busy_s,
            metrics=run_metrics(result, server_cpu_s=busy_s),
            flags=flags,
            classes=result.class_metrics(),
        )
