"""``ab --tier sim``: an A/B (:class:`~tailjob.plan.AbOptions`) in virtual time.

Same profiles, ``--ab``/``--a``/``--b``, ``--backend``, ``--workload``,
``--load``, ``--rate``, ``--schedule``, ``--connections``, ``--duration``
(virtual seconds per run), ``--runs`` (seeds per arm), ``--seed`` (the first
seed), ``--min-effect``, ``--gate`` and ``--out`` as the live job; plus
``--sim-cost 'K=US ...'``.  Options that only mean something for processes on
a machine (``--pin``, ``--workers``, ``--threads``, ``--probe``) are refused
with one line.  Writes
``<out>/results/<stem>-sim.{md,json,svg,png}`` and appends one line to
``<out>/tail-latency-sim.jsonl``.  Exit codes as the live job: 0 done, 1
``--gate`` and a regression (whole run or any class), 2 bad options, 3 a run
failed.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime, timezone

from .. import PROG, REPO, history, refcode, stepsummary, workloads
from .. import fail as _error
from ..plan import (
    PROFILES,
    AbOptions,
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
from . import costs as _costs
from . import report as sim_report
from .job import AbPlan, new_executor, run_ab

__all__ = ["main_sim"]

MODELLED = ("epoll", "io_uring", "selectors")
_BACKEND = "CWIST_REACTOR_BACKEND"


def _refuse_live_only(o: AbOptions) -> None:
    for given, text in (
        (o.pin, "--pin"),
        (o.workers, f"--workers {o.workers}"),
        (o.threads, f"--threads {o.threads}"),
        (o.probe, "--probe"),
    ):
        if given:
            raise PlanError(
                f"{text}: the sim tier runs one reactor in virtual time, with no processes to "
                "pin or count, no wrk threads, no probe files; leave it out or use --tier wall"
            )


def _ambient(environ) -> dict[str, str]:
    """The ``CWIST_*`` variables of this process: they apply to both arms, as in the live job."""
    return {k: v for k, v in environ.items() if k.startswith("CWIST_")}


def plan_sim(o: AbOptions) -> tuple[str, object, list[AbPlan]]:
    """(the --ab name, the arms, one AbPlan per leg) of the A/B; PlanError/CostError if bad."""
    _refuse_live_only(o)
    check_environment(os.environ)
    ab, arms = o.arms()
    if o.a_ref is not None:
        arms = refcode.label_arms(arms, o.a_ref)
    profile = PROFILES[o.profile]
    legs = plan_legs(
        profile,
        arms,
        Overrides(backend=o.backend, connections=o.connections, duration_s=o.duration, runs=o.runs),
    )
    load = workloads.plan_load(o.workload, o.load, o.rate, o.schedule)
    ambient = _ambient(os.environ)
    plans = []
    for leg in legs:
        envs = {}
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
            env[_BACKEND] = backend
            _costs.with_overrides(_costs.for_backend(backend), o.sim_cost)
            envs[arm.key] = env
        seeds = tuple(range(o.seed, o.seed + leg.runs))
        plans.append(
            AbPlan(
                backend=leg.backend or envs["A"][_BACKEND],
                a_env=envs["A"],
                b_env=envs["B"],
                seeds=seeds,
                workload=o.workload,
                load=o.load,
                rate=load.rate if load else None,
                connections=leg.connections,
                duration_s=float(leg.duration_s),
                schedule=load.schedule if load else "poisson",
                cost_overrides=o.sim_cost,
                bootstrap_seed=o.seed,
                min_effect=o.min_effect,
            )
        )
    return ab, arms, plans


def main_sim(o: AbOptions, *, collect: dict | None = None) -> int:
    """The A/B ``o`` in virtual time; ``collect``: gets ``legs`` (the legs' results), ``result``
    (the path of the result JSON) and ``document`` (what it holds)."""
    try:
        ab, arms, plans = plan_sim(o)
        on = [p for p in plans if "io_uring" in (p.backend_for("A"), p.backend_for("B"))]
        asked = o.backend == "io_uring" or any(p.backend_for("A") != p.backend_for("B") for p in on)
        plans = without_refused_io_uring(plans, on, asked=asked, measuring="simulating")
        a_commit = refcode.resolve(REPO, o.a_ref) if o.a_ref is not None else None
    except Unavailable as e:  # io_uring asked for where the kernel refuses it
        return _error(str(e), 3)
    except (PlanError, _costs.CostError, refcode.RefError) as e:
        return _error(str(e), 2)
    if a_commit is None:
        return _run(o, ab, arms, plans, None, collect)
    try:
        with refcode.checkout(REPO, a_commit) as tree:
            plans = [replace(p, a_code=str(tree / "reference")) for p in plans]
            return _run(o, ab, arms, plans, a_commit, collect)
    except refcode.RefError as e:
        return _error(str(e), 2)


def _run(o: AbOptions, ab, arms, plans, a_commit, collect=None) -> int:
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    legs = []
    try:
        with new_executor() as executor:
            for plan in plans:
                label = f"sim {plan.backend_for('A')}, c{plan.connections}"
                legs.append(run_ab(plan, executor=executor, progress=counter(label, lines=4)))
    except (OSError, RuntimeError, ValueError) as e:
        return _error(f"a simulated run failed: {e}", 3)
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    pv = history.provenance(REPO, wrk_version="-")
    job = {
        "argv": list(o.argv),
        "profile": o.profile,
        "ab": ab,
        "arms": {a.key: {"label": a.label, "env": dict(a.env), "env_text": a.env_text()} for a in arms},
        "seeds": list(plans[0].seeds) if plans else [],
        "a_ref": None if a_commit is None else {"ref": o.a_ref, "commit": a_commit},
        "provenance": {k: pv[k] for k in ("git_commit", "git_dirty", "python", "kernel", "packages")},
        "started_at": started,
        "finished_at": finished,
    }
    out = o.out
    stem = history.stem(started, o.profile, ab) + "-sim"
    results_dir = out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    md = results_dir / f"{stem}.md"
    md.write_text(sim_report.render(job, legs, runs=True))
    doc = sim_report.result_document(job, legs)
    js = sim_report.write_json(doc, results_dir / f"{stem}.json")
    if collect is not None:
        collect.update(legs=legs, result=js, document=doc)
    images = sim_report.plot(legs, results_dir / stem)
    jsonl = history.append_history(
        sim_report.history_line(job, legs, result_file=f"results/{js.name}"),
        out,
        name=sim_report.HISTORY_FILE,
    )
    text = sim_report.render(job, legs, runs=False)
    summary = stepsummary.append(text, prog=PROG)  # GitHub Actions' job summary
    step = [f"{summary} (the verdicts appended: {stepsummary.VARIABLE})"] if summary else []
    history.show(text, (md, js, *images, *step), jsonl)
    code, lines = sim_report.gate(legs)
    if lines:
        print("\n" + "\n".join(f"!!! {line}" for line in lines))
    if o.gate and code:
        return _error("--gate: a metric regressed in virtual time (see the verdicts above)", 1)
    return 0
