"""Command line of the tail-latency job: :func:`main` (console script ``tailreactor-tail-latency``).

Parses the subcommand (:mod:`tailjob.options`), turns the namespace into the record its job takes
(:class:`~tailjob.plan.AbOptions`, :class:`~tailjob.instructions.CountPlan`, the grid) -- below this
module no function sees the parsed command line -- and runs it.  A live job is planned here
(:func:`_plan_ab`, :func:`_plan_calibrate`, :func:`_plan_peers` each return a :class:`Job`), run
with progress, written (report, plot, JSON, history line) and summed up; then the exit code.  A live
job stopped by a failed run or a signal writes the runs it finished, marked partial (:func:`_kept`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
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
    stepsummary,
    workloads,
)
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
from .progress import JobProgress
from .runner import ABDesign, JobError, JobResult, Settings, run_trials
from .wrk import wrk_version


class Terminated(SystemExit):
    """SIGTERM arrived: :func:`main` says so in one line and exits 128 + 15."""


def _exit_on_sigterm(signum, frame) -> None:
    """SIGTERM (a CI timeout, ``kill``) ends the job as Ctrl-C does, by an exception: the runner's
    ``finally`` stops the server and ``subprocess.run`` kills wrk (Python's default left them running).
    Once: a second SIGTERM while those stop ends the process at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated(128 + signum)


@dataclass
class Job:
    """A planned live job: ``legs`` (in run order; a leg not reached is named by its ``name``) and
    ``arms`` size the progress display; ``run(settings, progress, into)`` is the trial loop (``into``:
    the list that holds each leg's result as it runs); ``finish(results, Outputs, partial=None)``
    writes the files and returns a :class:`Printed` (``partial``: why the job stopped early: a failed
    or interrupted job writes the runs it finished)."""

    name: str  # the file stem's last part: the --ab name, "calibrate" or "peers"
    profile: str
    legs: list
    arms: int
    settings: Settings
    wrk: str
    run: Callable
    finish: Callable
    probe: bool = False  # every run writes probe files (under <out>/results/<stem>-probe/)


@dataclass(frozen=True)
class Outputs:
    """What every job's ``finish`` gets: the final settings, times, provenance and where to write."""

    settings: Settings
    started: str
    finished: str
    provenance: dict
    results_dir: Path
    stem: str


@dataclass(frozen=True)
class Printed:
    """What a job prints at the end: the report, the files' lines, the lines after them, ``--gate``'s
    one-line error (exit 1); an A/B's ``result`` JSON and the ``document`` it holds."""

    text: str
    files: list
    after: str | None = None
    failed: str | None = None
    result: Path | None = None
    document: dict | None = None


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
        lost = getattr(e, "not_kept", "")  # set by _run_live (and sim.cli): the runs kept, if any
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
    return _run_live(_plan_peers if args.command == "peers" else _plan_calibrate, args, argv)[0]


def _record(cls, args, **given):
    """The dataclass ``cls`` from the values of ``args`` named as its fields, and ``given``."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)} | given)


def run_ab(o: AbOptions, *, collect: dict | None = None) -> int:
    """The A/B ``o`` on its tier.  ``collect``: gets ``result`` (the path of the result JSON),
    ``document`` (what it holds) and ``legs`` (the legs' results)."""
    if o.tier == "sim":
        from .sim.cli import main_sim

        return main_sim(o, collect=collect)
    code, results = _run_live(_plan_ab, o, list(o.argv), collect=collect)
    if o.argv in ((), ("ab",)) and collect is None and results is not None:
        # the job as the README runs it: the sim tier's answer beside the live run
        from .sim.answer import beside_live

        return beside_live(o, results, code)
    return code


def _run_live(plan: Callable, options, argv: list[str], *, collect: dict | None = None):
    """Plan the live job (``plan(options, argv)``), run its trial loop, write its files and print the
    summary.  Returns (the exit code, the legs' results or None)."""
    try:
        if not ownserver.given(options):  # the bench server reads the ambient CWIST_* knobs
            check_environment(os.environ)
        job = plan(options, argv)
    except (Unavailable, FileNotFoundError) as e:  # a tool, a kernel feature, a program missing here
        return _error(str(e), 3), None
    except (PlanError, refcode.RefError) as e:
        return _error(str(e), 2), None
    started = history.now()
    stem = history.stem(started, job.profile, job.name)
    settings = job.settings
    if job.probe:
        settings = replace(settings, probe_dir=str(options.out / "results" / f"{stem}-probe"))
    progress = JobProgress(job.legs, warmup=settings.warmup, arms=job.arms)
    kept: list = []  # the legs' results, as they run
    base = Outputs(settings, started, "", {}, options.out / "results", stem)  # the rest when written
    try:
        with progress:
            results = job.run(settings, progress, kept)
    except (refcode.RefError, JobError, ValueError) as e:  # git, a server, a run failed
        return _error(f"{e}{_kept(job, kept, progress, base, 'stopped by a failed run', e)}", 3), None
    except (KeyboardInterrupt, Terminated) as e:  # main says so, with the runs kept
        if isinstance(e, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C would cut the files short
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated (SIGTERM)"
        e.not_kept = _kept(job, kept, progress, base, why)  # type: ignore[union-attr]
        raise
    printed = _written(job, base, results)
    if collect is not None:
        collect.update(legs=results, result=printed.result, document=printed.document)
    if printed.after:
        print(printed.after)
    return (_error(printed.failed, 1) if printed.failed else 0), results


def _written(job: Job, o: Outputs, results: list, partial: str | None = None) -> Printed:
    """Write the job's files (``job.finish``; ``partial``: as ``<stem>-partial``), show its report and
    files, and append the report to GitHub Actions' job summary; what ``finish`` printed."""
    o = replace(o, finished=history.now(), provenance=history.provenance(REPO, wrk_version=job.wrk))
    o.results_dir.mkdir(parents=True, exist_ok=True)
    if partial is None:
        printed = job.finish(results, o)
    else:
        printed = job.finish(results, replace(o, stem=f"{o.stem}-partial"), partial=partial)
    summary = stepsummary.append(printed.text, prog=PROG)  # GitHub Actions' job summary
    step = [f"{summary} (the verdicts appended: {stepsummary.VARIABLE})"] if summary else []
    history.show(printed.text, [*printed.files, *step])
    return printed


def _kept(job: Job, kept: list, progress: JobProgress, o: Outputs, why: str, error=None) -> str:
    """What a failed or interrupted live job kept, said after its one line: the runs it finished,
    written by its own writer (:func:`_written`) and marked partial, or that none were."""
    ran = [lr for lr in kept if lr.runs]  # a leg whose first run did not finish was not reached
    if not ran:
        return ""
    done = sum(len(lr.runs) for lr in ran)
    missed = [leg.name for leg in job.legs[len(ran) :]]
    printed = _written(job, o, ran, outputs.partial(why, done, progress.total, missed, error))
    return outputs.kept(done, progress.total, printed.files)


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
        return _ab_printed(replace(job, partial=partial), o, gate=args.gate)

    return Job(ab, profile.name, legs, 2, settings, wrk, run, finish, probe=probe)


def _ab_printed(job: JobResult, o: Outputs, *, gate: bool) -> Printed:
    """An A/B's files (:func:`_write`, the probe files' directory) and what it prints; ``gate``:
    a regression fails the job."""
    files, result_json, jsonl = _write(job, o, report.render)
    if o.settings.probe_dir:
        files.append(f"{o.settings.probe_dir}/ (every worker's latency probe file, per run)")
    code, lines = (0, []) if job.partial else report.gate(job)  # a partial job is not gated
    return Printed(
        report.render(job, runs=False),
        [*files, *([jsonl] if jsonl else [])],
        after="\n" + "\n".join(f"!!! {line}" for line in lines) if lines else None,
        failed="--gate: a metric regressed (see the verdicts above)" if gate and code else None,
        result=result_json,
        document={"schema": history.SCHEMA, **job.as_dict()},
    )


def _plan_calibrate(args: argparse.Namespace, argv: list[str]) -> Job:
    """``calibrate K``: K rounds of an A/A leg and two injected slowdowns on every leg of the plan."""
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
