"""Run the job: one measured run, a leg of interleaved trials, all legs.

Role
----
:func:`measure_run` is one run: start the bench server with the arm's
environment, sample CPU counters, run wrk, sample again, stop the server, and
return a :class:`RunRecord`.  :func:`run_job` runs every leg: a discarded
warm-up run, then the RMIT trials (each trial A and B once, in random order),
and compares the arms per metric (:mod:`tailjob.stats`).

The server is restarted for every run, so no run inherits another's caches,
connections or heap.  With the probe on (``Settings.probe_dir``) each run's
server also writes the latency probe of every worker into its own directory,
and the run gathers them after the graceful stop (:mod:`tailjob.probeleg`).  A run whose server dies, whose wrk fails or completes
no request, or whose server reports a backend other than the one asked for
stops the job with :class:`JobError`: such a run is not data.  Socket errors, non-2xx responses
and CPU used by other processes during the run do not stop it; they are
flagged in the record and the report.  With the probe on, a worker that wrote
no probe file stops the job too.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping

from . import openloop, pooled, probeleg, procstat, stats
from .plan import Arm, Leg, arm_knobs, rmit_schedule, server_env
from .server import BenchServer, ServerError, ServerProcess
from .wrk import WrkOutputError, parse_wrk_output, wrk_command

__all__ = ["Settings", "RunRecord", "LegResult", "JobResult", "JobError", "measure_run",
           "measure_server", "run_job",
           "compare_leg", "LATENCY_KEYS"]

SCRIPT = Path(__file__).resolve().parents[1] / "tail_latency.lua"
LATENCY_KEYS = {"p50": 50, "p99": 99, "p99.9": 99.9, "p99.99": 99.99, "p99.999": 99.999}


class JobError(RuntimeError):
    """A run failed in a way that makes it not data (server or wrk failure)."""


@dataclass(frozen=True)
class Settings:
    """How every run of a job is made.

    ``server_cpus`` / ``wrk_cpus``: ``taskset -c`` lists when pinned, else
    None.  ``pollution_limit``: CPU (in cores, averaged over the run) other
    processes may use before a run is flagged ``polluted``.  ``probe_dir``:
    with ``--probe``, the directory under which each run's server writes its
    latency probe files (None: probe off).
    """

    seed: int = 1
    warmup: bool = True
    workers: int | None = None
    server_cpus: str | None = None
    wrk_cpus: str | None = None
    pollution_limit: float = 0.10
    host: str = "127.0.0.1"
    script: str = str(SCRIPT)
    server_module: str = "tailreactor.http.server"
    min_effect: float | None = None  # None: each metric's own minimum
    probe_dir: str | None = None
    load: openloop.LoadPlan | None = None  # None: wrk, closed loop (tailjob.openloop)

    @property
    def pinned(self) -> bool:
        return self.server_cpus is not None


@dataclass
class RunRecord:
    """One run.  CPU figures in seconds; ``metrics`` are the verdict metrics
    (``rps``, ``cpu_us_per_req`` in us, ``p50`` ... ``p99.999`` in us; None
    when the run has no data for it).  ``trial`` is -1 for the warm-up.
    ``probe``: with ``--probe``, :func:`tailjob.probeleg.gather`'s figures of
    every worker and merged (None without).
    """

    leg: int
    trial: int
    position: int
    arm: str
    warmup: bool
    backend: str
    port: int
    started_at: str
    wall_s: float
    wrk_argv: list[str]
    wrk: dict
    server_cpu_s: float
    wrk_cpu_s: float
    self_cpu_s: float
    machine_busy_s: float
    steal_s: float
    other_cpu_s: float
    other_cores: float
    metrics: dict
    flags: list[str] = field(default_factory=list)
    probe: dict | None = None
    classes: dict | None = None  # load client: per class, LoadRunResult.class_metrics()

    def as_dict(self) -> dict:
        return asdict(self)


def _expected_backend(env: Mapping[str, str]) -> str | None:
    name = env.get("CWIST_REACTOR_BACKEND", "").strip()
    return name if name and name != "auto" else None


def measure_run(leg: Leg, arm: Arm, env: Mapping[str, str], settings: Settings, *,
                trial: int, position: int, warmup: bool = False,
                load: openloop.Load | None = None) -> RunRecord:
    """One run of ``arm`` in ``leg``: fresh bench server, one wrk run, CPU accounting.

    With ``settings.probe_dir`` the server writes its latency probe files into
    this run's own directory and the record carries their figures.  Raises
    :class:`JobError` if the server does not start, reports the wrong
    backend, dies during the run, wrk fails or prints no metrics, or (probe
    on) a worker wrote no probe file.
    """
    where = f"{leg.name}, arm {arm.key}"
    template = None
    if settings.probe_dir is not None:
        folder = probeleg.run_dir(Path(settings.probe_dir), leg=leg.index, trial=trial, arm=arm.key,
                                  warmup=warmup)
        folder.mkdir(parents=True, exist_ok=True)
        probe_vars = probeleg.probe_env(folder)
        env = {**env, **probe_vars}
        template = probe_vars["CWIST_LATENCY_PROBE_FILE"]
    server = BenchServer(env, host=settings.host, workers=settings.workers,
                         cpus=settings.server_cpus, module=settings.server_module)
    expected = _expected_backend(env)

    def check(srv: ServerProcess) -> None:
        if expected and srv.backend != expected:
            raise JobError(f"{where}: asked for backend {expected}, server reports {srv.backend}")

    record = measure_server(server, leg, where, settings, arm=arm.key, trial=trial, position=position,
                            warmup=warmup, check=check, load=load)
    if template is not None:
        try:
            record.probe = probeleg.gather(template, workers=server.workers or 1)
        except probeleg.ProbeError as e:
            stopped = f" (server stop flags: {', '.join(record.flags)})" if record.flags else ""
            raise JobError(f"{where}: {e}{stopped}") from None
    return record


def measure_server(server: ServerProcess, leg: Leg, where: str, settings: Settings, *, arm: str,
                   trial: int, position: int, warmup: bool = False,
                   check: Callable[[ServerProcess], None] | None = None,
                   load: openloop.Load | None = None) -> RunRecord:
    """One run against ``server`` (not yet started): start, wrk (or ``load``'s client), CPU accounting, stop.

    ``where`` starts every error message; ``arm`` names the arm or server in
    the record; ``check(server)`` runs once it is ready (may raise
    :class:`JobError`).  Raises :class:`JobError` if the server does not
    start or dies during the run, or wrk fails, prints no metrics or
    completes no request.
    """
    try:
        server.start()
    except ServerError as e:
        raise JobError(f"{where}: {e}") from None
    flags: list[str] = []
    try:
        if check is not None:
            check(server)
        url = f"http://{settings.host}:{server.port}/"
        if load is None:
            argv = wrk_command(url, threads=leg.threads, connections=leg.connections,
                               duration_s=leg.duration_s, script=settings.script, cpus=settings.wrk_cpus)
            tool, timeout_s, tool_env = "wrk", leg.duration_s + 60, None
        else:
            argv, tool, timeout_s, tool_env = load.command(url, settings.wrk_cpus), "the load client", \
                load.timeout_s, load.env()
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        sys0, srv0 = procstat.system_cpu(), procstat.tree_cpu_s(server.pid)
        kids0, self0, t0 = procstat.children_cpu_s(), procstat.self_cpu_s(), time.monotonic()
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=tool_env)
        except subprocess.TimeoutExpired:
            raise JobError(f"{where}: {tool} did not finish within {timeout_s:.0f} s") from None
        t1 = time.monotonic()
        srv1, sys1 = procstat.tree_cpu_s(server.pid), procstat.system_cpu()
        kids1, self1 = procstat.children_cpu_s(), procstat.self_cpu_s()
        alive = server.alive()
    finally:
        flags += server.stop()
    if not alive:
        raise JobError(f"{where}: {server.WHAT} died during the run"
                       + server.last_stderr())
    if out.returncode != 0:
        raise JobError(f"{where}: {tool} exited {out.returncode}: "
                       f"{(out.stderr or out.stdout).strip()[-300:]}")
    try:
        result = parse_wrk_output(out.stdout) if load is None else load.parse(out.stdout)
    except (WrkOutputError, openloop.loadgen.LoadOutputError) as e:
        raise JobError(f"{where}: {e}") from None
    if result.requests == 0:
        # wrk does not count requests that are never answered, so a server that
        # accepts connections but never serves looks like a quiet, error-free run.
        raise JobError(f"{where}: {tool} completed no request in {leg.duration_s} s "
                       f"(errors {result.errors}); the server used {srv1 - srv0:.2f} s of CPU"
                       + server.last_stderr())
    wall = t1 - t0
    server_cpu, wrk_cpu, self_cpu = srv1 - srv0, kids1 - kids0, self1 - self0
    busy = sys1.busy_s - sys0.busy_s
    other = busy - server_cpu - wrk_cpu - self_cpu
    other_cores = other / wall if wall > 0 else 0.0
    metrics: dict[str, float | None] = {
        "rps": result.rps,
        "cpu_us_per_req": server_cpu * 1e6 / result.requests if result.requests else None,
    }
    for key, p in LATENCY_KEYS.items():
        metrics[key] = result.percentile(p).us
    if other_cores > settings.pollution_limit:
        flags.append("polluted")
    if result.socket_errors:
        flags.append("socket-errors")
    if result.non_2xx:
        flags.append("non-2xx")
    if load is not None and result.saturated:
        flags.append("saturated")
    if wall > 0:
        gen_busy = (result.generator_busy if load is not None
                    else wrk_cpu / wall / min(leg.threads, _cpus(settings.wrk_cpus)))
        server_busy = server_cpu / wall / min(server.workers or 1, _cpus(settings.server_cpus))
        if openloop.generator_bound(generator_busy=gen_busy, server_busy=server_busy):
            flags.append("generator-bound")
    return RunRecord(leg=leg.index, trial=trial, position=position, arm=arm, warmup=warmup,
                     backend=server.backend or "?", port=server.port or 0, started_at=started_at,
                     wall_s=wall, wrk_argv=argv, wrk=result.as_dict(), server_cpu_s=server_cpu,
                     wrk_cpu_s=wrk_cpu, self_cpu_s=self_cpu, machine_busy_s=busy,
                     steal_s=sys1.steal_s - sys0.steal_s, other_cpu_s=other,
                     other_cores=other_cores, metrics=metrics, flags=flags,
                     classes=result.class_metrics() if load is not None else None)


def _cpus(cpu_list: str | None) -> int:
    """How many CPUs a taskset list names (None: every CPU this process may use)."""
    if cpu_list is None:
        return len(os.sched_getaffinity(0))
    return sum(int(b) - int(a) + 1 if "-" in part else 1
               for part in cpu_list.split(",") for a, _, b in [part.partition("-")])


@dataclass
class LegResult:
    """A leg's runs (warm-up included, marked), its per-metric comparisons and,
    with ``--probe``, :func:`tailjob.probeleg.summarize` of its runs."""

    leg: Leg
    arms: tuple[Arm, Arm]
    env: dict          # arm key -> the CWIST_* variables the server saw
    knobs: dict        # arm key -> every knob's parsed value
    schedule: list[list[str]]
    runs: list[RunRecord]
    comparisons: list[stats.Comparison] = field(default_factory=list)
    probe: dict | None = None
    # With the load client (Settings.load): the capacity run (for a rate like 0.7x), the spec
    # every run of the leg got, and per class the comparisons of CLASS_METRICS.
    capacity: dict | None = None
    load_spec: dict | None = None
    class_comparisons: dict[str, list[stats.Comparison]] = field(default_factory=dict)

    def measured(self, arm: str | None = None) -> list[RunRecord]:
        return [r for r in self.runs if not r.warmup and (arm is None or r.arm == arm)]

    def backends(self) -> dict[str, str | None]:
        """Each arm's backend in this leg, as asked (a run's ``backend`` is what the server reported)."""
        return {a.key: self.leg.backend_for(a.key) for a in self.arms}

    def as_dict(self) -> dict:
        return {"leg": asdict(self.leg), "name": self.leg.name, "backends": self.backends(),
                "arms": {a.key: {"label": a.label, "env": dict(a.env)} for a in self.arms},
                "env": self.env, "knobs": self.knobs, "schedule": self.schedule,
                "runs": [r.as_dict() for r in self.runs],
                "comparisons": [c.as_dict() for c in self.comparisons], "probe": self.probe,
                "capacity": self.capacity, "load_spec": self.load_spec,
                "class_comparisons": {k: [c.as_dict() for c in v] for k, v in self.class_comparisons.items()}}


def compare_leg(runs: list[RunRecord], *, seed: int, min_effect: float | None = None,
                resamples: int = stats.RESAMPLES, klass: str | None = None) -> list[stats.Comparison]:
    """Per-metric comparison of arm B against arm A, runs paired by trial.

    The percentiles of :data:`tailjob.pooled.POOLED_KEYS` are compared on the
    arms' pooled histograms when every paired run has one
    (:func:`tailjob.pooled.compare_pooled`); the other metrics, and those
    when a histogram is missing, on the medians of the runs' values.
    ``klass``: compare that client class's figures (``RunRecord.classes``) on
    :data:`tailjob.openloop.CLASS_METRICS` instead of the run's.
    """
    by_trial: dict[int, dict[str, RunRecord]] = {}
    for r in runs:
        if not r.warmup:
            by_trial.setdefault(r.trial, {})[r.arm] = r
    trials = [t for t in sorted(by_trial) if {"A", "B"} <= set(by_trial[t])]

    def figures(r: RunRecord) -> dict:
        return r.metrics if klass is None else (r.classes or {}).get(klass, {})
    metrics = stats.METRICS if klass is None else [stats.metric(k) for k in openloop.CLASS_METRICS]
    out = []
    hist = {arm: [(by_trial[t][arm].wrk if klass is None else figures(by_trial[t][arm])).get("histogram")
                  for t in trials] for arm in "AB"}
    poolable = bool(trials) and all(h is not None for arm in "AB" for h in hist[arm])
    for m in metrics:
        if poolable and m.key in pooled.POOLED_KEYS:
            out.append(pooled.compare_pooled(m, hist["A"], hist["B"], seed=seed, min_effect=min_effect,
                                             resamples=resamples))
            continue
        a = [figures(by_trial[t]["A"]).get(m.key) for t in trials]
        b = [figures(by_trial[t]["B"]).get(m.key) for t in trials]
        out.append(stats.compare(m, a, b, seed=seed, min_effect=min_effect, resamples=resamples))
    return out


def measure_capacity(leg: Leg, arm: Arm, env: Mapping[str, str], settings: Settings) -> dict:
    """The server's closed-loop capacity for a rate like ``0.7x``: one wrk run of
    :data:`tailjob.openloop.CAPACITY_S` s with the leg's threads and connections, on arm ``arm``."""
    short = replace(leg, duration_s=openloop.CAPACITY_S)
    r = measure_run(short, arm, env, replace(settings, probe_dir=None), trial=-1, position=0, warmup=True)
    return {"arm": arm.key, "wrk_argv": r.wrk_argv, "rps": r.metrics["rps"], "flags": r.flags}


