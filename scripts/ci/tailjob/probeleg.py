"""The ``--probe`` leg: every worker's latency probe gathered per run, summarised per arm.

Every run's server writes one probe file per worker at a graceful stop (:func:`probe_env`);
:func:`gather` reads and merges them (a missing one stops the job) and keeps the figures CWIST PR
#375 quoted (:data:`FIGURES`); :func:`summarize` gives per arm and worker the median over the runs.
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


_HISTOGRAMS = {"arm": "queue_delay_arm", "ready": "queue_delay_ready", "round": "round_time"}


def figures(doc: dict) -> dict:
    """The :data:`FIGURES` of one probe document (or a :func:`tailreactor.probe_files.merge` result):
    ``<h>_p<N>_us`` is percentile N of histogram ``<h>``, anything else a counter."""

    def value(key: str):
        h, _, p = key.partition("_p")
        return doc["histograms"][_HISTOGRAMS[h]][f"p{p[:-3]}"] if h in _HISTOGRAMS else doc["counters"][key]

    return {"pid": doc["pid"], "worker": doc["worker"], "backend": doc["backend"]} | {
        k: value(k) for k, _ in FIGURES
    }


def gather(template: str, *, workers: int) -> dict:
    """``{template, files, workers: [figures per worker], all: figures of the merge}`` of the files of
    workers ``0 .. workers-1``; :class:`ProbeError` when a worker wrote none or two, or one is unreadable."""
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
    """Per arm (sorted): ``{runs: n, rows: [{worker, <FIGURES>: median over runs}, ..., {worker: "all"}]}``
    of the measured runs with probe figures."""
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
