"""A grid sweep in virtual time (``sweep [--grid default|FILE]``): docs/en/sweep.md,
"The sweep".

Each cell of the grid (:mod:`tailjob.sim.grid`: one backend, one load point, one policy) is an A/B of
the sim tier, decided with the live job's rule (:func:`tailjob.runner.compare_leg`), whole run and per
class.  A run is a function of (backend, arm environment, load point, seed, cost model), so runs are
keyed by those and run once however many cells share them.  A rate like ``0.7x`` is of one capacity
per backend and load point, measured with the policy off.  Runs go to local worker processes or, with
``--dask``, to a Dask cluster: the same tasks, so the same result document byte for byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from .. import stats
from ..outputs import dumps  # noqa: F401  (the result document's bytes)
from . import costs as _costs
from .grid import OFF, Cell, Grid, GridError, LoadPoint, load_grid, load_server_env, parse_grid  # noqa: F401
from .job import LegResult, SimRunResult, capacity, needs_capacity, resolve_rate, run_one


@dataclass(frozen=True)
class RunKey:
    """What a simulated run is a function of (beside the code and the cost model)."""

    backend: str
    env: tuple[tuple[str, str], ...]
    load: LoadPoint
    seed: int


def _run_task(key: RunKey, rate_rps: float | None, capacity_rps: float | None) -> SimRunResult:
    """One run (in a worker): arm ``A`` is a placeholder, the cell sets each run's arm."""
    env = dict(key.env)
    return run_one((key.load.plan(key.backend, env, env, (key.seed,)), "A", key.seed, rate_rps, capacity_rps))


class _Local:
    """Local worker processes (:func:`tailjob.sim.job.new_executor`)."""

    def __init__(self, processes: int | None = None):
        from .job import new_executor

        self.pool = new_executor(processes)
        self.workers = processes or len(os.sched_getaffinity(0))

    def map(self, fn, tasks, progress=None):
        import concurrent.futures

        futures = [self.pool.submit(fn, *t) for t in tasks]
        for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
            if progress:
                progress(done, len(futures))
        return [f.result() for f in futures]

    def close(self, *, cancel: bool = False):
        self.pool.shutdown(cancel_futures=cancel)


class _Dask:
    """A Dask ``distributed`` client: a ``LocalCluster`` (one single-threaded worker process per CPU:
    a run swaps module globals of the bench code, so one run per process at a time) or a scheduler's
    address."""

    def __init__(self, address: str = "local", processes: int | None = None, client=None):
        try:
            from distributed import Client, LocalCluster
        except ModuleNotFoundError:
            raise GridError(
                "--dask: dask[distributed] is not installed; accepted after "
                "pip install -e '.[sweep]' (or leave out --dask: local worker processes)"
            ) from None
        self.cluster = None
        if client is not None:
            self.client, self.own = client, False
        elif address == "local":
            n = processes or len(os.sched_getaffinity(0))
            self.cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
            )
            self.client, self.own = Client(self.cluster), True
        else:
            self.client, self.own = Client(address), True
        self.workers = len(self.client.scheduler_info().get("workers", {})) or 1

    def map(self, fn, tasks, progress=None):
        from distributed import as_completed

        futures = [self.client.submit(fn, *t, pure=False) for t in tasks]
        for done, _ in enumerate(as_completed(futures), 1):
            if progress:
                progress(done, len(futures))
        return self.client.gather(futures)

    def close(self, *, cancel: bool = False):
        if self.own:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


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
    engine: str
    counters: dict = field(default_factory=dict)


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
    pool = _Dask(dask_address, processes, client) if engine == "dask" else _Local(processes)
    try:
        cap_keys = [(b, load) for load in grid.loads for b in grid.backends]
        # a rate like 0.7x is of the capacity of the policy off, the other knobs at their defaults
        cap_plans = {(b, lp): lp.plan(b, OFF, OFF, grid.seeds) for b, lp in cap_keys}
        wanted = [k for k in cap_keys if needs_capacity(cap_plans[k])]
        caps = dict(zip(wanted, pool.map(capacity, [(cap_plans[k],) for k in wanted]))) if wanted else {}
        capacities = {k: caps.get(k) for k in cap_keys}
        rates = {k: resolve_rate(cap_plans[k], capacities[k]) for k in cap_keys}
        keys: dict[RunKey, None] = {}
        for cell in grid.cells():
            for env in (cell.policy.a, cell.policy.b):
                for seed in grid.seeds:
                    keys.setdefault(RunKey(cell.backend, env, cell.load, seed), None)
        order = list(keys)
        tasks = [(k, rates[(k.backend, k.load)], capacities[(k.backend, k.load)]) for k in order]
        results = pool.map(_run_task, tasks, progress)
        workers = pool.workers
    except BaseException:  # interrupted or a run failed: the runs not started yet are dropped
        pool.close(cancel=True)
        raise
    pool.close()
    by_key = dict(zip(order, results))
    cells = []
    for cell in grid.cells():
        runs = {
            arm: [replace(by_key[RunKey(cell.backend, env, cell.load, s)], arm=arm) for s in grid.seeds]
            for arm, env in (("A", cell.policy.a), ("B", cell.policy.b))
        }
        k = (cell.backend, cell.load)
        leg = LegResult(cell.plan(grid.seeds), rates[k], capacities[k], runs)
        leg.compare()
        cells.append(CellResult(cell, leg))
    requests = sum(r.server["requests"] for r in results)
    return SweepResult(grid, cells, capacities, len(results), requests, workers, engine)


# --- the result document ---------------------------------------------------------------------------


_FIELDS = "a b ratio ci min_effect verdict detectable pairs_needed estimator needs_samples".split()


def _comp(c: stats.Comparison) -> dict:
    return stats.summary(c, _FIELDS)


COUNTERS = ("rounds", "dispatched", "tail_elevations", "harvested")


def median_counters(runs) -> dict:
    return {k: stats.median([r.server["counters"][k] for r in runs]) for k in COUNTERS}


def cell_document(cr: CellResult) -> dict:
    c, leg = cr.cell, cr.leg
    return {
        "backend": c.backend,
        "load": c.load.as_dict(),
        "policy": c.policy.as_dict(),
        "rate_rps": leg.rate_rps,
        "capacity_rps": leg.capacity_rps,
        "comparisons": {k: _comp(v) for k, v in leg.comparisons.items()},
        "classes": {n: {k: _comp(v) for k, v in comps.items()} for n, comps in leg.class_comparisons.items()},
        "counters": {arm: median_counters(leg.runs[arm]) for arm in ("A", "B")},
    }


def result_document(result: SweepResult, *, argv: list[str], provenance: dict) -> dict:
    """Everything the sweep decided, with no wall-clock time, output directory or engine: the same
    grid at the same commit gives the same bytes, on local processes or on Dask.  ``legs``: the
    cells (the key ``benchmarks/compact_result.py`` reads)."""
    from ..history import without_out

    g = result.grid
    models = {
        b: {**_costs.for_backend(b).as_dict(), "sources": _costs.for_backend(b).sources()} for b in g.backends
    }
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
        "costs": models,
        "runs": result.runs,
        "simulated_requests": result.simulated_requests,
        "capacities": [
            {"backend": b, "load": lp.label, "rps": v} for (b, lp), v in result.capacities.items()
        ],
        "legs": [cell_document(cr) for cr in result.cells],
    }
