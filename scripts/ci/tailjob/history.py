"""Provenance, the live job's JSON result, and the history lines of every job.

* :func:`provenance` -- where a job ran (commit, dirty flag, Python, kernel, CPU, wrk, packages);
* :func:`write_result` -- a live job (every run) as one JSON file under ``<out>/results/``;
* :func:`line` / :func:`append_history` -- one line per job, of one schema whatever the tier and kind
  (:data:`LINE_SCHEMA`), appended to the kind's file under ``<out>``; :func:`history_line` is an A/B's
  (either tier) or a ``peers`` job's, with :func:`verdicts` per leg and class;
* :func:`read_history` -- the lines back, old ones included.

Schema 1 lines may say ``neutral``, which mixed "no effect" with "cannot tell"; reading one, the
verdict is decided again by :func:`tailjob.stats.verdict` from the line's own ratio, CI and minimum
effect (``inconclusive`` without a CI), and the recorded word is kept as ``verdict_recorded``.
Schema 2 and 3 lines are returned as written.  ``<out>``: ``benchmarks/`` unless ``--out`` says
otherwise (benchmarks/README.md: which results are committed).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import tailjob

from . import stats
from .outputs import dumps, files_text, write_files

HISTORY_FILE = "tail-latency.jsonl"
PEERS_HISTORY_FILE = "peers.jsonl"
FLAGS = ("polluted", "socket-errors", "non-2xx")
"""The flags a history line counts per leg."""
SCHEMA = 2
"""The live job's result documents: 2, four verdicts (gain, regression, equivalent, inconclusive) with
detectable effect and pairs needed; 1: verdicts gain, regression, neutral."""
LINE_SCHEMA = 3
"""History lines: 3, one schema for every file -- ``tier`` (``wall``, ``sim``, ``both`` for
``validate``) and ``kind`` (``ab``, ``peers``, ``sweep``, ``validate``), verdicts per leg and class as
:func:`verdicts`; 2 and 1 as :data:`SCHEMA` (live lines only)."""


def _git(repo: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(package: str) -> str | None:
    """The installed version of ``package``, None if it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance(repo: Path, *, wrk_version: str) -> dict:
    """Facts about the code and machine a job ran on (values are strings, bools or ints).

    ``git_dirty`` looks at tracked files only: untracked results of earlier
    jobs do not make the code dirty.
    """
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": _git(repo, "rev-parse", "HEAD") or "unknown",
        "git_dirty": bool(status) if status is not None else None,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "kernel": platform.release(),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "wrk_version": wrk_version,
        "packages": {p: package_version(p) for p in ("tailreactor", "uring-api", "httptools")},
        "io_uring_disabled": _read_first_line("/proc/sys/kernel/io_uring_disabled"),
    }


def sim_provenance(repo: Path) -> dict:
    """:func:`provenance` less the machine's facts and wrk's: what a virtual-time job depends on."""
    pv = provenance(repo, wrk_version="-")
    return {k: pv[k] for k in ("git_commit", "git_dirty", "python", "kernel", "packages")}


def _read_first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return None


def command(argv) -> str:
    """The command a report or a rerun line names, quoted as a shell reads it: pasted back, it runs the
    same job -- in a checkout ``scripts/tail-latency.sh``, installed the console script
    (:data:`tailjob.COMMAND`)."""
    return " ".join([tailjob.COMMAND, shlex.join(argv)]).rstrip()


def now() -> str:
    """The time now as a job's ``started_at``/``finished_at``: ISO 8601, UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def stem(started_at: str, profile: str, ab: str) -> str:
    """``20261129T210501Z-quick-tail`` from an ISO start time, the profile and the ``--ab`` name."""
    started = datetime.fromisoformat(started_at).astimezone(timezone.utc)
    return f"{started:%Y%m%dT%H%M%SZ}-{profile}-{ab}"


def result_stem(job) -> str:
    """File name stem shared by a job's JSON, Markdown, SVG and PNG: ``20261129T210501Z-quick-tail``."""
    return stem(job.started_at, job.profile, job.ab)


