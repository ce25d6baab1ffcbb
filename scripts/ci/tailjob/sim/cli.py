"""``ab --tier sim``: an A/B (:class:`~tailjob.plan.AbOptions`) in virtual time, the live job's trial
loop (:func:`tailjob.runner.run_trials`, :class:`tailjob.runner.ABDesign`) on
:class:`tailjob.sim.measure.SimMeasure`.

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
from dataclasses import replace

from .. import PROG, REPO, history, outputs, refcode, report, stepsummary, workloads
from .. import fail as _error
from ..measure import Settings
from ..outputs import dumps, write_files
from ..plan import (
    PROFILES,
    AbOptions,
    Arm,
    Leg,
    Overrides,
    PlanError,
    Unavailable,
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

__all__ = ["main_sim"]

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


def main_sim(o: AbOptions, *, collect: dict | None = None) -> int:
    """The A/B ``o`` in virtual time; ``collect``: gets ``legs`` (the legs' results), ``result``
    (the path of the result JSON) and ``document`` (what it holds)."""
    try:
        ab, arms, legs, load = plan_sim(o)
        on = [leg for leg in legs if "io_uring" in (leg.backend_for("A"), leg.backend_for("B"))]
        asked = o.backend == "io_uring" or any(leg.backend_for("A") != leg.backend_for("B") for leg in on)
        legs = without_refused_io_uring(legs, on, asked=asked, measuring="simulating")
        a_commit = refcode.resolve(REPO, o.a_ref) if o.a_ref is not None else None
    except Unavailable as e:  # io_uring asked for where the kernel refuses it
        return _error(str(e), 3)
    except (PlanError, _costs.CostError, refcode.RefError) as e:
        return _error(str(e), 2)
    settings = Settings(seed=o.seed, warmup=False, min_effect=o.min_effect, load=load)
    design = ABDesign(arms, settings, _ambient(os.environ))
    try:
        with refcode.checkout(REPO, a_commit) if a_commit else contextlib.nullcontext() as tree:
            return _run(o, ab, design, legs, tree and (a_commit, str(tree / "reference")), collect)
    except refcode.RefError as e:
        return _error(str(e), 2)


def _progress():
    """The trial loop's ``progress``: per leg a count of the runs done (:func:`tailjob.progress.counter`)."""
    counters: dict = {}

    def notify(event: str, info: dict) -> None:
        if event == "run-end":
            leg = info["leg"]
            done, show = counters.get(leg.index) or (
                0,
                counter(f"sim {leg.backend_for('A')}, c{leg.connections}", lines=4),
            )
            counters[leg.index] = (done + 1, show)
            show(done + 1, 2 * leg.runs)

    return notify


def _run(o: AbOptions, ab: str, design: ABDesign, legs: list[Leg], a_code, collect=None) -> int:
    started = history.now()
    codes = {"A": a_code[1]} if a_code else None
    measure = SimMeasure(o.sim_cost, code=codes, processes=len(os.sched_getaffinity(0)))
    kept: list = []  # the legs' results, as they run
    a_ref = a_code and {"ref": o.a_ref, "commit": a_code[0]}
    job = JobResult(list(o.argv), o.profile, ab, design.arms, design.settings, kept, {}, started, "", a_ref)
    try:
        with measure:
            run_trials(legs, replace(design, tier=measure), design.settings, progress=_progress(), into=kept)
    except (OSError, RuntimeError, ValueError) as e:
        return _error(
            f"a simulated run failed: {e}{_kept(o, job, measure, legs, 'stopped by a failed run', e)}", 3
        )
    except (KeyboardInterrupt, SystemExit) as e:  # Ctrl-C, SIGTERM: main says so, with the runs kept
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated (SIGTERM)"
        e.not_kept = _kept(o, job, measure, legs, why)  # type: ignore[union-attr]
        raise
    _written(o, job, measure, collect)
    code, lines = report.gate(job, tier=" in virtual time")
    if lines:
        print("\n" + "\n".join(f"!!! {line}" for line in lines))
    if o.gate and code:
        return _error("--gate: a metric regressed in virtual time (see the verdicts above)", 1)
    return 0


def _kept(o: AbOptions, job: JobResult, measure: SimMeasure, legs: list[Leg], why: str, error=None) -> str:
    """What a failed or interrupted sim job kept, said after its one line: the runs it finished,
    written as the full job writes them (:func:`_written`) and marked partial; "" if none finished."""
    ran = [lr for lr in job.legs if lr.runs]  # a leg none of whose runs finished was not reached
    done, total = sum(len(lr.runs) for lr in ran), sum(2 * leg.runs for leg in legs)
    if not done:
        return ""
    missed = [leg.name for leg in legs[len(ran) :]]
    job = replace(job, legs=ran, partial=outputs.partial(why, done, total, missed, error))
    return outputs.kept(done, total, _written(o, job, measure))


def _written(o: AbOptions, job: JobResult, measure: SimMeasure, collect=None) -> list:
    """Write the sim job's report and result document (a finished job's plot and history line too),
    show its report and files, append the report to GitHub Actions' job summary; the files written.
    A partial job's files are ``<stem>-sim-partial``."""
    for lr in job.legs:  # one class is the whole run: its table would repeat the leg's
        if len(lr.class_comparisons) == 1:
            lr.class_comparisons = {}
    job.finished_at, job.provenance = history.now(), history.sim_provenance(REPO)
    stem = history.result_stem(job) + ("-sim-partial" if job.partial else "-sim")
    results_dir = o.out / "results"
    doc = sim_report.result_document(job, measure, load=o.load)
    report_md = sim_report.render(job, measure, runs=True)
    md, js = write_files(results_dir, stem, {".md": report_md, ".json": dumps(doc)})
    if collect is not None:
        collect.update(legs=job.legs, result=js, document=doc)
    files, jsonl = [md, js], None
    if not job.partial:  # the history and its plots are of finished jobs
        files += sim_report.plot(job.legs, results_dir / stem)
        line = history.history_line(job, result_file=f"results/{js.name}", tier="sim")
        jsonl = history.append_history(line, o.out, name=sim_report.HISTORY_FILE)
    text = sim_report.render(job, measure, runs=False)
    summary = stepsummary.append(text, prog=PROG)  # GitHub Actions' job summary
    step = [f"{summary} (the verdicts appended: {stepsummary.VARIABLE})"] if summary else []
    history.show(text, (*files, *step), jsonl)
    return files
