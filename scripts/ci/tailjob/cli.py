"""Command line of the tail-latency job: :func:`main` (console script ``tailreactor-tail-latency``).

Parses the subcommand (:mod:`tailjob.options`), turns the namespace into the record its job takes
(:class:`~tailjob.plan.AbOptions`, :class:`~tailjob.instructions.CountPlan`, the grid) -- below this
module no function sees the parsed command line -- and runs it.  A live job is planned here
(:func:`_plan_ab`, :func:`_plan_calibrate`, :func:`_plan_peers` each return a
:class:`~tailjob.job.Job`; the A/B in virtual time is :func:`tailjob.sim.cli.plan_ab`'s) and run by the
one path, :func:`tailjob.job.run_planned`: progress, the files (report, plot, JSON, history line), the
summary, the exit code; a job stopped by a failed run or a signal keeps the runs it finished.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
from dataclasses import asdict, fields, replace
from pathlib import Path

from tailreactor.backends import io_uring_refused as _io_uring_refused

from . import (
    calibrate,
    history,
    outputs,
    ownserver,
    peers,
    peersjob,
    peersreport,
    refcode,
    report,
    workloads,
)
from .job import Job, Outputs, Printed, Terminated, gated, run_planned
from .options import PROG, REPO, parse
from .options import fail as _error
from .plan import (
    AB_PRESETS,
    BACKENDS,
    PROFILES,
    AbOptions,
    Overrides,
    PlanError,
    Unavailable,
    arm_knobs,
    check_environment,
    peer_legs,
    plan_legs,
    server_env,
    without_refused_io_uring,
)
from .runner import ABDesign, JobResult, Settings, run_trials
from .wrk import wrk_version


def _exit_on_sigterm(signum, frame) -> None:
    """SIGTERM (a CI timeout, ``kill``) ends the job as Ctrl-C does, by an exception: the runner's
    ``finally`` stops the server and ``subprocess.run`` kills wrk (Python's default left them running).
    Once: later ones are ignored, as a second Ctrl-C is (a CI's timeout often signals the job and then
    its process group; dying then would leave the server running and lose the runs kept).  SIGKILL
    still ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated(128 + signum)


def main(argv: list[str] | None = None) -> int:
    own_signals = threading.current_thread() is threading.main_thread()  # signal.signal works only there
    if own_signals:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _where_the_user_is()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except (KeyboardInterrupt, Terminated) as e:  # the servers, load and worker processes are stopped
        if own_signals:  # a second Ctrl-C would only interrupt the exit itself
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        ctrl_c = isinstance(e, KeyboardInterrupt)
        lost = getattr(e, "not_kept", "")  # set by job.run_planned: the runs kept, if any
        print(f"{PROG}: {'interrupted' if ctrl_c else 'terminated (SIGTERM)'}{lost}", file=sys.stderr)
        return 130 if ctrl_c else 128 + signal.SIGTERM


def _where_the_user_is() -> None:
    """Relative paths (``--workload FILE``, ``--out``, ``--grid``, ``--baseline``) are the user's: a
    wrapper that runs the job from elsewhere (scripts/tail-latency.sh, from the repository root) names
    the user's directory in ``TAILJOB_CWD``; the defaults are absolute, so only what the user gave moves."""
    where = os.environ.get("TAILJOB_CWD")
    if where and os.path.isdir(where):
        os.chdir(where)


def _main(argv: list[str]) -> int:
    try:
        args = parse(argv)
    except SystemExit as e:  # --help (0) or bad input (2), its one line printed
        return e.code if isinstance(e.code, int) else 0
    refusal = ownserver.refused(args)
    if refusal:  # an option that cannot apply where it was given
        return _error(refusal, 2)
    if args.command == "count":
        from .instructions import CountPlan, main_tier

        return main_tier(_record(CountPlan, args))
    if args.command == "sweep":
        from .sim.sweepreport import main_sweep

        return main_sweep(args.grid, args.dask, out=args.out, argv=argv, sim_cost=args.sim_cost)
    options = _record(AbOptions, args, argv=tuple(argv))
    if args.command == "validate":
        from .sim.validate import main_validate

        return main_validate(options, run_ab)
    if args.command == "ab":
        return run_ab(options)
    return run_planned(_plan_peers if args.command == "peers" else _plan_calibrate, args, argv)[0]


def _record(cls, args, **given):
    """The dataclass ``cls`` from the values of ``args`` named as its fields, and ``given``."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)} | given)


def run_ab(o: AbOptions, *, collect: dict | None = None) -> int:
    """The A/B ``o`` on its tier (``collect``: :func:`tailjob.job.run_planned`'s)."""
    if o.tier == "sim":
        from .sim.cli import main_sim

        return main_sim(o, collect=collect)
    code, results = run_planned(_plan_ab, o, list(o.argv), collect=collect)
    if o.argv in ((), ("ab",)) and collect is None and results is not None:
        # the job as the README runs it: the sim tier's answer beside the live run
        from .sim.answer import beside_live

        return beside_live(o, results, code)
    return code


def _write(job, o: Outputs, render) -> tuple[list, Path, str | None]:
    """An A/B's or a peers job's report (Markdown), plot, whole job (JSON) and history line: the
    report and plot paths, the JSON's, and the history file's line for "Files:" (of a partial job,
    the report and JSON only, and None)."""
    (md,) = outputs.write_files(o.results_dir, o.stem, {".md": render(job, runs=True)})
    result_json = history.write_result(job, o.results_dir, o.stem)
    if job.partial:  # a job stopped early: the report and JSON, marked partial
        return [md, result_json], result_json, None  # (the history and its plots are of finished jobs)
    from . import plot  # here: matplotlib's ~1 s of import is not for a refused, sim or count run

    images = plot.plot_job(job, o.results_dir / o.stem)
    line = history.history_line(job, result_file=f"results/{result_json.name}")
    name = history.PEERS_HISTORY_FILE if job.ab == "peers" else history.HISTORY_FILE
    jsonl = history.append_history(line, o.results_dir.parent, name=name)
    return [md, *images, result_json], result_json, f"{jsonl} (one line appended)"


def _live_legs(legs: list, arms, asked: str | None) -> list:
    """``legs`` less those on io_uring where the kernel refuses it (re-numbered), unless asked for
    (``--backend io_uring``, or an arm that sets it: :func:`~tailjob.plan.without_refused_io_uring`)."""
    on = [leg for leg in legs if any(leg.backend_for(arm.key) == "io_uring" for arm in arms)]
    asked_for = asked == "io_uring" or any(leg.backend is None for leg in on)
    kept = without_refused_io_uring(legs, on, asked=asked_for, measuring="measuring")
    return [replace(leg, index=i) for i, leg in enumerate(kept)] if kept != legs else legs


def _settings(args, *, pin: bool, **kw) -> Settings:
    return Settings(
        seed=args.seed,
        warmup=not args.no_warmup,
        pollution_limit=args.pollution_limit,
        server_cpus=args.server_cpus if pin else None,  # checked by options.parse
        wrk_cpus=args.wrk_cpus if pin else None,
        **kw,
    )


def _server_settings(args, cmds) -> dict:
    """The settings of the server under an A/B or a calibration: the bench server's or a command's."""
    return dict(
        workers=args.workers, min_effect=args.min_effect, commands=cmds, ready_timeout_s=args.ready_timeout
    )


def _tools(pin: bool, taskset: str = "--pin needs taskset (util-linux), which is not on PATH") -> str:
    """wrk's version, after checking taskset when pinned (PlanError, FileNotFoundError)."""
    if pin and not shutil.which("taskset"):
        raise Unavailable(taskset)
    return wrk_version()


def _overrides(args, pin: bool) -> Overrides:
    return _record(Overrides, args, duration_s=args.duration, pin=pin)


def _plan_ab(args: AbOptions, argv: list[str]) -> Job:
    """The A/B: arms, legs and load, every arm's environment checked before anything runs."""
    if not ownserver.given(args):  # the bench server reads the ambient CWIST_* knobs
        check_environment(os.environ)
    cmds = ownserver.commands(args)  # None: the bench server
    ab, arms = args.arms() if cmds is None else ownserver.arms(args, cmds)
    if ab == "custom" and arms[0].env == arms[1].env and (cmds is None or cmds["A"] == cmds["B"]):
        same = " ".join(f"{k}={v}" for k, v in arms[0].env.items()) or "no variables"
        print(
            f"{PROG}: note: arms A and B are the same ({same}): an A/A control; --ab aa names it so",
            file=sys.stderr,
        )
    a_commit = None
    if args.a_ref is not None:  # arm A on the ref's code, arm B on the working tree's (refcode)
        a_commit = refcode.resolve(REPO, args.a_ref)
        arms = refcode.label_arms(arms, args.a_ref)
    profile, overrides = PROFILES[args.profile], _overrides(args, args.pin)
    legs = plan_legs(profile, arms, overrides) if cmds is None else ownserver.legs(profile, overrides)
    load = workloads.plan_load(args.workload, args.load, args.rate, args.schedule)
    # the per-class figures come with the probe's, which cannot tell classes apart
    probe = args.probe or (load is not None and args.workload != "uniform" and cmds is None)
    if cmds is not None:
        ownserver.check_workload(load.server_env() if load else {}, str(args.workload))
    for leg in legs:  # every arm's whole environment must parse before anything runs
        for arm in arms if cmds is None else ():  # a server command's variables are its own
            arm_knobs({**server_env(os.environ, leg, arm), **(load.server_env() if load else {})})
        if load is not None and not load.relative:
            load.spec(leg, capacity_rps=None, seed=args.seed)  # the client's spec must be valid too
    settings = _settings(args, pin=args.pin, **_server_settings(args, cmds), load=load)
    for name in ("CWIST_LATENCY_PROBE", "CWIST_LATENCY_PROBE_FILE"):
        if probe and any(name in arm.env for arm in arms):
            raise PlanError(f"--probe sets {name} for every run; leave it out of --a/--b")
    wrk = _tools(args.pin)
    legs = _live_legs(legs, arms, args.backend)  # last: a bad option is the only line

    def run(s: Settings, progress, into: list) -> list:
        if a_commit is None:
            return run_trials(legs, ABDesign(arms, s, os.environ), s, progress=progress, into=into)
        with refcode.checkout(REPO, a_commit) as tree:  # removed however the runs end
            code = {"A": str(tree / "reference"), "B": refcode.own_code()}
            design = ABDesign(arms, s, os.environ, code=code)
            return run_trials(legs, design, s, progress=progress, into=into)

    def finish(results, o: Outputs, partial: str | None = None) -> Printed:
        a_ref = None if a_commit is None else {"ref": args.a_ref, "commit": a_commit}
        job = JobResult(
            argv, profile.name, ab, arms, o.settings, results, o.provenance, o.started, o.finished, a_ref
        )
        job = replace(job, partial=partial)
        files, result_json, jsonl = _write(job, o, report.render)
        if o.settings.probe_dir:
            files.append(f"{o.settings.probe_dir}/ (every worker's latency probe file, per run)")
        document = {"schema": history.SCHEMA, **job.as_dict()}
        text, files = report.render(job, runs=False), [*files, *([jsonl] if jsonl else [])]
        return Printed(text, files, result=result_json, document=document, **gated(job, gate=args.gate))

    return Job(ab, profile.name, legs, 2, settings, wrk, run, finish, probe=probe)


def _plan_calibrate(args: argparse.Namespace, argv: list[str]) -> Job:
    """``calibrate K``: K rounds of an A/A leg and two injected slowdowns on every leg of the plan."""
    if not ownserver.given(args):  # the bench server reads the ambient CWIST_* knobs
        check_environment(os.environ)
    profile, arms, k = PROFILES[args.profile], AB_PRESETS["aa"], args.rounds
    cmds = ownserver.commands(args)  # None: the bench server
    overrides = _overrides(args, args.pin)
    legs = plan_legs(profile, arms, overrides) if cmds is None else ownserver.legs(profile, overrides)
    for leg in legs if cmds is None else ():
        arm_knobs(server_env(os.environ, leg, arms[0]))
    settings = _settings(args, pin=args.pin, **_server_settings(args, cmds))
    if cmds is not None:
        print(f"{PROG}: {ownserver.CALIBRATE_NOTE}", file=sys.stderr, flush=True)
    wrk = _tools(args.pin)
    legs = _live_legs(legs, arms, args.backend)  # last: a bad option is the only line

    def run(s: Settings, progress, into: list) -> list:
        return calibrate.run_calibration(legs, k, s, ambient=os.environ, progress=progress, into=into)

    def finish(results, o: Outputs, partial: str | None = None) -> Printed:
        table = calibrate.render_table(results, profile=profile.name, k=k, wrk=legs[0].wrk_args())
        measured = [r for c in results if c.result for r in c.result.measured()]
        polluted = sum("polluted" in r.flags for r in measured)
        head = [f"# Tail-latency job: `calibrate {k}`, profile `{profile.name}`", ""]
        text = "\n".join([*head, *report.partial_note(partial, calibrate.PARTIAL), ""]) + (
            f"- Command: `{history.command(argv)}`; started {o.started}, finished {o.finished}.\n"
            f"- {report.machine_line(o.provenance)}\n"
            f"- {polluted} of {report.plural(len(measured), 'measured run')} flagged `polluted` (other "
            f"processes used more than {o.settings.pollution_limit:.2f} cores).\n\n" + table
        )
        data = {
            "schema": history.SCHEMA,
            "argv": argv,
            "profile": profile.name,
            "k": k,
            "started_at": o.started,
            "finished_at": o.finished,
            "provenance": o.provenance,
            "settings": asdict(o.settings),
            "partial": partial,
            "legs": [c.as_dict() for c in results],
        }
        return Printed(
            text, outputs.write_files(o.results_dir, o.stem, {".md": text, ".json": outputs.dumps(data)})
        )

    return Job("calibrate", profile.name, calibrate.planned(legs, k), 2, settings, wrk, run, finish)


def _plan_peers(args: argparse.Namespace, argv: list[str]) -> Job:
    """``peers``: the bench server on each backend beside the peers, pinned unless ``--no-pin``."""
    check_environment(os.environ)  # the bench server reads the ambient CWIST_* knobs
    pin = not args.no_pin
    profile = PROFILES[args.profile]
    legs = peer_legs(profile, _overrides(args, pin))
    for backend in BACKENDS:  # ambient CWIST_* knobs reach the bench servers: they must parse
        arm_knobs({**os.environ, "CWIST_REACTOR_BACKEND": backend})
    settings = _settings(args, pin=pin, workers=1)
    missing = peers.uvloop_missing()
    if missing:
        raise Unavailable(missing)
    wrk = _tools(pin, "peers pins with taskset (util-linux), which is not on PATH; or use --no-pin")
    nginx = peers.find_nginx()
    ceiling_note = None if nginx else peers.NGINX_MISSING
    if ceiling_note:
        print(f"{PROG}: {ceiling_note}", file=sys.stderr, flush=True)
    servers = peers.servers(nginx=nginx)
    refused = _io_uring_refused()
    if refused:  # the comparison goes on without the bench server on io_uring, saying why
        servers = [server for server in servers if server.backend != "io_uring"]
        print(f"{PROG}: tailreactor (io_uring) skipped: {refused}", file=sys.stderr, flush=True)

    def run(s: Settings, progress, into: list) -> list:
        design = peersjob.PeersDesign(servers, s, os.environ, nginx)
        return run_trials(legs, design, s, progress=progress, into=into)

    def finish(results, o: Outputs, partial: str | None = None) -> Printed:
        o.provenance["packages"]["uvloop"] = history.package_version("uvloop")
        o.provenance["nginx"] = peers.nginx_version(nginx) if nginx else None
        job = peersjob.PeersJobResult(
            argv=argv,
            profile=profile.name,
            servers=servers,
            settings=o.settings,
            legs=results,
            provenance=o.provenance,
            started_at=o.started,
            finished_at=o.finished,
            ceiling_note=ceiling_note,
            partial=partial,
        )
        files, result_json, jsonl = _write(job, o, peersreport.render)
        if args.write_readme and not partial:  # the README's table is of a finished comparison
            files.append(
                peersreport.write_readme(
                    job, o.results_dir.parent / "README.md", result_file=f"results/{result_json.name}"
                )
            )
        return Printed(peersreport.render(job, runs=False), [*files, *([jsonl] if jsonl else [])])

    return Job("peers", profile.name, legs, len(servers), settings, wrk, run, finish)
