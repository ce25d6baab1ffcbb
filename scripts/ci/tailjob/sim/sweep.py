"""A grid sweep in virtual time (``sweep [--grid default|FILE]``): docs/en/sweep.md, "The sweep".

Each cell of the grid (:mod:`tailjob.sim.grid`: one backend, one load point, one policy) is an A/B of
the sim tier, decided by :meth:`tailjob.sim.job.LegResult.compare` (:func:`tailjob.runner.decide`),
whole run and per class.  A run is a function of (backend, arm environment, load point, seed, cost
model), so each distinct run runs once however many cells share it.  A rate like ``0.7x`` is of one
capacity per backend and load point, measured with the policy off.  Runs go to local worker processes
or, with ``--dask``, to a Dask cluster's executor: the same tasks, so the same result document.
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass, replace

from .. import stats
from ..outputs import dumps  # noqa: F401  (the result document's bytes)
from . import costs as _costs
from .grid import OFF, Cell, Grid, GridError, LoadPoint, load_grid, load_server_env, parse_grid  # noqa: F401
from .job import LegResult, SimRunResult, capacity, needs_capacity, new_executor, resolve_rate, run_one

COUNTERS = ("rounds", "dispatched", "tail_elevations", "harvested")
_FIELDS = "a b ratio ci min_effect verdict detectable pairs_needed estimator needs_samples".split()


def _run_task(backend: str, env: tuple, load: LoadPoint, seed: int, rate_rps, capacity_rps) -> SimRunResult:
    """One run (in a worker): arm ``A`` is a placeholder, the cell sets each run's arm."""
    plan = load.plan(backend, dict(env), dict(env), (seed,))
    return run_one((plan, "A", seed, rate_rps, capacity_rps))


def _executor(engine: str, processes: int | None, address: str, client) -> tuple:
    """(executor, workers, what to close after): local worker processes, or a Dask client's executor
    (a ``LocalCluster`` of single-threaded worker processes: a run swaps module globals of the bench
    code, so one run per process at a time; or the scheduler at ``address``; or ``client``)."""
    n = processes or len(os.sched_getaffinity(0))
    if engine != "dask":
        return new_executor(processes), n, []
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError:
        raise GridError(
            "--dask: dask[distributed] is not installed; accepted after "
            "pip install -e '.[sweep]' (or leave out --dask: local worker processes)"
        ) from None
    own: list = []
    if client is None:
        if address == "local":
            own.append(
                LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            )
        client = Client(own[0] if own else address)
        own.insert(0, client)  # closed first, then its cluster
    workers = len(client.scheduler_info().get("workers", {})) or 1
    return client.get_executor(pure=False), workers, own


def _map(pool, tasks: list[tuple], progress, fn=_run_task) -> list:
    futures = [pool.submit(fn, *t) for t in tasks]
    try:
        for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
            if progress:
                progress(done, len(futures))
    except BaseException:  # interrupted or a run failed: the runs not started yet are dropped
        for f in futures:
            f.cancel()
        raise
    return [f.result() for f in futures]


@dataclass
class CellResult:
    cell: Cell
    leg: LegResult

    def class_comparisons(self) -> dict[str, dict[str, stats.Comparison]]:
        """Per class (``all`` for a one-class workload: the whole run), metric key -> comparison."""
        return self.leg.class_comparisons or {"all": self.leg.comparisons}


@dataclass
class SweepResult:
    grid: Grid
    cells: list[CellResult]
    capacities: dict[tuple[str, LoadPoint], float | None]
    runs: int
    simulated_requests: int
    workers: int


def run_sweep(
    grid: Grid,
    *,
    engine: str = "local",
    processes: int | None = None,
    dask_address: str = "local",
    client=None,
    progress=None,
) -> SweepResult:
    """Run every cell of ``grid`` (each distinct run once) on local worker processes (``engine``
    ``local``) or Dask (``dask``: a LocalCluster, ``dask_address``, or ``client``)."""
    pool, workers, own = _executor(engine, processes, dask_address, client)
    done = False
    try:
        points = [(b, lp) for lp in grid.loads for b in grid.backends]
        # a rate like 0.7x is of the capacity of the policy off, the other knobs at their defaults
        cap_plans = {k: k[1].plan(k[0], OFF, OFF, grid.seeds) for k in points}
        wanted = [k for k in points if needs_capacity(cap_plans[k])]
        capacities = dict.fromkeys(points) | dict(
            zip(wanted, _map(pool, [(cap_plans[k],) for k in wanted], None, capacity))
        )
        rates = {k: resolve_rate(cap_plans[k], capacities[k]) for k in points}
        keys = list(
            dict.fromkeys(
                (c.backend, env, c.load, seed)
                for c in grid.cells()
                for env in (c.policy.a, c.policy.b)
                for seed in grid.seeds
            )
        )
        tasks = [(*k, rates[k[0], k[2]], capacities[k[0], k[2]]) for k in keys]
        by_key = dict(zip(keys, _map(pool, tasks, progress)))
        done = True
    finally:
        pool.shutdown(wait=done)
        for x in own:
            x.close()
    cells = []
    for cell in grid.cells():
        runs = {
            arm: [replace(by_key[cell.backend, env, cell.load, s], arm=arm) for s in grid.seeds]
            for arm, env in (("A", cell.policy.a), ("B", cell.policy.b))
        }
        k = (cell.backend, cell.load)
        leg = LegResult(cell.plan(grid.seeds), rates[k], capacities[k], runs)
        leg.compare()
        cells.append(CellResult(cell, leg))
    requests = sum(r.server["requests"] for r in by_key.values())
    return SweepResult(grid, cells, capacities, len(by_key), requests, workers)


# --- the result document ---------------------------------------------------------------------------


def median_counters(runs) -> dict:
    return {k: stats.median([r.server["counters"][k] for r in runs]) for k in COUNTERS}


def _comps(comparisons: dict[str, stats.Comparison]) -> dict:
    return {k: stats.summary(c, _FIELDS) for k, c in comparisons.items()}


def result_document(result: SweepResult, *, argv: list[str], provenance: dict) -> dict:
    """Everything the sweep decided, with no wall-clock time, output directory or engine: the same
    grid at the same commit gives the same bytes, on local processes or on Dask.  ``legs``: the
    cells (the key ``benchmarks/compact_result.py`` reads)."""
    from ..history import without_out

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
        "costs": {b: {**(m := _costs.for_backend(b)).as_dict(), "sources": m.sources()} for b in g.backends},
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
                "rate_rps": cr.leg.rate_rps,
                "capacity_rps": cr.leg.capacity_rps,
                "comparisons": _comps(cr.leg.comparisons),
                "classes": {n: _comps(comps) for n, comps in cr.leg.class_comparisons.items()},
                "counters": {arm: median_counters(cr.leg.runs[arm]) for arm in ("A", "B")},
            }
            for cr in result.cells
        ],
    }