Progress = Callable[[str, dict], None]


def _cwist_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith("CWIST_")}


def run_job(legs: list[Leg], arms: tuple[Arm, Arm], settings: Settings, *,
            ambient: Mapping[str, str], progress: Progress | None = None) -> list[LegResult]:
    """Run every leg in order and return their results with comparisons.

    ``progress(event, info)`` is called with ``"run-start"`` / ``"run-end"``
    (``info`` has ``leg``, ``arm``, ``trial``, ``warmup`` and, at the end,
    ``record``), and with ``"capacity"`` (``leg``, ``arm``, ``capacity``) after
    a leg's capacity run.
    """
    notify = progress or (lambda event, info: None)
    by_key = {a.key: a for a in arms}
    results = []
    for leg in legs:
        envs = {a.key: server_env(ambient, leg, a) for a in arms}
        if settings.load is not None:  # what the workload needs of the server, unless an arm says otherwise
            for a in arms:
                envs[a.key].update({k: v for k, v in settings.load.server_env().items() if k not in a.env})
        if settings.probe_dir is not None:  # the per-run file is added by measure_run
            for e in envs.values():
                e["CWIST_LATENCY_PROBE"] = "1"
        lr = LegResult(leg=leg, arms=arms, env={k: _cwist_env(e) for k, e in envs.items()},
                       knobs={k: arm_knobs(e) for k, e in envs.items()},
                       schedule=rmit_schedule(leg.runs, seed=settings.seed + leg.index), runs=[])
        load = None
        if settings.load is not None:
            if settings.load.relative:
                lr.capacity = measure_capacity(leg, arms[0], envs[arms[0].key], settings)
                notify("capacity", {"leg": leg, "arm": arms[0], "capacity": lr.capacity})
            spec = settings.load.spec(leg, capacity_rps=lr.capacity["rps"] if lr.capacity else None,
                                      seed=settings.seed + leg.index)
            lr.load_spec = asdict(spec)
            load = openloop.Load(spec)
        plan = ([(-1, 0, arms[0].key, True)] if settings.warmup else []) + [
            (t, pos, key, False) for t, order in enumerate(lr.schedule) for pos, key in enumerate(order)]
        for trial, pos, key, warmup in plan:
            info = {"leg": leg, "arm": by_key[key], "trial": trial, "warmup": warmup}
            notify("run-start", info)
            record = measure_run(leg, by_key[key], envs[key], settings, trial=trial, position=pos,
                                 warmup=warmup, load=load)
            lr.runs.append(record)
            notify("run-end", {**info, "record": record})
        lr.comparisons = compare_leg(lr.runs, seed=settings.seed, min_effect=settings.min_effect)
        if load is not None:
            lr.class_comparisons = {c.name: compare_leg(lr.runs, seed=settings.seed, min_effect=settings.min_effect,
                                                        klass=c.name) for c in load.spec.classes}
        if settings.probe_dir is not None:
            lr.probe = probeleg.summarize(lr.runs)
        results.append(lr)
    return results


@dataclass
class JobResult:
    """Everything a job produced; what the report, plot and history are made from.

    ``ab`` is the preset name (``tail``, ``backend``, ``aa``) or ``custom``;
    ``provenance`` comes from :func:`tailjob.history.provenance`.
    """

    argv: list[str]
    profile: str
    ab: str
    arms: tuple[Arm, Arm]
    settings: Settings
    legs: list[LegResult]
    provenance: dict
    started_at: str
    finished_at: str

    def verdicts(self) -> list[str]:
        return [c.verdict for lr in self.legs
                for c in [*lr.comparisons, *(c for cs in lr.class_comparisons.values() for c in cs)]]

    def as_dict(self) -> dict:
        return {"argv": self.argv, "profile": self.profile, "ab": self.ab,
                "arms": {a.key: {"label": a.label, "env": dict(a.env)} for a in self.arms},
                "settings": asdict(self.settings), "provenance": self.provenance,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "legs": [lr.as_dict() for lr in self.legs]}