def without_out(argv: list[str]) -> list[str]:
    """``argv`` less ``--out DIR``: where the files go is not part of the result."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            out.append(arg)
    return out


def write_result(job, results_dir: Path, stem: str) -> Path:
    """Write the whole job as ``<results_dir>/<stem>.json``; return the path."""
    [path] = write_files(results_dir, stem, {".json": dumps({"schema": SCHEMA, **job.as_dict()})})
    return path


def _flagged(lr) -> dict[str, int]:
    return {flag: sum(flag in r.flags for r in lr.measured()) for flag in FLAGS}


#: What a history line keeps of each comparison.
HISTORY_FIELDS = (
    "a",
    "b",
    "ratio",
    "ci",
    "n_pairs",
    "min_effect",
    "verdict",
    "detectable",
    "pairs_needed",
    "estimator",
    "samples_a",
    "samples_b",
    "needs_samples",
)


def verdicts(comparisons) -> dict:
    """``metrics`` (each comparison's figures and verdict) and ``verdict_counts`` of one table."""
    comparisons = list(comparisons)
    return {
        "metrics": {c.metric.key: stats.summary(c, HISTORY_FIELDS) for c in comparisons},
        "verdict_counts": stats.count_verdicts(c.verdict for c in comparisons),
    }


def _leg_shape(lr) -> dict:
    """A leg's name and size (threads, connections, duration, runs)."""
    leg = lr.leg
    return {
        "name": leg.name,
        "threads": leg.threads,
        "connections": leg.connections,
        "duration_s": leg.duration_s,
        "runs": leg.runs,
    }


def _ab_leg(lr) -> dict:
    """One A/B leg of the history line: its shape, arms' knobs, verdicts (whole run, classes)."""
    line = {
        "name": lr.leg.name,  # first: _leg_shape's name only repeats it
        "backend": lr.leg.backend,
        "backends": lr.backends(),
        **_leg_shape(lr),
        "knobs": lr.knobs,
        "env": lr.env,
        **verdicts(lr.comparisons),
        "classes": {name: verdicts(cs) for name, cs in lr.class_comparisons.items()},
        "flagged_runs": _flagged(lr),
    }
    if lr.probe:  # --probe: each arm's merged-worker medians (the "all" row)
        line["probe"] = {
            arm: next(r for r in v["rows"] if r["worker"] == "all") for arm, v in lr.probe.items()
        }
    return line


HEAD = ("started_at", "finished_at", "argv", "provenance")
"""What every history line takes from its job's header (beside ``tier``, ``kind`` and ``result``)."""


def line(kind: str, tier: str, head, *, result: str, **fields) -> dict:
    """The history line of any job (:data:`LINE_SCHEMA`): its ``tier`` and ``kind``, then from ``head``
    (a mapping) when it ran, its command and provenance (:data:`HEAD`), its ``result`` file, then
    ``fields`` (what the kind decided)."""
    when = {k: head[k] for k in HEAD}
    return {"schema": LINE_SCHEMA, "tier": tier, "kind": kind, **when, "result": result, **fields}


def history_line(job, *, result_file: str, tier: str = "wall") -> dict:
    """The history line (:func:`line`) of a job, an A/B's (on either ``tier``) or a ``peers`` job's."""
    s, peers = job.settings, job.ab == "peers"
    head = {k: getattr(job, k) for k in HEAD}
    pinning = {"pinned": s.pinned, "server_cpus": s.server_cpus, "wrk_cpus": s.wrk_cpus}
    if peers:
        legs = [
            {
                **_leg_shape(lr),
                "summary": lr.summary,
                "ratios": lr.ratios,
                "intervals": lr.intervals,
                "flagged_runs": _flagged(lr),
            }
            for lr in job.legs
        ]
        return line(
            "peers",
            "wall",
            head,
            result=result_file,
            profile=job.profile,
            servers=[p.key for p in job.servers],
            ceiling_note=job.ceiling_note,
            **pinning,
            seed=s.seed,
            warmup=s.warmup,
            legs=legs,
        )
    return line(
        "ab",
        tier,
        head,
        result=result_file,
        profile=job.profile,
        ab=job.ab,
        arms={a.key: {"label": a.label, "env": dict(a.env)} for a in job.arms},
        a_ref=job.a_ref,
        **pinning,
        workers=s.workers,
        seed=s.seed,
        warmup=s.warmup,
        probe=s.probe_dir is not None,
        pollution_limit=s.pollution_limit,
        legs=[_ab_leg(lr) for lr in job.legs],
        regression=any(v == "regression" for v in job.verdicts()),
    )


def show(text: str, files, jsonl: Path | None = None) -> None:
    """Print a job's report, then ``Files:`` and a line per file it wrote (its history file last)."""
    print(text)
    print(files_text(files, appended=jsonl))


def append_history(line: dict, out_dir: Path, *, name: str = HISTORY_FILE) -> Path:
    """Append ``line`` as one JSON line to ``<out_dir>/<name>`` (``tail-latency.jsonl``); return the path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    with open(path, "a") as f:
        f.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path


def upgrade_line(line: dict) -> dict:
    """A history line in the current vocabulary: schema 1's ``neutral`` decided again (module docstring)."""
    if line.get("schema", 1) >= 2:
        return line
    for leg in line.get("legs", []):
        for key, m in leg.get("metrics", {}).items():
            if m.get("verdict") != "neutral":
                continue
            m["verdict_recorded"] = "neutral"
            ci, ratio = m.get("ci"), m.get("ratio")
            if ci is None or ratio is None:
                m["verdict"] = stats.INCONCLUSIVE
                continue
            try:
                better_up = stats.metric(key).higher_is_better
            except KeyError:
                better_up = False
            m["verdict"] = stats.verdict(
                ratio, tuple(ci), min_effect=m["min_effect"], higher_is_better=better_up
            ).verdict
            m["detectable"] = stats.detectable_effect(ci)
        leg["verdict_counts"] = stats.count_verdicts(
            m.get("verdict") for m in leg.get("metrics", {}).values()
        )
    return line


def read_history(path: Path) -> list[dict]:
    """Every line of a history file, upgraded by :func:`upgrade_line`.

    Raises ``ValueError`` naming the file and line number of a line that is
    not JSON.
    """
    lines = []
    with open(path) as f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                lines.append(upgrade_line(json.loads(text)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {number} is not JSON ({e})") from None
    return lines
