"""The measure interface: one run of one arm becomes a run record.

A **tier** is anything with ``name`` and ``run(plan) -> RunRecord`` (:class:`Measure`): given the
:class:`RunPlan` of one arm and run, it returns the :class:`RunRecord`, whose ``metrics`` hold one
value per row of :data:`tailjob.metrics.METRICS` (None where the tier has no figure) and whose
``flags`` say why the run may not be data; a run that is not data at all raises :class:`JobError`.
The trial loop (:mod:`tailjob.runner`) never looks behind it.  Here: :data:`WRK` (closed loop) and
:data:`LOAD_CLIENT` (:mod:`tailjob.loadgen`), each a fresh server per run with a client against it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import history, loadgen, loadspec, metrics, probeleg, procstat, wrk
from .loadspec import LoadRunResult, LoadSpec
from .plan import Leg
from .server import ServerError, ServerProcess, how_it_ended
from .workloads import LoadPlan

SCRIPT = Path(__file__).resolve().parent / "tail_latency.lua"
BUSY_FRACTION = 0.9
"""A process using this share of the CPU it can use counts as busy (:func:`generator_bound`)."""


class JobError(RuntimeError):
    """A run failed in a way that makes it not data (server or client failure)."""


@dataclass(frozen=True)
class Settings:
    """How every run of a job is made.  ``*_cpus``: ``taskset -c`` lists (None: not pinned);
    ``pollution_limit``: cores other processes may use before a run is ``polluted``; ``probe_dir``:
    with ``--probe``, where each run's server writes its probe files; ``load``: None is wrk's closed
    loop; ``commands``: per arm key, a server command instead of the bench server
    (:mod:`tailjob.ownserver`), with ``ready_timeout_s`` to answer its first request."""

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
    """One run of one arm.  ``env``: the server's environment; ``trial`` -1 for the warm-up;
    ``load``: the leg's client classes (None: ``leg.connections`` closed-loop connections);
    ``where`` starts every error message; ``backend``: the one asked for, checked against the
    server's; ``server`` makes the server; ``path``: the URL's path wrk requests (a prefix such as
    ``/user/`` makes ``tail_latency.lua`` send ``<path><seq>``); ``code``: with ``--a-ref``, the
    ``reference/`` directory whose :mod:`tailreactor` the server must say it imported."""

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
    """One run.  CPU figures in seconds; ``trial`` -1 for the warm-up; ``wrk``: the client's own
    record; ``probe``: :func:`tailjob.probeleg.gather`'s figures; ``classes``: the load client's
    per class (``LoadRunResult.class_metrics()``); ``code``: the :mod:`tailreactor` the server imported."""

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

    @classmethod
    def of(cls, plan: RunPlan, **fields: Any) -> RunRecord:
        """The record of ``plan``'s run: its leg, trial, position, arm and warm-up, and ``fields``."""
        return cls(plan.leg.index, plan.trial, plan.position, plan.arm, plan.warmup, **fields)

    def as_dict(self) -> dict:
        return asdict(self)


class Measure(Protocol):
    """A tier: ``run(plan)`` measures one run of one arm and returns its record; raises
    :class:`JobError` when the run is not data."""

    @property
    def name(self) -> str: ...

    def run(self, plan: RunPlan) -> RunRecord: ...


def generator_bound(*, generator_busy: float, server_busy: float) -> bool:
    """True when the load generator was busy (:data:`BUSY_FRACTION` of the CPU it can use) and the
    server was not: the run's figures then describe the generator."""
    return generator_busy >= BUSY_FRACTION and server_busy < BUSY_FRACTION


def _cpus(cpu_list: str | None) -> int:
    """How many CPUs a taskset list names (None: every CPU this process may use)."""
    if cpu_list is None:
        return len(os.sched_getaffinity(0))
    return sum(int(b) - int(a) + 1 if b else 1 for a, _, b in (p.partition("-") for p in cpu_list.split(",")))


def _cpu_now(server: ServerProcess) -> dict[str, float]:
    """The CPU counters a run's usage is the difference of (seconds)."""
    machine = procstat.system_cpu()
    return {
        "wall_s": time.monotonic(),
        "server_cpu_s": procstat.tree_cpu_s(server.pid),
        "wrk_cpu_s": procstat.children_cpu_s(),
        "self_cpu_s": procstat.self_cpu_s(),
        "machine_busy_s": machine.busy_s,
        "steal_s": machine.steal_s,
    }


