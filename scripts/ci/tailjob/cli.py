"""Command line of the tail-latency job (``scripts/ci/tail_latency.py``).

Role
----
Parse options, plan the legs, check the tools, run the job with progress,
then write the report (Markdown), the plot (SVG, PNG), the per-job JSON and
the history line, print the summary, and exit:

* 0 -- done (any verdicts), or no regression with ``--gate`` (an
  ``inconclusive`` metric is printed prominently at the end, and exits 0);
* 1 -- ``--gate`` and some metric is a ``regression``;
* 2 -- bad options or environment (one-line error naming what failed);
* 3 -- a run failed (server or wrk), so the job has no result.

With no arguments: the quick profile, ``--ab tail``, on io_uring then epoll.

``--peers`` switches to the comparison of issue 9 instead of an A/B: the
bench server on each backend beside the asyncio, uvloop and nginx peers
(:mod:`tailjob.peers`, :mod:`tailjob.peersjob`), pinned by default; it writes
``<out>/results/<stem>-peers.*`` and ``<out>/peers.jsonl``, and with
``--write-readme`` the table in ``<out>/README.md``.

``--calibrate K`` runs K rounds of an A/A leg and two legs with an injected
slowdown on every leg of the plan (:mod:`tailjob.calibrate`) and writes
``<out>/results/<stem>-calibrate.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
from dataclasses import asdict, replace
from datetime import datetime, timezone
from typing import Mapping

from tailreactor import config as _config

from . import calibrate, history, openloop, peers, peersjob, peersreport, plot, report, workloads
from .plan import AB_PRESETS, BACKENDS, PROFILES, Overrides, PlanError, arm_knobs, arms_for, \
    peer_legs, plan_legs, server_env
from .progress import JobProgress
from .options import PROG, REPO, build_parser
from .runner import JobError, JobResult, Settings, run_job
from .wrk import wrk_version

__all__ = ["main", "build_parser"]


def _cpu_list(text: str, option: str) -> str:
    allowed = os.sched_getaffinity(0)
    try:
        cpus = {int(x) for part in text.split(",") for x in
                (range(int(part.split("-")[0]), int(part.split("-")[1]) + 1) if "-" in part else [part])}
    except ValueError:
        raise PlanError(f"{option} {text!r}: accepted a CPU list like 0 or 0,2 or 0-1") from None
    if not cpus <= allowed:
        raise PlanError(f"{option} {text!r}: CPUs {sorted(cpus - allowed)} are not available "
                        f"(available: {sorted(allowed)})")
    return text


def _error(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def _ab_settings(args: argparse.Namespace, load=None) -> Settings:
    """The run settings of an A/B or a calibration from its options (PlanError for a bad CPU list)."""
    return Settings(seed=args.seed, warmup=not args.no_warmup, workers=args.workers,
                    server_cpus=_cpu_list(args.server_cpus, "--server-cpus") if args.pin else None,
                    wrk_cpus=_cpu_list(args.wrk_cpus, "--wrk-cpus") if args.pin else None,
                    pollution_limit=args.pollution_limit, min_effect=args.min_effect, load=load)


def _io_uring_refused() -> str | None:
    """None if this machine can set up an io_uring ring, else the reason (one line naming the errno)."""
    from tailreactor.backends import IoUringBackend, IoUringUnavailable
    try:
        IoUringBackend().close()
    except IoUringUnavailable as exc:
        return str(exc)
    return None


def _without_refused_io_uring(legs: list, arms, asked: str | None) -> list:
    """``legs`` less those on io_uring where the kernel refuses it (Docker's default seccomp profile).

    Unasked (each backend in turn, the default), the io_uring legs are skipped with one line naming
    the reason; asked for (``--backend io_uring``, or an arm that sets it), it is a
    :class:`PlanError`: a measurement of io_uring cannot quietly become one of epoll.
    """
    on_io_uring = [leg for leg in legs if any(leg.backend_for(arm.key) == "io_uring" for arm in arms)]
    if not on_io_uring:
        return legs
    refused = _io_uring_refused()
    if refused is None:
        return legs
    if asked == "io_uring" or any(leg.backend is None for leg in on_io_uring):
        raise PlanError(f"io_uring asked for but unavailable here: {refused}")
    print(f"{PROG}: io_uring skipped: {refused}; measuring epoll only", file=sys.stderr, flush=True)
    return [replace(leg, index=i) for i, leg in enumerate(l for l in legs if l not in on_io_uring)]


def _check_mode(args: argparse.Namespace) -> None:
    """Options that belong to the other mode (A/B or --peers) are refused with one line."""
    if args.calibrate is not None:
        if args.peers:
            raise PlanError("--calibrate and --peers are different jobs: choose one")
        if args.ab or args.a is not None or args.b is not None:
            raise PlanError("--calibrate chooses its own arms (A/A and injected slowdowns): leave out --ab/--a/--b")
        for flag, name in ((args.gate, "--gate"), (args.probe, "--probe")):
            if flag:
                raise PlanError(f"{name} applies to an A/B, not to --calibrate")
    if not args.peers:
        for flag, name in ((args.write_readme, "--write-readme"), (args.no_pin, "--no-pin")):
            if flag:
                raise PlanError(f"{name} needs --peers")
        return
    if args.ab:
        raise PlanError("--peers compares servers, not arms: leave out --ab")
    for given, name in ((args.workload != "uniform", "--workload"), (args.load, "--load"),
                        (args.rate, "--rate"), (args.schedule, "--schedule")):
        if given:
            raise PlanError(f"{name} applies to the A/B job; --peers runs wrk's uniform closed loop")
    if args.a is not None or args.b is not None:
        raise PlanError("--peers compares servers, not arms: leave out --a/--b")
    if args.backend:
        raise PlanError("--peers runs the bench server on every backend: leave out --backend")
    if args.workers:
        raise PlanError("--peers compares single-process servers: leave out --workers")
    for flag, name in ((args.probe, "--probe"), (args.gate, "--gate"), (args.min_effect is not None,
                                                                       "--min-effect")):
        if flag:
            raise PlanError(f"{name} applies to the A/B job, not to --peers")
    if args.pin and args.no_pin:
        raise PlanError("--pin and --no-pin contradict each other")


def _check_environment(environ: Mapping[str, str]) -> None:
    """Every ``CWIST_*`` knob in this process's environment must parse, even where an arm or the
    leg overrides it: an ignored typo would make the run look configured when it is not.
    Unknown ``CWIST_*`` names are left alone (the reference ignores them too)."""
    try:
        _config.load(environ)
    except _config.ConfigError as e:
        raise PlanError(f"environment: {e}") from None


def _exit_on_sigterm(signum, frame) -> None:
    """SIGTERM (a CI timeout, ``kill``) ends the job like Ctrl-C does: by an exception.

    Python's default for SIGTERM kills the process without running ``finally``
    blocks, which left the bench server and wrk of the current run running.
    As an exception, the runner's ``finally`` stops the server and
    ``subprocess.run`` kills wrk.
    """
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():  # signal.signal works only there
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.tier == "sim":
        from .sim.cli import main_sim
        return main_sim(args, argv)
    for given, name in ((args.sim_cost, "--sim-cost"), (args.a_ref, "--a-ref")):
        if given is not None:
            return _error(f"{name} applies to --tier sim", 2)
    try:
        _check_mode(args)
        _check_environment(os.environ)
    except PlanError as e:
        return _error(str(e), 2)
    if args.peers:
        return main_peers(args, argv)
    if args.calibrate is not None:
        return main_calibrate(args, argv)
    try:
        if args.ab and (args.a is not None or args.b is not None):
            raise PlanError("--ab cannot be combined with --a/--b")
        custom = args.a is not None or args.b is not None
        ab = "custom" if custom else (args.ab or "tail")
        arms = arms_for(None if custom else ab, a=args.a, b=args.b)
        profile = PROFILES[args.profile]
        overrides = Overrides(backend=args.backend, threads=args.threads, connections=args.connections,
                              duration_s=args.duration, runs=args.runs, pin=args.pin)
        legs = plan_legs(profile, arms, overrides)
        load = openloop.plan_load(args.workload, args.load, args.rate, args.schedule)
        if load is not None and args.probe is False and args.workload != "uniform":
            args.probe = True  # the per-class figures come with the probe's, which cannot tell classes apart
        for leg in legs:  # every arm's whole environment must parse before anything runs
            for arm in arms:
                arm_knobs({**server_env(os.environ, leg, arm), **(load.server_env() if load else {})})
            if load is not None and not load.relative:
                load.spec(leg, capacity_rps=None, seed=args.seed)  # the client's spec must be valid too
        settings = _ab_settings(args, load=load)
        for name in ("CWIST_LATENCY_PROBE", "CWIST_LATENCY_PROBE_FILE"):
            if args.probe and any(name in arm.env for arm in arms):
                raise PlanError(f"--probe sets {name} for every run; leave it out of --a/--b")
        if args.pin and not shutil.which("taskset"):
            raise PlanError("--pin needs taskset (util-linux), which is not on PATH")
        wrk = wrk_version()
        legs = _without_refused_io_uring(legs, arms, args.backend)  # last: a bad option is the only line
    except (PlanError, FileNotFoundError) as e:
        return _error(str(e), 2)

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = args.out
    stem = history.stem(started, profile.name, ab)
    results_dir = out / "results"
    if args.probe:
        settings = replace(settings, probe_dir=str(results_dir / f"{stem}-probe"))
    try:
        with JobProgress(legs, warmup=settings.warmup) as progress:
            results = run_job(legs, arms, settings, ambient=os.environ, progress=progress)
    except JobError as e:
        return _error(str(e), 3)
    job = JobResult(argv=argv, profile=profile.name, ab=ab, arms=arms, settings=settings, legs=results,
                    provenance=history.provenance(REPO, wrk_version=wrk), started_at=started,
                    finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))

    results_dir.mkdir(parents=True, exist_ok=True)
    md = results_dir / f"{stem}.md"
    md.write_text(report.render(job, runs=True))
    images = plot.plot_job(job, results_dir / stem)
    result_json = history.write_result(job, results_dir, stem)
    jsonl = history.append_history(history.history_line(job, result_file=f"results/{result_json.name}"), out)

    print(report.render(job, runs=False))
    print("Files:")
    for path in (md, *images, result_json):
        print(f"- {path}")
    if settings.probe_dir:
        print(f"- {settings.probe_dir}/ (every worker's latency probe file, per run)")
    print(f"- {jsonl} (one line appended)")
    code, lines = report.gate(job)
    if lines:
        print("\n" + "\n".join(f"!!! {line}" for line in lines))
    if args.gate and code:
        return _error("--gate: a metric regressed (see the verdicts above)", 1)
    return 0


def main_calibrate(args: argparse.Namespace, argv: list[str]) -> int:
    """``--calibrate K``: plan, run K rounds per leg, write and print the table (exit codes as main)."""
    try:
        profile = PROFILES[args.profile]
        overrides = Overrides(backend=args.backend, threads=args.threads, connections=args.connections,
                              duration_s=args.duration, runs=args.runs, pin=args.pin)
        arms = AB_PRESETS["aa"]
        legs = plan_legs(profile, arms, overrides)
        for leg in legs:
            arm_knobs(server_env(os.environ, leg, arms[0]))
        settings = _ab_settings(args)
        if args.pin and not shutil.which("taskset"):
            raise PlanError("--pin needs taskset (util-linux), which is not on PATH")
        wrk = wrk_version()
        legs = _without_refused_io_uring(legs, arms, args.backend)  # last: a bad option is the only line
    except (PlanError, FileNotFoundError) as e:
        return _error(str(e), 2)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    k = args.calibrate
    try:
        with JobProgress(legs * (k * len(calibrate.KINDS)), warmup=settings.warmup) as progress:
            results = calibrate.run_calibration(legs, k, settings, ambient=os.environ, progress=progress)
    except (JobError, ValueError) as e:
        return _error(str(e), 3)
    provenance = history.provenance(REPO, wrk_version=wrk)
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    table = calibrate.render_table(results, profile=profile.name, k=k, wrk=legs[0].wrk_args())
    measured = [r for c in results if c.result for r in c.result.measured()]
    polluted = sum("polluted" in r.flags for r in measured)
    text = (f"# Tail-latency job: `--calibrate {k}`, profile `{profile.name}`\n\n"
            f"- Command: `scripts/tail-latency.sh {' '.join(argv)}`; started {started}, finished {finished}.\n"
            f"- {report.machine_line(provenance)}\n"
            f"- {polluted} of {plural_runs(len(measured))} flagged `polluted` (other processes used more "
            f"than {settings.pollution_limit:.2f} cores).\n\n" + table)
    out = args.out
    stem = history.stem(started, profile.name, "calibrate")
    results_dir = out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    md = results_dir / f"{stem}.md"
    md.write_text(text)
    data = {"schema": history.SCHEMA, "argv": argv, "profile": profile.name, "k": k, "started_at": started,
            "finished_at": finished, "provenance": provenance, "settings": asdict(settings),
            "legs": [c.as_dict() for c in results]}
    js = results_dir / f"{stem}.json"
    js.write_text(json.dumps(data, indent=1) + "\n")
    print(text)
    print("Files:")
    for path in (md, js):
        print(f"- {path}")
    return 0


def plural_runs(n: int) -> str:
    return report.plural(n, "measured run")


def main_peers(args: argparse.Namespace, argv: list[str]) -> int:
    """``--peers``: plan, check the tools, run every server, write the outputs (exit codes as main)."""
    pin = not args.no_pin
    try:
        profile = PROFILES[args.profile]
        legs = peer_legs(profile, Overrides(threads=args.threads, connections=args.connections,
                                            duration_s=args.duration, runs=args.runs, pin=pin))
        for backend in BACKENDS:  # ambient CWIST_* knobs reach the bench servers: they must parse
            arm_knobs({**os.environ, "CWIST_REACTOR_BACKEND": backend})
        settings = peersjob.peers_settings(
            seed=args.seed, warmup=not args.no_warmup, pin=pin,
            server_cpus=_cpu_list(args.server_cpus, "--server-cpus") if pin else "0",
            wrk_cpus=_cpu_list(args.wrk_cpus, "--wrk-cpus") if pin else "1",
            pollution_limit=args.pollution_limit)
        if pin and not shutil.which("taskset"):
            raise PlanError("--peers pins with taskset (util-linux), which is not on PATH; or use --no-pin")
        missing = peers.uvloop_missing()
        if missing:
            raise PlanError(missing)
        wrk = wrk_version()
    except (PlanError, FileNotFoundError) as e:
        return _error(str(e), 2)
    nginx = peers.find_nginx()
    ceiling_note = None if nginx else peers.NGINX_MISSING
    if ceiling_note:
        print(f"{PROG}: {ceiling_note}", file=sys.stderr, flush=True)
    servers = peers.servers(nginx=nginx)
    refused = _io_uring_refused()
    if refused:  # the comparison goes on without the bench server on io_uring, saying why
        servers = [server for server in servers if server.backend != "io_uring"]
        print(f"{PROG}: tailreactor (io_uring) skipped: {refused}", file=sys.stderr, flush=True)

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        with JobProgress(legs, warmup=settings.warmup, arms=len(servers)) as progress:
            results = peersjob.run_peers(legs, servers, settings, ambient=os.environ, nginx=nginx,
                                         progress=progress)
    except JobError as e:
        return _error(str(e), 3)
    provenance = history.provenance(REPO, wrk_version=wrk)
    provenance["packages"]["uvloop"] = history.package_version("uvloop")
    provenance["nginx"] = peers.nginx_version(nginx) if nginx else None
    job = peersjob.PeersJobResult(argv=argv, profile=profile.name, servers=servers, settings=settings,
                                  legs=results, provenance=provenance, started_at=started,
                                  finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  ceiling_note=ceiling_note)

    out = args.out
    stem = history.stem(started, profile.name, "peers")
    results_dir = out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    md = results_dir / f"{stem}.md"
    md.write_text(peersreport.render(job, runs=True))
    images = plot.plot_job(job, results_dir / stem)
    result_json = history.write_result(job, results_dir, stem)
    jsonl = history.append_history(peersjob.history_line(job, result_file=f"results/{result_json.name}"),
                                   out, name=peersjob.HISTORY_FILE)
    files = [md, *images, result_json]
    if args.write_readme:
        files.append(peersreport.write_readme(job, out / "README.md",
                                              result_file=f"results/{result_json.name}"))

    print(peersreport.render(job, runs=False))
    print("Files:")
    for path in files:
        print(f"- {path}")
    print(f"- {jsonl} (one line appended)")
    return 0
