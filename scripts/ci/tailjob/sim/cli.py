"""``--tier sim``: the job's command line in virtual time (see :mod:`tailjob.cli`).

Same profiles, ``--ab``/``--a``/``--b``, ``--backend``, ``--workload``,
``--load``, ``--rate``, ``--schedule``, ``--connections``, ``--duration``
(virtual seconds per run), ``--runs`` (seeds per arm), ``--seed`` (the first
seed), ``--min-effect``, ``--gate`` and ``--out`` as the live job; plus
``--sim-cost 'K=US ...'``.  Options that only mean something for processes on
a machine (``--pin``, ``--workers``, ``--threads``, ``--probe``, ``--peers``,
``--calibrate``) are refused with one line.  Writes
``<out>/results/<stem>-sim.{md,json,svg,png}`` and appends one line to
``<out>/tail-latency-sim.jsonl``.  Exit codes as the live job: 0 done, 1
``--gate`` and a regression (whole run or any class), 2 bad options, 3 a run
failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from datetime import datetime, timezone

from .. import history, stepsummary, workloads
from ..options import PROG, REPO
from ..plan import PROFILES, Overrides, PlanError, Unavailable, arm_knobs, arms_for, plan_legs, server_env
from . import costs as _costs
from . import refcode
from . import report as sim_report
from .job import AbPlan, new_executor, run_ab

__all__ = ["main_sim"]

MODELLED = ("epoll", "io_uring", "selectors")
_BACKEND = "CWIST_REACTOR_BACKEND"


def _error(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def _refuse_live_only(args: argparse.Namespace) -> None:
    for given, text in (
        (args.pin, "--pin"),
        (args.workers, f"--workers {args.workers}"),
        (args.threads, f"--threads {args.threads}"),
        (args.probe, "--probe"),
        (args.peers, "--peers"),
        (args.calibrate, f"--calibrate {args.calibrate}"),
        (args.no_pin, "--no-pin"),
        (args.write_readme, "--write-readme"),
    ):
        if given:
            raise PlanError(
                f"{text}: the sim tier runs one reactor in virtual time, with no processes to "
                "pin or count, no wrk threads, no probe files; leave it out or use --tier wall"
            )


def _ambient(environ) -> dict[str, str]:
    """The ``CWIST_*`` variables of this process: they apply to both arms, as in the live job."""
    return {k: v for k, v in environ.items() if k.startswith("CWIST_")}


def plan_sim(args: argparse.Namespace) -> tuple[str, object, list[AbPlan]]:
    """(the --ab name, the arms, one AbPlan per leg) from the options; PlanError/CostError if bad."""
    _refuse_live_only(args)
    from ..cli import _check_environment

    _check_environment(os.environ)
    if args.ab and (args.a is not None or args.b is not None):
        raise PlanError("--ab cannot be combined with --a/--b")
    custom = args.a is not None or args.b is not None or (args.a_ref is not None and not args.ab)
    ab = "custom" if custom else (args.ab or "tail")
    arms = arms_for(None if custom else ab, a=args.a, b=args.b)
    if args.a_ref is not None:
        ab = "aref" if custom and args.a is None and args.b is None else ab
        arms = refcode.label_arms(arms, args.a_ref)
    profile = PROFILES[args.profile]
    legs = plan_legs(
        profile,
        arms,
        Overrides(
            backend=args.backend, connections=args.connections, duration_s=args.duration, runs=args.runs
        ),
    )
    load = workloads.plan_load(args.workload, args.load, args.rate, args.schedule)
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
            _costs.with_overrides(_costs.for_backend(backend), args.sim_cost)
            envs[arm.key] = env
        seeds = tuple(range(args.seed, args.seed + leg.runs))
        plans.append(
            AbPlan(
                backend=leg.backend or envs["A"][_BACKEND],
                a_env=envs["A"],
                b_env=envs["B"],
                seeds=seeds,
                workload=args.workload,
                load=args.load,
                rate=load.rate if load else None,
                connections=leg.connections,
                duration_s=float(leg.duration_s),
                schedule=load.schedule if load else "poisson",
                cost_overrides=args.sim_cost,
                bootstrap_seed=args.seed,
                min_effect=args.min_effect,
            )
        )
    return ab, arms, plans


def _without_refused_io_uring(plans: list[AbPlan], asked: str | None) -> list[AbPlan]:
    on = [p for p in plans if "io_uring" in (p.backend_for("A"), p.backend_for("B"))]
    if not on:
        return plans
    from tailreactor.backends import io_uring_refused as _io_uring_refused

    refused = _io_uring_refused()
    if refused is None:
        return plans
    if asked == "io_uring" or any(p.backend_for("A") != p.backend_for("B") for p in on):
        raise Unavailable(f"io_uring asked for but unavailable here: {refused}")
    print(f"{PROG}: io_uring skipped: {refused}; simulating epoll only", file=sys.stderr, flush=True)
    return [p for p in plans if p not in on]


def main_sim(
    args: argparse.Namespace, argv: list[str], *, legs_out: list | None = None, collect: dict | None = None
) -> int:
    """``--tier sim``; ``legs_out``: gets the legs' results (for the main job's answer); ``collect``:
    gets ``result``, the path of the result JSON (for ``--validate``)."""
    try:
        ab, arms, plans = plan_sim(args)
        plans = _without_refused_io_uring(plans, args.backend)
        a_commit = refcode.resolve(REPO, args.a_ref) if args.a_ref is not None else None
    except Unavailable as e:
        return _error(str(e), 3)
    except (PlanError, _costs.CostError, refcode.RefError) as e:
        return _error(str(e), 2)
    if a_commit is None:
        return _run(args, argv, ab, arms, plans, None, legs_out, collect)
    try:
        with refcode.checkout(REPO, a_commit) as tree:
            plans = [replace(p, a_code=str(tree / "reference")) for p in plans]
            return _run(args, argv, ab, arms, plans, a_commit, legs_out, collect)
    except refcode.RefError as e:
        return _error(str(e), 2)


def _run(args, argv, ab, arms, plans, a_commit, legs_out=None, collect=None) -> int:
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    legs = []
    try:
        tty = sys.stderr.isatty()
        with new_executor() as executor:
            for plan in plans:

                def progress(done, total, plan=plan, tty=tty):
                    if not tty and done != total and done % max(total // 4, 1):
                        return  # a log gets a line per quarter, a terminal one line rewritten
                    print(
                        f"{chr(13) if tty else ''}{PROG}: sim {plan.backend_for('A')}, c{plan.connections}: "
                        f"{done}/{total} runs",
                        end="" if tty and done < total else "\n",
                        file=sys.stderr,
                        flush=True,
                    )

                legs.append(run_ab(plan, executor=executor, progress=progress))
    except (OSError, RuntimeError, ValueError) as e:
        return _error(f"a simulated run failed: {e}", 3)
    if legs_out is not None:
        legs_out.extend(legs)
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    pv = history.provenance(REPO, wrk_version="-")
    job = {
        "argv": argv,
        "profile": args.profile,
        "ab": ab,
        "arms": {a.key: {"label": a.label, "env": dict(a.env), "env_text": a.env_text()} for a in arms},
        "seeds": list(plans[0].seeds) if plans else [],
        "a_ref": None if a_commit is None else {"ref": args.a_ref, "commit": a_commit},
        "provenance": {k: pv[k] for k in ("git_commit", "git_dirty", "python", "kernel", "packages")},
        "started_at": started,
        "finished_at": finished,
    }
    out = args.out
    stem = history.stem(started, args.profile, ab) + "-sim"
    results_dir = out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    md = results_dir / f"{stem}.md"
    md.write_text(sim_report.render(job, legs, runs=True))
    js = sim_report.write_json(sim_report.result_document(job, legs), results_dir / f"{stem}.json")
    if collect is not None:
        collect["result"] = js
    images = sim_report.plot(legs, results_dir / stem)
    jsonl = history.append_history(
        sim_report.history_line(job, legs, result_file=f"results/{js.name}"),
        out,
        name=sim_report.HISTORY_FILE,
    )
    text = sim_report.render(job, legs, runs=False)
    print(text)
    summary = stepsummary.append(text, prog=PROG)  # GitHub Actions' job summary
    print("Files:")
    for path in (md, js, *images):
        print(f"- {path}")
    if summary:
        print(f"- {summary} (the verdicts appended: {stepsummary.VARIABLE})")
    print(f"- {jsonl} (one line appended)")
    code, lines = sim_report.gate(legs)
    if lines:
        print("\n" + "\n".join(f"!!! {line}" for line in lines))
    if args.gate and code:
        return _error("--gate: a metric regressed in virtual time (see the verdicts above)", 1)
    return 0
