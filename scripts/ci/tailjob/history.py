"""Provenance, the per-job JSON result, and the JSONL history line.

Role
----
* :func:`provenance` -- where a job ran: git commit and dirty flag, Python,
  kernel, CPU model and count, wrk version, package versions;
* :func:`write_result` -- the whole job (every run) as one JSON file under
  ``<out>/results/``;
* :func:`history_line` / :func:`append_history` -- one compact line per job
  appended to ``<out>/tail-latency.jsonl``: provenance, profile, pinning,
  every knob's value per arm and leg, the medians, ratios, CIs and verdicts.

``<out>`` is ``benchmarks/`` unless ``--out`` says otherwise; see
benchmarks/README.md for which results are committed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from .runner import JobResult

__all__ = ["provenance", "package_version", "stem", "result_stem", "write_result", "history_line",
           "append_history",
           "HISTORY_FILE", "SCHEMA"]

HISTORY_FILE = "tail-latency.jsonl"
SCHEMA = 1


def _git(repo: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
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


def _read_first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return None


def stem(started_at: str, profile: str, ab: str) -> str:
    """``20261129T210501Z-quick-tail`` from an ISO start time, the profile and the ``--ab`` name."""
    started = datetime.fromisoformat(started_at).astimezone(timezone.utc)
    return f"{started:%Y%m%dT%H%M%SZ}-{profile}-{ab}"


def result_stem(job: JobResult) -> str:
    """File name stem shared by a job's JSON, Markdown, SVG and PNG: ``20261129T210501Z-quick-tail``."""
    return stem(job.started_at, job.profile, job.ab)


def write_result(job: JobResult, results_dir: Path, stem: str) -> Path:
    """Write the whole job as ``<results_dir>/<stem>.json``; return the path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{stem}.json"
    path.write_text(json.dumps({"schema": SCHEMA, **job.as_dict()}, indent=1) + "\n")
    return path


def history_line(job: JobResult, *, result_file: str) -> dict:
    """The compact history record of a job (one JSON object)."""
    s = job.settings
    legs = []
    for lr in job.legs:
        measured = lr.measured()
        legs.append({
            "name": lr.leg.name, "backend": lr.leg.backend, "backends": lr.backends(),
            "threads": lr.leg.threads,
            "connections": lr.leg.connections, "duration_s": lr.leg.duration_s, "runs": lr.leg.runs,
            "knobs": lr.knobs, "env": lr.env,
            "metrics": {c.metric.key: {"a": c.median_a, "b": c.median_b, "ratio": c.ratio,
                                       "ci": list(c.ci) if c.ci else None, "n_pairs": c.n_pairs,
                                       "min_effect": c.min_effect, "verdict": c.verdict}
                        for c in lr.comparisons},
            "flagged_runs": {flag: sum(flag in r.flags for r in measured)
                             for flag in ("polluted", "socket-errors", "non-2xx")},
        })
        if lr.probe:  # --probe: each arm's merged-worker medians (the "all" row)
            legs[-1]["probe"] = {arm: next(r for r in v["rows"] if r["worker"] == "all")
                                 for arm, v in lr.probe.items()}
    return {
        "schema": SCHEMA, "started_at": job.started_at, "finished_at": job.finished_at,
        "result": result_file, "profile": job.profile, "ab": job.ab, "argv": job.argv,
        "arms": {a.key: {"label": a.label, "env": dict(a.env)} for a in job.arms},
        "pinned": s.pinned, "server_cpus": s.server_cpus, "wrk_cpus": s.wrk_cpus,
        "workers": s.workers, "seed": s.seed, "warmup": s.warmup, "probe": s.probe_dir is not None,
        "pollution_limit": s.pollution_limit, "provenance": job.provenance, "legs": legs,
        "regression": any(v == "regression" for v in job.verdicts()),
    }


def append_history(line: dict, out_dir: Path, *, name: str = HISTORY_FILE) -> Path:
    """Append ``line`` as one JSON line to ``<out_dir>/<name>`` (``tail-latency.jsonl``); return the path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    with open(path, "a") as f:
        f.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path
