"""The measure interface: how one run of one arm becomes a run record, and the tiers behind it.

A **tier** is anything with ``name`` and ``run(plan) -> RunRecord`` (:class:`Measure`): given the
:class:`RunPlan` of one arm and run (the leg, the arm's server environment, the trial and its
position, the offered load, the job's settings), it produces that run's :class:`RunRecord`, whose
``metrics`` hold one value per row of :data:`tailjob.metrics.METRICS` (None where the tier has no
figure for it) and whose ``flags`` say why the run may not be data (``polluted`` ...).  The trial
loop (:mod:`tailjob.runner`) never looks behind it, so the A/B, the calibration and the peers
comparison run on any tier.  A run that is not data at all raises :class:`JobError`.

Two tiers run the real server here, :class:`ServerMeasure` with a client: :data:`WRK` (closed loop,
:mod:`tailjob.wrk`) and :data:`LOAD_CLIENT` (open or closed loop per client class,
:mod:`tailjob.loadgen`).  A tier that needs no server (virtual time, instruction counts) reads
``plan.env`` (the knobs), ``plan.leg`` (connections, duration) and ``plan.load`` (the client
classes) and fills the CPU accounting fields it has, leaving the rest at their defaults.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from . import loadgen, metrics, probeleg, procstat, wrk
from .loadgen import LoadSpec
from .plan import Leg
from .server import ServerError, ServerProcess
from .workloads import LoadPlan, LoadRunResult

__all__ = [
    "Measure",
    "RunPlan",
    "RunRecord",
    "Settings",
    "JobError",
    "ServerMeasure",
    "Client",
    "WRK",
    "LOAD_CLIENT",
    "SCRIPT",
    "BUSY_FRACTION",
    "generator_bound",
]

SCRIPT = Path(__file__).resolve().parents[1] / "tail_latency.lua"
BUSY_FRACTION = 0.9
"""A process using this share of the CPU it can use counts as busy (:func:`generator_bound`)."""


class JobError(RuntimeError):
    """A run failed in a way that makes it not data (server or client failure)."""


@dataclass(frozen=True)
class Settings:
    """How every run of a job is made.

    ``server_cpus`` / ``wrk_cpus``: ``taskset -c`` lists when pinned, else
    None.  ``pollution_limit``: CPU (in cores, averaged over the run) other
    processes may use before a run is flagged ``polluted``.  ``probe_dir``:
    with ``--probe``, the directory under which each run's server writes its
    latency probe files (None: probe off).  ``load``: the workload's
    :class:`tailjob.workloads.LoadPlan` (None: wrk's closed loop).
    ``commands``: per arm key, the server command that arm runs instead of the bench server
    (:mod:`tailjob.ownserver`; None: the bench server); ``ready_timeout_s``: how long it has to
    answer its first request.
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
    load: LoadPlan | None = None
    commands: Mapping[str, str] | None = None
    ready_timeout_s: float = 30.0

    @property
    def pinned(self) -> bool:
        return self.server_cpus is not None


@dataclass(frozen=True)
class RunPlan:
    """One run of one arm, as the trial loop asks a tier for it.

    ``arm``: the arm's key (``A``/``B``, or a peer's key); ``env``: the server's
    environment (the arm's ``CWIST_*`` knobs over the ambient ones); ``trial``
    is -1 for the warm-up; ``load``: the leg's client classes (None: the leg's
    closed loop, ``leg.connections`` connections); ``where`` starts every error
    message; ``backend``: the backend asked for, checked against the server's;
    ``server``: makes the (not yet started) server, for the tiers that run one;
    ``path``: the URL's path wrk requests (a prefix such as ``/user/`` makes
    ``tail_latency.lua`` send ``<path><seq>``, the load client's request);
    ``code``: with ``--a-ref``, the ``reference/`` directory whose :mod:`tailreactor` the
    server must say it imported (None: not asked).
    """

    leg: Leg
    arm: str
    env: Mapping[str, str]
    settings: Settings
    trial: int
    position: int = 0
    warmup: bool = False
    load: LoadSpec | None = None
    where: str = ""
    backend: str | None = None
    server: Callable[[Mapping[str, str]], ServerProcess] | None = None
    path: str = "/"
    code: str | None = None


@dataclass
class RunRecord:
    """One run.  CPU figures in seconds; ``metrics`` has a value per row of
    :data:`tailjob.metrics.METRICS` (None when the run has no data for it).
    ``trial`` is -1 for the warm-up.  ``wrk``: the client's own record
    (``WrkResult.as_dict()``, or the load client's).  ``probe``: with
    ``--probe``, :func:`tailjob.probeleg.gather`'s figures; ``classes``: the load
    client's figures per class (``LoadRunResult.class_metrics()``).  ``code``: with
    ``--a-ref``, the directory of the :mod:`tailreactor` the server said it imported.
    """

    leg: int
    trial: int
    position: int
    arm: str
    warmup: bool
    backend: str = "?"
    port: int = 0
    started_at: str = ""
    wall_s: float = 0.0
    wrk_argv: list[str] = field(default_factory=list)
    wrk: dict = field(default_factory=dict)
    server_cpu_s: float = 0.0
    wrk_cpu_s: float = 0.0
    self_cpu_s: float = 0.0
    machine_busy_s: float = 0.0
    steal_s: float = 0.0
    other_cpu_s: float = 0.0
    other_cores: float = 0.0
    metrics: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    probe: dict | None = None
    classes: dict | None = None
    code: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class Measure(Protocol):
    """A tier: ``run(plan)`` measures one run of one arm and returns its record (see the module
    docstring); raises :class:`JobError` when the run is not data."""

    @property
    def name(self) -> str: ...

    def run(self, plan: RunPlan) -> RunRecord: ...


@dataclass(frozen=True)
class Client:
    """A load generator run against a started server: its argv, timeout, environment and parser.

    ``parse(stdout)`` returns a result with ``requests``, ``rps``, ``errors``, ``socket_errors``,
    ``non_2xx``, ``percentile(p)`` and ``as_dict()`` (:class:`tailjob.wrk.WrkResult`); an open-loop
    client's also has ``saturated``, ``generator_busy`` and ``class_metrics()``.
    """

    name: str
    command: Callable[[str, RunPlan], list[str]]
    timeout_s: Callable[[RunPlan], float]
    env: Callable[[], dict | None]
    parse: Callable[[str], Any]  # the result described above (WrkResult or LoadRunResult)
    errors: tuple[type[Exception], ...]
    open_loop: bool = False


def generator_bound(*, generator_busy: float, server_busy: float) -> bool:
    """True when the load generator was busy (>= :data:`BUSY_FRACTION` of the CPU it can use: for wrk,
    its threads' cores; for the load client, the busiest of its one-thread processes) and the server
    was not: the run's figures then describe the generator."""
    return generator_busy >= BUSY_FRACTION and server_busy < BUSY_FRACTION


def _cpus(cpu_list: str | None) -> int:
    """How many CPUs a taskset list names (None: every CPU this process may use)."""
    if cpu_list is None:
        return len(os.sched_getaffinity(0))
    return sum(
        int(b) - int(a) + 1 if "-" in part else 1
        for part in cpu_list.split(",")
        for a, _, b in [part.partition("-")]
    )


@dataclass(frozen=True)
class ServerMeasure:
    """The real tiers: a fresh server per run, ``client`` against it, CPU accounting from ``/proc``.

    With ``settings.probe_dir`` the server writes its latency probe files into
    this run's own directory and the record carries their figures.  Raises
    :class:`JobError` if the server does not start, reports the wrong backend,
    dies during the run, the client fails, prints no figures or completes no
    request, or (probe on) a worker wrote no probe file.
    """

    client: Client

    @property
    def name(self) -> str:
        return self.client.name

    def run(self, plan: RunPlan) -> RunRecord:
        s, env, template = plan.settings, dict(plan.env), None
        if s.probe_dir is not None:
            folder = probeleg.run_dir(
                Path(s.probe_dir), leg=plan.leg.index, trial=plan.trial, arm=plan.arm, warmup=plan.warmup
            )
            folder.mkdir(parents=True, exist_ok=True)
            env.update(probeleg.probe_env(folder))
            template = env["CWIST_LATENCY_PROBE_FILE"]
        assert plan.server is not None  # the real tiers' plans carry their server
        server = plan.server(env)
        record = self._measure(server, plan)
        if template is not None:
            try:
                record.probe = probeleg.gather(template, workers=server.workers or 1)
            except probeleg.ProbeError as e:
                stopped = f" (server stop flags: {', '.join(record.flags)})" if record.flags else ""
                raise JobError(f"{plan.where}: {e}{stopped}") from None
        return record

    def _measure(self, server: ServerProcess, plan: RunPlan) -> RunRecord:
        s, leg, where, client = plan.settings, plan.leg, plan.where, self.client
        try:
            server.start()
        except ServerError as e:
            raise JobError(f"{where}: {e}") from None
        flags: list[str] = []
        try:
            if plan.backend and server.backend != plan.backend:
                raise JobError(f"{where}: asked for backend {plan.backend}, server reports {server.backend}")
            code = getattr(server, "code", None)
            if plan.code is not None and not _same_dir(code, os.path.join(plan.code, "tailreactor")):
                raise JobError(
                    f"{where}: asked for the tailreactor of {plan.code}, the server imported "
                    f"{code or 'one it did not name'}"
                )
            argv = client.command(f"http://{s.host}:{server.port}{plan.path}", plan)
            timeout_s = client.timeout_s(plan)
            started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            sys0, srv0 = procstat.system_cpu(), procstat.tree_cpu_s(server.pid)
            kids0, self0, t0 = procstat.children_cpu_s(), procstat.self_cpu_s(), time.monotonic()
            try:
                out = subprocess.run(
                    argv, check=False, capture_output=True, text=True, timeout=timeout_s, env=client.env()
                )  # its exit status is checked below
            except subprocess.TimeoutExpired:
                raise JobError(f"{where}: {client.name} did not finish within {timeout_s:.0f} s") from None
            t1 = time.monotonic()
            srv1, sys1 = procstat.tree_cpu_s(server.pid), procstat.system_cpu()
            kids1, self1 = procstat.children_cpu_s(), procstat.self_cpu_s()
            alive = server.alive()
        finally:
            flags += server.stop()
        if not alive:
            raise JobError(f"{where}: {server.WHAT} died during the run" + server.last_stderr())
        if out.returncode != 0:
            raise JobError(
                f"{where}: {client.name} exited {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]}"
            )
        try:
            result = client.parse(out.stdout)
        except client.errors as e:
            raise JobError(f"{where}: {e}") from None
        if result.requests == 0:
            # wrk does not count requests that are never answered, so a server that
            # accepts connections but never serves looks like a quiet, error-free run.
            raise JobError(
                f"{where}: {client.name} completed no request in {leg.duration_s} s "
                f"(errors {result.errors}); the server used {srv1 - srv0:.2f} s of CPU" + server.last_stderr()
            )
        wall = t1 - t0
        server_cpu, wrk_cpu, self_cpu = srv1 - srv0, kids1 - kids0, self1 - self0
        busy = sys1.busy_s - sys0.busy_s
        other = busy - server_cpu - wrk_cpu - self_cpu
        other_cores = other / wall if wall > 0 else 0.0
        flags += [
            flag
            for flag, raised in (
                ("polluted", other_cores > s.pollution_limit),
                ("socket-errors", result.socket_errors),
                ("non-2xx", result.non_2xx),
                ("saturated", client.open_loop and result.saturated),
            )
            if raised
        ]
        if wall > 0:
            gen_busy = (
                result.generator_busy
                if client.open_loop
                else wrk_cpu / wall / min(leg.threads, _cpus(s.wrk_cpus))
            )
            server_busy = server_cpu / wall / min(server.workers or 1, _cpus(s.server_cpus))
            if generator_bound(generator_busy=gen_busy, server_busy=server_busy):
                flags.append("generator-bound")
        return RunRecord(
            leg=leg.index,
            trial=plan.trial,
            position=plan.position,
            arm=plan.arm,
            warmup=plan.warmup,
            backend=server.backend or "?",
            port=server.port or 0,
            started_at=started_at,
            wall_s=wall,
            wrk_argv=argv,
            wrk=result.as_dict(),
            server_cpu_s=server_cpu,
            wrk_cpu_s=wrk_cpu,
            self_cpu_s=self_cpu,
            machine_busy_s=busy,
            steal_s=sys1.steal_s - sys0.steal_s,
            other_cpu_s=other,
            other_cores=other_cores,
            metrics=metrics.run_metrics(result, server_cpu_s=server_cpu),
            flags=flags,
            classes=result.class_metrics() if client.open_loop else None,
            code=code,
        )


def _same_dir(a: str | None, b: str) -> bool:
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


WRK: Measure = ServerMeasure(
    Client(
        "wrk",
        lambda url, p: wrk.wrk_command(
            url,
            threads=p.leg.threads,
            connections=p.leg.connections,
            duration_s=p.leg.duration_s,
            script=p.settings.script,
            cpus=p.settings.wrk_cpus,
        ),
        timeout_s=lambda p: p.leg.duration_s + 60,
        env=wrk.wrk_env,
        parse=wrk.parse_wrk_output,
        errors=(wrk.WrkOutputError,),
    )
)
"""wrk, closed loop: ``leg.threads`` threads, ``leg.connections`` connections, ``tail_latency.lua``."""


def _load_timeout_s(plan: RunPlan) -> float:
    """The load client's timeout: its run, its drain and 30 s to start and report."""
    assert plan.load is not None  # the load client's plans carry their load
    return plan.load.duration_s + plan.load.drain_s + 30


LOAD_CLIENT: Measure = ServerMeasure(
    Client(
        "the load client",
        lambda url, p: loadgen.command(url, p.load, cpus=p.settings.wrk_cpus),
        timeout_s=_load_timeout_s,
        env=loadgen.client_env,
        parse=LoadRunResult.parse,
        errors=(loadgen.LoadOutputError,),
        open_loop=True,
    )
)
"""The job's load client (:mod:`tailjob.loadgen`) offering ``plan.load``."""
