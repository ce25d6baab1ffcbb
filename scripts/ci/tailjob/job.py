"""The one path of an A/B (either tier), a calibration and a peers job: :func:`run_planned` runs the
:class:`Job` a planner returns (``cli._plan_ab``, ``_plan_calibrate``, ``_plan_peers``, ``sim.cli.plan_ab``);
what a tier changes on it is data, the Job's :class:`Tier`."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import PROG, REPO, fail, history, outputs, refcode, report, stepsummary
from .measure import JobError, Settings
from .plan import PlanError, Unavailable
from .progress import JobProgress
from .sim.costs import CostError


class Terminated(SystemExit):
    """SIGTERM arrived: ``cli.main`` says so in one line and exits 128 + 15."""


@dataclass(frozen=True)
class Tier:
    """What a tier changes on the one path (the defaults: the wall tier's)."""

    failed: tuple = (refcode.RefError, JobError, ValueError)  # a run failed (git, a server): exit 3
    says: str = ""  # what that one line begins with
    suffix: str = ""  # the end of the files' stem
    gate: str = ""  # what --gate's lines add to their first word
    provenance: Callable[[str], dict] = lambda wrk: history.provenance(REPO, wrk_version=wrk)
    progress: Callable = JobProgress  # (legs, warmup=, arms=) -> the trial loop's progress display


@dataclass
class Job:
    """A planned job: ``legs`` (in run order; a leg not reached is named by its ``name``) and ``arms``
    size the progress; ``run(settings, progress, into)`` is the trial loop (``into``: the list that
    holds each leg's result as it runs); ``finish(results, Outputs, partial=None)`` writes the files
    and returns a :class:`Printed` (``partial``: why the job stopped early: a failed or interrupted
    job writes the runs it finished, as ``<stem>-partial``)."""

    name: str  # the file stem's last part: the --ab name, "calibrate" or "peers"
    profile: str
    legs: list
    arms: int
    settings: Settings
    wrk: str
    run: Callable
    finish: Callable
    probe: bool = False  # every run writes probe files (under <out>/results/<stem>-probe/)
    tier: Tier = field(default_factory=Tier)


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


def gated(job, *, gate: bool, words: str = "") -> dict:
    """An A/B's gate lines (``after``) and ``--gate``'s error (``failed``) for its :class:`Printed`
    (``words``: its tier's, :attr:`Tier.gate`); a partial job is not gated."""
    code, lines = (0, []) if job.partial else report.gate(job, tier=words)
    return dict(
        after="\n" + "\n".join(f"!!! {line}" for line in lines) if lines else None,
        failed=f"--gate: a metric regressed{words} (see the verdicts above)" if gate and code else None,
    )


def run_planned(plan: Callable, options, argv: list[str], *, collect: dict | None = None):
    """Plan the job (``plan(options, argv)``: it checks the environment too), run its trial loop with
    progress, write its files, print the summary.  Returns (the exit code, the legs' results or None).
    ``collect``: gets ``result`` (the result JSON's path), ``document`` (its data), ``legs``."""
    try:
        job = plan(options, argv)
    except (Unavailable, FileNotFoundError) as e:  # a tool, a kernel feature, a program missing here
        return fail(str(e), 3), None
    except (PlanError, CostError, refcode.RefError) as e:  # a bad option, --sim-cost, --a-ref
        return fail(str(e), 2), None
    started, settings, tier = history.now(), job.settings, job.tier
    stem = history.stem(started, job.profile, job.name) + tier.suffix
    if job.probe:
        settings = replace(settings, probe_dir=str(options.out / "results" / f"{stem}-probe"))
    progress = tier.progress(job.legs, warmup=settings.warmup, arms=job.arms)
    total = sum(job.arms * leg.runs + settings.warmup for leg in job.legs)
    kept: list = []  # the legs' results, as they run
    base = Outputs(settings, started, "", {}, options.out / "results", stem)  # the rest when written
    try:
        with progress as shown:
            results = job.run(settings, shown, kept)
    except tier.failed as e:
        return fail(f"{tier.says}{e}{_kept(job, kept, total, base, 'stopped by a failed run', e)}", 3), None
    except (KeyboardInterrupt, Terminated) as e:  # cli.main says so, with the runs kept
        if isinstance(e, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C would cut the files short
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated (SIGTERM)"
        e.not_kept = _kept(job, kept, total, base, why)  # type: ignore[union-attr]
        raise
    printed = _written(job, base, results)
    if collect is not None:
        collect.update(legs=results, result=printed.result, document=printed.document)
    if printed.after:
        print(printed.after)
    return (fail(printed.failed, 1) if printed.failed else 0), results


def _written(job: Job, o: Outputs, results: list, partial: str | None = None) -> Printed:
    """Write the job's files (``job.finish``; ``partial``: as ``<stem>-partial``), show its report and
    files, and append the report to GitHub Actions' job summary; what ``finish`` printed."""
    o = replace(o, finished=history.now(), provenance=job.tier.provenance(job.wrk))
    o.results_dir.mkdir(parents=True, exist_ok=True)
    if partial is not None:  # a job stopped early: its files are <stem>-partial
        o = replace(o, stem=f"{o.stem}-partial")
    printed = job.finish(results, o, partial=partial)
    summary = stepsummary.append(printed.text, prog=PROG)  # GitHub Actions' job summary
    step = [f"{summary} (the verdicts appended: {stepsummary.VARIABLE})"] if summary else []
    history.show(printed.text, [*printed.files, *step])
    return printed


def _kept(job: Job, kept: list, total: int, o: Outputs, why: str, error=None) -> str:
    """What a failed or interrupted job kept, said after its one line: the runs it finished, written
    by its own writer (:func:`_written`) and marked partial, or that none were."""
    ran = [lr for lr in kept if lr.runs]  # a leg whose first run did not finish was not reached
    if not ran:
        return ""
    done = sum(len(lr.runs) for lr in ran)
    missed = [leg.name for leg in job.legs[len(ran) :]]
    printed = _written(job, o, ran, outputs.partial(why, done, total, missed, error))
    return outputs.kept(done, total, printed.files)
