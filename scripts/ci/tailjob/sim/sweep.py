"""A grid sweep in virtual time (``sweep [--grid default|FILE]``): docs/en/sweep.md, "The sweep".

Each cell of the grid (:mod:`tailjob.sim.grid`: one backend, one load point, one policy) is an A/B of
the sim tier: its runs are :class:`~tailjob.measure.RunPlan` s run by
:class:`tailjob.sim.measure.SimMeasure`, its verdicts :func:`tailjob.runner.decide`'s, whole run and
per class.  A run is a function of (backend, arm environment, load point, seed, cost model), so each
distinct run runs once however many cells share it.  A rate like ``0.7x`` is of one capacity per
backend and load point, measured with the policy off.  Runs go to local worker processes or, with
``--dask``, to a Dask cluster's executor: the same runs, so the same result document.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
from dataclasses import dataclass, replace

from tailreactor.extras import install_command

from .. import stats
from ..history import without_out
from ..measure import RunPlan, Settings
from ..plan import Arm, Leg, Unavailable
from ..runner import LegResult, decide
from . import costs as _costs
from .grid import OFF, Cell, Grid, LoadPoint, load_server_env
from .measure import SimMeasure, median_counters

_FIELDS = "a b ratio ci min_effect verdict detectable pairs_needed estimator needs_samples".split()


@contextlib.contextmanager
def _ctrl_c_is_ours():
    """Processes started inside ignore SIGINT (Python keeps an ignored SIGINT it inherits): a
    terminal's Ctrl-C reaches the whole process group, and this process stops the cluster's workers
    itself rather than each printing its traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _executor(engine: str, processes: int | None, address: str, client) -> tuple:
    """(a Dask client's executor or None: local worker processes, workers, what to close after): a
    ``LocalCluster`` of single-threaded worker processes (a run swaps module globals of the bench
    code, so one run per process at a time), or the scheduler at ``address``, or ``client``."""
    n = processes or len(os.sched_getaffinity(0))
    if engine != "dask":
        return None, n, []
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError:  # the environment (exit 3), not the grid: the sweep extra is missing
        raise Unavailable(
            f"--dask: dask[distributed] is not installed; {install_command('sweep')} "
            "(or leave out --dask: local worker processes)"
        ) from None
    own: list = []
    if client is None:
        if address == "local":
            with _ctrl_c_is_ours():
                own.append(
                    # Its logs are Dask's own, not ours to print: a cancelled task on Ctrl-C, a heartbeat
                    # that finds the scheduler gone as it stops (ERROR, with a traceback).  A failed run
                    # comes back as its future's exception.
                    LocalCluster(
                        n_workers=n,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=logging.CRITICAL,
                    )
                )
        client = Client(own[0] if own else address)
        own.insert(0, client)  # closed first, then its cluster
    workers = len(client.scheduler_info().get("workers", {})) or 1
    return client.get_executor(pure=False), workers, own


@dataclass
class CellResult:
    """A cell and its leg (:class:`tailjob.runner.LegResult`: its runs, verdicts and capacity);
    ``rate_rps``: its open-loop rate."""

    cell: Cell
    leg: LegResult
    rate_rps: float | None

    @property
    def comparisons(self) -> dict[str, stats.Comparison]:
        return {c.metric.key: c for c in self.leg.comparisons}

    def class_comparisons(self) -> dict[str, dict[str, stats.Comparison]]:
        """Per class (``all`` for a one-class workload: the whole run), metric key -> comparison."""
        classes = self.leg.class_comparisons or {"all": self.leg.comparisons}
        return {n: {c.metric.key: c for c in cs} for n, cs in classes.items()}


@dataclass
class SweepResult:
    grid: Grid
    cells: list[CellResult]
    capacities: dict[tuple[str, LoadPoint], float | None]
    runs: int
    simulated_requests: int
    workers: int
    sim_cost: str | None  # --sim-cost: applied to every cell's cost model
    costs: dict[str, _costs.CostModel]  # per backend, with sim_cost applied


def run_sweep(
    grid: Grid,
    *,
    engine: str = "local",
    processes: int | None = None,
    dask_address: str = "local",
    client=None,
    progress=None,
    sim_cost: str | None = None,
) -> SweepResult:
    """Run every cell of ``grid`` (each distinct run once) on local worker processes (``engine``
    ``local``) or Dask (``dask``: a LocalCluster, ``dask_address``, or ``client``), every cost model
    with ``sim_cost`` (``--sim-cost``) applied: :class:`~tailjob.sim.costs.CostError` before any run."""
    costs = {b: SimMeasure(sim_cost).costs_for(b) for b in grid.backends}
    pool, workers, own = _executor(engine, processes, dask_address, client)
    done = False
    try:
        with SimMeasure(sim_cost, processes=None if pool else workers, pool=pool) as measure:
            capacities, by_key = _run(grid, measure, progress)
        done = True
    finally:
        if pool is not None:
            pool.shutdown(wait=done)
        for x in own:
            x.close()
    cells = [_decided(grid, cell, capacities[cell.backend, cell.load], by_key) for cell in grid.cells()]
    requests = sum(r.wrk["server"]["requests"] for r in by_key.values())
    rps = {k: c and c["rps"] for k, c in capacities.items()}
    return SweepResult(grid, cells, rps, len(by_key), requests, workers, sim_cost, costs)