@dataclass(frozen=True)
class ServerMeasure:
    """The real tiers: a fresh server per run, a load generator against it (its ``command``,
    ``timeout_s``, ``env``, and ``parse``, whose result answers as :class:`tailjob.wrk.WrkResult`; an
    ``open_loop`` one's also has ``saturated``, ``generator_busy`` and ``class_metrics()``), CPU
    accounting from ``/proc``.  Raises :class:`JobError` if the server does not start, reports the
    wrong backend or code, dies during the run, the generator fails or completes no request, or
    (probe on) a worker wrote no file."""

    name: str
    command: Callable[[str, RunPlan], list[str]]
    timeout_s: Callable[[RunPlan], float]
    env: Callable[[], dict | None]
    parse: Callable[[str], Any]
    errors: tuple[type[Exception], ...]
    open_loop: bool = False

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
        try:
            server.start()
        except ServerError as e:
            raise JobError(f"{plan.where}: {e}") from None
        flags: list[str] = []
        try:
            code = _checked_server(server, plan)
            argv = self.command(f"http://{plan.settings.host}:{server.port}{plan.path}", plan)
            started_at = history.now()
            out, use = self._run_client(argv, server, plan)
            alive = server.alive()
        finally:
            flags += server.stop()
        result = self._result(out, alive, server, plan, use)
        return RunRecord.of(
            plan,
            backend=server.backend or "?",
            port=server.port or 0,
            started_at=started_at,
            wrk_argv=argv,
            wrk=result.as_dict(),
            **use,
            metrics=metrics.run_metrics(result, server_cpu_s=use["server_cpu_s"]),
            flags=flags + self._flags(result, use, server, plan),
            classes=result.class_metrics() if self.open_loop else None,
            code=code,
        )

    def _run_client(self, argv: list[str], server: ServerProcess, plan: RunPlan):
        """Run the load generator against the started server: its output, and the CPU seconds over
        the run of the server's tree, the generator (this process's children), this process and the
        machine, and what else the machine ran meanwhile (``other_*``: the run's pollution)."""
        timeout_s = self.timeout_s(plan)
        before = _cpu_now(server)
        try:
            out = subprocess.run(
                argv, check=False, capture_output=True, text=True, timeout=timeout_s, env=self.env()
            )  # its exit status is checked by _result
        except subprocess.TimeoutExpired:
            raise JobError(f"{plan.where}: {self.name} did not finish within {timeout_s:.0f} s") from None
        use = {k: v - before[k] for k, v in _cpu_now(server).items()}
        use["other_cpu_s"] = (
            use["machine_busy_s"] - use["server_cpu_s"] - use["wrk_cpu_s"] - use["self_cpu_s"]
        )
        use["other_cores"] = use["other_cpu_s"] / use["wall_s"] if use["wall_s"] > 0 else 0.0
        return out, use

    def _result(self, out, alive: bool, server: ServerProcess, plan: RunPlan, use: dict):
        """The client's parsed figures, or :class:`JobError` for a dead server, a failed client, no request."""
        where = plan.where
        if not alive:
            status = server.proc.poll() if server.proc is not None else None
            when = "warm-up" if plan.trial < 0 else f"trial {plan.trial + 1}"
            raise JobError(
                f"{where}, {when}: {server.WHAT} died{how_it_ended(status)} during the run"
                + server.last_stderr()
            )
        if out.returncode != 0:
            raise JobError(
                f"{where}: {self.name} exited {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]}"
            )
        try:
            result = self.parse(out.stdout)
        except self.errors as e:
            raise JobError(f"{where}: {e}") from None
        if result.requests == 0:  # a server that accepts but never serves looks quiet and error-free
            raise JobError(
                f"{where}: {self.name} completed no request in {plan.leg.duration_s} s "
                f"(errors {result.errors}); the server used {use['server_cpu_s']:.2f} s of CPU"
                + server.last_stderr()
            )
        if result.non_2xx >= result.requests:  # nothing served: error answers are no latency to compare
            seen = getattr(server, "ready_status", None)  # a server command's: the bench server's is 200
            raise JobError(
                f"{where}: every answer was an error ({result.non_2xx} of {result.requests} non-2xx"
                f"{f'; GET {plan.path} answered status {seen} when it started' if seen else ''}); "
                "the job measures a server that serves its requests"
            )
        return result

    def _flags(self, result, use: dict, server: ServerProcess, plan: RunPlan) -> list[str]:
        """The run's flags: pollution, socket errors, non-2xx answers, saturation, a server that closes
        every connection, a generator-bound run."""
        s, open_loop, wall = plan.settings, self.open_loop, use["wall_s"]
        raised = {
            "polluted": use["other_cores"] > s.pollution_limit,
            "socket-errors": result.socket_errors,
            "non-2xx": result.non_2xx,
            "saturated": open_loop and result.saturated,
            "no-keep-alive": getattr(server, "closes", False),  # a server command's (CommandServer)
        }
        if wall > 0:
            threads = min(plan.leg.threads, _cpus(s.wrk_cpus))
            gen_busy = result.generator_busy if open_loop else use["wrk_cpu_s"] / wall / threads
            server_busy = use["server_cpu_s"] / wall / min(server.workers or 1, _cpus(s.server_cpus))
            raised["generator-bound"] = generator_bound(generator_busy=gen_busy, server_busy=server_busy)
        return [flag for flag, up in raised.items() if up]


def _checked_server(server: ServerProcess, plan: RunPlan) -> str | None:
    """The code the server imported (``--a-ref``), once it is the backend and code the plan asked for."""
    if plan.backend and server.backend != plan.backend:
        raise JobError(f"{plan.where}: asked for backend {plan.backend}, server reports {server.backend}")
    code = getattr(server, "code", None)
    wanted = plan.code and os.path.realpath(os.path.join(plan.code, "tailreactor"))
    if wanted and (code is None or os.path.realpath(code) != wanted):
        raise JobError(
            f"{plan.where}: asked for the tailreactor of {plan.code}, the server imported "
            f"{code or 'one it did not name'}"
        )
    return code


WRK: Measure = ServerMeasure(
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
"""wrk, closed loop: ``leg.threads`` threads, ``leg.connections`` connections, ``tail_latency.lua``."""


def _load_timeout_s(load: LoadSpec | None) -> float:
    """The load client's timeout: its run, its drain and 30 s to start and report."""
    assert load is not None  # the load client's plans carry their load
    return load.duration_s + load.drain_s + 30


LOAD_CLIENT: Measure = ServerMeasure(
    "the load client",
    lambda url, p: loadgen.command(url, p.load, cpus=p.settings.wrk_cpus),
    timeout_s=lambda p: _load_timeout_s(p.load),
    env=loadgen.client_env,
    parse=LoadRunResult.parse,
    errors=(loadspec.LoadOutputError,),
    open_loop=True,
)
"""The job's load client (:mod:`tailjob.loadgen`) offering ``plan.load``."""
