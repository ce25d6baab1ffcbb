"""``ab --tier sim``: an A/B (:class:`~tailjob.plan.AbOptions`) in virtual time, on the live job's path
(:func:`tailjob.job.run_planned`, the tier :data:`SIM`) and trial loop (:func:`tailjob.runner.run_trials`,
:class:`tailjob.runner.ABDesign`) on :class:`tailjob.sim.measure.SimMeasure`.

The live job's options (``--runs``: seeds per arm, ``--seed``: the first, ``--duration``: virtual
seconds) plus ``--sim-cost``; what means processes on a machine (``--pin``, ``--workers``,
``--threads``, ``--probe``) is refused in one line (:func:`tailjob.ownserver.refused`).  Writes
``<out>/results/<stem>-sim.{md,json,svg,png}`` and a line of ``<out>/tail-latency-sim.jsonl``.
Exit codes as the live job's (0, 1 ``--gate`` regression, 2 bad options, 3 a run failed, 130 Ctrl-C,
143 SIGTERM; a failed or interrupted job writes the runs it finished, marked partial).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from dataclasses import replace

from .. import REPO, history, refcode, workloads
from ..job import Job, Outputs, Printed, Tier, gated, run_planned
from ..measure import Settings
from ..outputs import dumps, write_files
from ..plan import (
    PROFILES,
    AbOptions,
    Arm,
    Leg,
    Overrides,
    PlanError,
    arm_knobs,
    check_environment,
    plan_legs,
    server_env,
    without_refused_io_uring,
)
from ..progress import counter
from ..runner import ABDesign, JobResult, run_trials
from ..workloads import LoadPlan
from . import costs as _costs
from . import report as sim_report
from .grid import MODELLED
from .measure import SimMeasure

__all__ = ["SIM", "main_sim", "plan_ab", "plan_sim"]

_BACKEND = "CWIST_REACTOR_BACKEND"


def _ambient(environ) -> dict[str, str]:
    """The ``CWIST_*`` variables of this process: they apply to both arms, as in the live job."""
    return {k: v for k, v in environ.items() if k.startswith("CWIST_")}


def plan_sim(o: AbOptions) -> tuple[str, tuple[Arm, Arm], list[Leg], LoadPlan | None]:
    """(the --ab name, the arms, the legs with each arm's backend resolved, the load) of the A/B;
    PlanError/CostError if bad."""
    check_environment(os.environ)
    ab, arms = o.arms()
    if o.a_ref is not None:
        arms = refcode.label_arms(arms, o.a_ref)
    over = Overrides(backend=o.backend, connections=o.connections, duration_s=o.duration, runs=o.runs)
    load = workloads.plan_load(o.workload, o.load, o.rate, o.schedule)
    ambient = _ambient(os.environ)
    legs = []
    for leg in plan_legs(PROFILES[o.profile], arms, over):
        backends = {}
        for arm in arms:
            env = server_env(ambient, leg, arm)
            arm_knobs({**env, **(load.server_env() if load else {})})
            backend = env.get(_BACKEND) or "auto"
            if backend == "auto":
                from tailreactor.backends import io_uring_refused as _io_uring_refused

                backend = "epoll" if _io_uring_refused() else "io_uring"
            if backend not in MODELLED:
                option = f"--{arm.key.lower()} " if _BACKEND in arm.env else ""
                raise PlanError(
                    f"{option}{_BACKEND}={backend}: the sim tier models {', '.join(MODELLED)} "
                    "(its cost model has constants for those only)"
                )
            _costs.with_overrides(_costs.for_backend(backend), o.sim_cost)
            backends[arm.key] = backend
        a, b = backends["A"], backends["B"]
        legs.append(
            replace(leg, backend=a, arm_backends=())
            if a == b
            else replace(leg, backend=None, arm_backends=(("A", a), ("B", b)))
        )
    return ab, arms, legs, load


def _progress(legs: list, **_) -> contextlib.nullcontext:
    """The trial loop's ``progress``: per leg a count of the runs done (:func:`tailjob.progress.counter`)."""
    done: Counter = Counter()

    def notify(event: str, info: dict) -> None:
        if event == "run-end":
            leg = info["leg"]
            done[leg.index] += 1
            counter(f"sim {leg.backend_for('A')}, c{leg.connections}", lines=4)(done[leg.index], 2 * leg.runs)

    return contextlib.nullcontext(notify)


SIM = Tier(
    failed=(OSError, RuntimeError, ValueError),
    says="a simulated run failed: ",
    suffix="-sim",
    gate=" in virtual time",
    provenance=lambda wrk: history.sim_provenance(REPO),  # no machine's facts: virtual time
    progress=_progress,
)


def main_sim(o: AbOptions, *, collect: dict | None = None) -> int:
    """The A/B ``o`` in virtual time (``collect``: :func:`tailjob.job.run_planned`'s)."""
    return run_planned(plan_ab, o, list(o.argv), collect=collect)[0]


def plan_ab(o: AbOptions, argv: list[str]) -> Job:
    """The A/B ``o`` in virtual time: the live job's trial loop on :class:`SimMeasure`, its runs in
    worker processes, arm A's on ``--a-ref``'s commit; its files ``<stem>-sim``."""
    ab, arms, legs, load = plan_sim(o)
    on = [leg for leg in legs if "io_uring" in (leg.backend_for("A"), leg.backend_for("B"))]
    asked = o.backend == "io_uring" or any(leg.backend_for("A") != leg.backend_for("B") for leg in on)
    legs = without_refused_io_uring(legs, on, asked=asked, measuring="simulating")
    a_commit = refcode.resolve(REPO, o.a_ref) if o.a_ref is not None else None
    settings = Settings(seed=o.seed, warmup=False, min_effect=o.min_effect, load=load)
    measure = SimMeasure(o.sim_cost, processes=len(os.sched_getaffinity(0)))

    def run(s: Settings, progress, into: list) -> list:
        design = ABDesign(arms, s, _ambient(os.environ), tier=measure)
        with refcode.checkout(REPO, a_commit) if a_commit else contextlib.nullcontext() as tree:
            if tree is not None:  # arm A's runs import tailreactor from the ref's tree
                measure.code = {"A": str(tree / "reference")}
            with measure:
                return run_trials(legs, design, s, progress=progress, into=into)

    def finish(results: list, out: Outputs, partial: str | None = None) -> Printed:
        for lr in results:  # one class is the whole run: its table would repeat the leg's
            if len(lr.class_comparisons) == 1:
                lr.class_comparisons = {}
        a_ref = {"ref": o.a_ref, "commit": a_commit} if a_commit else None
        at = (out.provenance, out.started, out.finished)
        job = JobResult(argv, o.profile, ab, arms, out.settings, results, *at, a_ref, partial)
        doc = sim_report.result_document(job, measure, load=o.load)
        report_md = sim_report.render(job, measure, runs=True)
        files: list = write_files(out.results_dir, out.stem, {".md": report_md, ".json": dumps(doc)})
        if not partial:  # the history and its plots are of finished jobs
            files += sim_report.plot(results, out.results_dir / out.stem)
            line = history.history_line(job, result_file=f"results/{files[1].name}", tier="sim")
            jsonl = history.append_history(line, out.results_dir.parent, name=sim_report.HISTORY_FILE)
            files.append(f"{jsonl} (one line appended)")
        text = sim_report.render(job, measure, runs=False)
        return Printed(text, files, result=files[1], document=doc, **gated(job, gate=o.gate, words=SIM.gate))

    return Job(ab, o.profile, legs, 2, settings, "-", run, finish, tier=SIM)