def _leg(grid: Grid, backend: str, lp: LoadPoint) -> Leg:
    # a load point's virtual seconds may be a fraction, a Leg's are wrk's whole seconds
    return Leg(0, backend, 1, lp.connections, lp.duration_s, len(grid.seeds))  # type: ignore[arg-type]


def _run(grid: Grid, measure: SimMeasure, progress) -> tuple[dict, dict]:
    """(per backend and load point the capacity run's figures or None, per distinct run its record)."""
    settings = Settings(seed=grid.seeds[0], warmup=False)

    def plan(b: str, env, lp: LoadPoint, trial: int, spec=None) -> RunPlan:
        env = {**dict(env), **load_server_env(lp)}
        return RunPlan(leg=_leg(grid, b, lp), arm="A", env=env, settings=settings, trial=trial, load=spec)

    # a rate like 0.7x is of the capacity of the policy off, the other knobs at their defaults
    points = [(b, lp) for lp in grid.loads for b in grid.backends]
    relative = [k for k in points if k[1].load_plan is not None and k[1].load_plan.relative]
    measured = measure.capacities([plan(b, OFF, lp, 0) for b, lp in relative])
    capacities = dict.fromkeys(points) | dict(zip(relative, measured))
    specs = {
        (b, lp): lp.load_plan.spec(_leg(grid, b, lp), capacity_rps=c and c["rps"], seed=settings.seed)
        if lp.load_plan is not None
        else None
        for (b, lp), c in capacities.items()
    }
    keys = list(
        dict.fromkeys(
            (c.backend, env, c.load, trial)
            for c in grid.cells()
            for env in (c.policy.a, c.policy.b)
            for trial in range(len(grid.seeds))
        )
    )
    plans = [plan(b, env, lp, trial, specs[b, lp]) for b, env, lp, trial in keys]
    count = itertools.count(1)
    show = None if progress is None else lambda i, r: progress(next(count), len(plans))
    return capacities, dict(zip(keys, measure.map(plans, show)))


def _decided(grid: Grid, cell: Cell, capacity: dict | None, by_key: dict) -> CellResult:
    """A cell's leg: each arm's runs by seed, the live job's verdicts (whole run, and per class of a
    workload of several: one class is the whole run, its table would repeat the leg's)."""
    runs = [
        replace(by_key[cell.backend, env, cell.load, trial], arm=arm)
        for arm, env in (("A", cell.policy.a), ("B", cell.policy.b))
        for trial in range(len(grid.seeds))
    ]
    arms = (Arm("A", "A", dict(cell.policy.a)), Arm("B", cell.policy.label, dict(cell.policy.b)))
    env = {a.key: dict(a.env) for a in arms}
    lr = LegResult(_leg(grid, cell.backend, cell.load), arms, env, {}, [], runs, capacity=capacity)
    names = list(runs[0].classes or {})
    lr.comparisons, lr.class_comparisons = decide(
        runs, names if len(names) > 1 else (), seed=grid.seeds[0], min_effect=None
    )
    load = cell.load.load_plan
    return CellResult(cell, lr, load.resolve_rate(capacity["rps"] if capacity else None) if load else None)


# --- the result document ---------------------------------------------------------------------------


def _comps(comparisons: list[stats.Comparison]) -> dict:
    return {c.metric.key: stats.summary(c, _FIELDS) for c in comparisons}


def result_document(result: SweepResult, *, argv: list[str], provenance: dict) -> dict:
    """Everything the sweep decided, with no wall-clock time, output directory or engine: the same
    grid at the same commit gives the same bytes, on local processes or on Dask.  ``legs``: the
    cells (the key ``benchmarks/compact_result.py`` reads)."""
    g = result.grid
    return {
        "schema": 1,
        "tier": "sim",
        "kind": "sweep",
        "virtual_time": True,
        "argv": [a for a in without_out(argv) if a != "--dask" and not a.startswith("--dask=")],
        "grid": {
            "name": g.name,
            "backends": list(g.backends),
            "seeds": list(g.seeds),
            "loads": [lp.as_dict() for lp in g.loads],
            "policies": [p.as_dict() for p in g.policies],
            "toml": g.source,
        },
        "provenance": provenance,
        "sim_cost": result.sim_cost,
        "costs": {b: {**(m := result.costs[b]).as_dict(), "sources": m.sources()} for b in g.backends},
        "runs": result.runs,
        "simulated_requests": result.simulated_requests,
        "capacities": [
            {"backend": b, "load": lp.label, "rps": v} for (b, lp), v in result.capacities.items()
        ],
        "legs": [
            {
                "backend": cr.cell.backend,
                "load": cr.cell.load.as_dict(),
                "policy": cr.cell.policy.as_dict(),
                "rate_rps": cr.rate_rps,
                "capacity_rps": (cr.leg.capacity or {}).get("rps"),
                "comparisons": _comps(cr.leg.comparisons),
                "classes": {n: _comps(comps) for n, comps in cr.leg.class_comparisons.items()},
                "counters": {arm: median_counters(cr.leg.measured(arm)) for arm in ("A", "B")},
            }
            for cr in result.cells
        ],
    }
