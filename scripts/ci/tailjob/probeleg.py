"""The ``--probe`` leg: the latency probe of every worker, gathered per run, summarised per arm.

Every run's server gets ``CWIST_LATENCY_PROBE=1`` and a ``CWIST_LATENCY_PROBE_FILE`` template of its
own (:func:`probe_env`); each worker writes a JSON file at a graceful stop.  :func:`gather` reads them
all (a missing one stops the job), merges them (``tailreactor.probe_files.merge``) and keeps the
figures CWIST PR #375 quoted (:data:`FIGURES`).  :func:`summarize` gives per arm and worker index the
median over the runs (``all``: of each run's merged figures), so a count is "per run", as CWIST's.
"""

from __future__ import annotations

from pathlib import Path

from tailreactor import probe_files as _probe

from .stats import median

#: File name template inside a run's directory (``{pid}``, ``{worker}`` filled by each worker).
PROBE_FILE = "probe-{pid}-{worker}.json"

#: (key, column label): the figures kept per worker, in report order.  Percentiles in us.
FIGURES: tuple[tuple[str, str], ...] = (
    ("tail_elevations", "tail_elevations"),
    ("over_5ms", "over 5 ms (arm)"),
    ("over_5ms_ready", "over 5 ms (ready)"),
    ("arm_p50_us", "queue_delay_arm p50 us"),
    ("arm_p99_us", "queue_delay_arm p99 us"),
    ("ready_p50_us", "queue_delay_ready p50 us"),
    ("ready_p99_us", "queue_delay_ready p99 us"),
    ("round_p50_us", "round_time p50 us"),
    ("round_p99_us", "round_time p99 us"),
    ("dispatched", "dispatched"),
)


class ProbeError(RuntimeError):
    """A run's probe files are missing or unreadable; the message is one line."""


def run_dir(base: Path, *, leg: int, trial: int, arm: str, warmup: bool) -> Path:
    """The directory of one run's probe files: ``<base>/leg<L>-t<trial>-<arm>`` (``warmup`` for it)."""
    return Path(base) / f"leg{leg}-{'warmup' if warmup else f't{trial + 1}'}-{arm}"


def probe_env(directory: Path) -> dict[str, str]:
    """The server variables that turn the probe on and write its files under ``directory``."""
    return {"CWIST_LATENCY_PROBE": "1", "CWIST_LATENCY_PROBE_FILE": str(Path(directory) / PROBE_FILE)}


def figures(doc: dict) -> dict:
    """The :data:`FIGURES` of one probe document (or a :func:`tailreactor.probe_files.merge` result)."""
    qa, qr = doc["histograms"]["queue_delay_arm"], doc["histograms"]["queue_delay_ready"]
    rt = doc["histograms"]["round_time"]
    c = doc["counters"]
    return {
        "pid": doc["pid"],
        "worker": doc["worker"],
        "backend": doc["backend"],
        "tail_elevations": c["tail_elevations"],
        "over_5ms": c["over_5ms"],
        "over_5ms_ready": c["over_5ms_ready"],
        "arm_p50_us": qa["p50"],
        "arm_p99_us": qa["p99"],
        "ready_p50_us": qr["p50"],
        "ready_p99_us": qr["p99"],
        "round_p50_us": rt["p50"],
        "round_p99_us": rt["p99"],
        "dispatched": c["dispatched"],
    }


def gather(template: str, *, workers: int) -> dict:
    """Read the files of workers ``0 .. workers-1`` for ``template``; merge them.

    Returns ``{template, files, workers: [figures per worker], all: figures of
    the merge}``.  Raises :class:`ProbeError` when a worker wrote no file, one
    wrote two, or a file is not a probe document.
    """
    try:
        docs = _probe.load_probe_files(template)
    except (OSError, ValueError) as e:
        raise ProbeError(f"cannot read a latency probe file: {e}") from None
    found = [d["worker"] for d in docs]
    missing = [w for w in range(workers) if w not in found]
    if missing:
        who = f"worker {missing[0]}" if len(missing) == 1 else f"workers {', '.join(map(str, missing))}"
        raise ProbeError(
            f"{who} wrote no latency probe file matching {template} (found "
            f"{len(docs)} of {workers}; a worker writes it only at a graceful stop)"
        )
    twice = sorted({w for w in found if found.count(w) > 1})
    if twice or len(docs) != workers:
        raise ProbeError(
            f"expected one latency probe file per worker 0..{workers - 1} matching "
            f"{template}, found workers {found}"
        )
    merged = _probe.merge(docs)
    return {
        "template": template,
        "files": [d["path"] for d in docs],
        "workers": [figures(d) for d in docs],
        "all": figures(merged),
    }


def summarize(runs: list) -> dict:
    """Per arm: ``{runs: n, rows: [{worker, <FIGURES>: median over runs}, ..., {worker: "all", ...}]}``.

    ``runs`` are :class:`tailjob.runner.RunRecord` s; warm-ups and runs
    without probe figures are left out.  Arms sorted by key.
    """
    by_arm: dict[str, list] = {}
    for r in runs:
        if not r.warmup and r.probe:
            by_arm.setdefault(r.arm, []).append(r.probe)
    out = {}
    for arm, probes in sorted(by_arm.items()):
        per_worker: dict[int, list[dict]] = {}
        for p in probes:
            for w in p["workers"]:
                per_worker.setdefault(w["worker"], []).append(w)
        groups: list[tuple[int | str, list[dict]]] = [(w, per_worker[w]) for w in sorted(per_worker)]
        groups.append(("all", [p["all"] for p in probes]))
        rows = [
            {"worker": w, "runs": len(fs), **{k: median([f[k] for f in fs]) for k, _ in FIGURES}}
            for w, fs in groups
        ]
        out[arm] = {"runs": len(probes), "rows": rows}
    return out
