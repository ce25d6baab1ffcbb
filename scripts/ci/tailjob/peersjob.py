"""Run a ``--peers`` comparison: every server, interleaved, per leg; medians and ratios.

Role
----
:func:`run_peers` runs each leg (one wrk connection count) as trials: a trial
runs every server once, in an order drawn at random
(:func:`tailjob.plan.shuffled_schedule`), each run on a freshly started
server (:func:`tailjob.runner.measure_server`: the same CPU accounting, wrk
script and failure rules as the A/B job).  An optional warm-up run (the
first server of the first trial) is discarded.

Per leg it then gives, per server, the median over its measured runs of
:data:`PEER_METRICS` (:func:`summarize`) and, per server and reference peer
(asyncio, uvloop, nginx when present), the ratio of those medians
(:func:`ratios`): server / peer, so a CPU ratio below 1 means the server
spends less CPU per request than that peer.  There is no verdict, but the
CPU ratios come with a 95 % percentile-bootstrap interval over the trials
(:func:`ratio_intervals`; each trial runs every server once, so runs pair by
trial as in an A/B): on a shared 2-core machine the medians of two sessions
can differ by 20 %, and the interval says how far one session's ratio can be
trusted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

from .peers import REFERENCES, Peer, make_server
from .plan import Leg, shuffled_schedule
from .runner import JobError, RunRecord, Settings, measure_server
from .server import ServerProcess
from .stats import MIN_PAIRS, bootstrap_ratio_ci, median

__all__ = ["PEER_METRICS", "PeersLegResult", "PeersJobResult", "peers_settings", "run_peers",
           "summarize", "ratios", "ratio_intervals", "history_line", "HISTORY_FILE", "INTERVAL_METRIC"]

#: The compared figures (keys of RunRecord.metrics): req/s, server CPU us/request, latencies in us.
PEER_METRICS = ("rps", "cpu_us_per_req", "p50", "p99", "p99.9")
HISTORY_FILE = "peers.jsonl"
#: The metric whose ratios get an interval: issue 9's target, server CPU per request.
INTERVAL_METRIC = "cpu_us_per_req"


def peers_settings(*, seed: int = 1, warmup: bool = True, pin: bool = True, server_cpus: str = "0",
                   wrk_cpus: str = "1", pollution_limit: float = 0.10) -> Settings:
    """Settings of a peers job: pinned by default (server on CPU 0, wrk on CPU 1), one bench worker."""
    return Settings(seed=seed, warmup=warmup, workers=1, server_cpus=server_cpus if pin else None,
                    wrk_cpus=wrk_cpus if pin else None, pollution_limit=pollution_limit)


@dataclass
class PeersLegResult:
    """A leg's runs (warm-up included, marked), per-server medians and ratios."""

    leg: Leg
    servers: list[str]
    schedule: list[list[str]]
    runs: list[RunRecord]
    summary: dict = field(default_factory=dict)   # server -> {runs, <metric>: median | None}
    ratios: dict = field(default_factory=dict)    # server -> reference -> metric -> ratio | None
    intervals: dict = field(default_factory=dict)  # server -> reference -> [low, high] | None (CPU)

    def measured(self, server: str | None = None) -> list[RunRecord]:
        return [r for r in self.runs if not r.warmup and (server is None or r.arm == server)]

    def as_dict(self) -> dict:
        return {"leg": asdict(self.leg), "name": self.leg.name, "servers": self.servers,
                "schedule": self.schedule, "runs": [r.as_dict() for r in self.runs],
                "summary": self.summary, "ratios": self.ratios, "intervals": self.intervals}


@dataclass
class PeersJobResult:
    """Everything a peers job produced.  ``ceiling_note`` is the one-line reason there is
    no ceiling (nginx missing), else None.  ``arms`` (the servers) and ``ab`` (``"peers"``)
    give it the shape :func:`tailjob.plot.plot_job` and the history's file stem read."""

    argv: list[str]
    profile: str
    servers: list[Peer]
    settings: Settings
    legs: list[PeersLegResult]
    provenance: dict
    started_at: str
    finished_at: str
    ceiling_note: str | None = None
    ab: str = "peers"

    @property
    def arms(self) -> list[Peer]:
        return self.servers

    def as_dict(self) -> dict:
        return {"mode": "peers", "argv": self.argv, "profile": self.profile,
                "servers": [asdict(s) for s in self.servers], "ceiling_note": self.ceiling_note,
                "settings": asdict(self.settings), "provenance": self.provenance,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "legs": [lr.as_dict() for lr in self.legs]}


def summarize(runs: list[RunRecord], servers: list[str]) -> dict:
    """Per server: ``{runs: n, <PEER_METRICS>: median over measured runs, None if none}``."""
    out = {}
    for key in servers:
        measured = [r for r in runs if not r.warmup and r.arm == key]
        row: dict = {"runs": len(measured)}
        for m in PEER_METRICS:
            values = [r.metrics[m] for r in measured if r.metrics.get(m) is not None]
            row[m] = median(values) if values else None
        out[key] = row
    return out


def ratios(summary: dict) -> dict:
    """Per server, per reference in :data:`REFERENCES` that ran: ``{metric: median / peer's median}``.

    None where either median is missing or the peer's is 0.
    """
    refs = [r for r in REFERENCES if r in summary]
    out = {}
    for key, row in summary.items():
        out[key] = {}
        for ref in refs:
            base = summary[ref]
            out[key][ref] = {m: (row[m] / base[m] if row[m] is not None and base[m] else None)
                             for m in PEER_METRICS}
    return out


def ratio_intervals(runs: list[RunRecord], servers: list[str], *, seed: int) -> dict:
    """Per server, per reference that ran: the 95 % interval of its CPU us/request ratio.

    ``{server: {reference: [low, high] | None}}``: the percentile bootstrap of
    median(server) / median(reference) over the trials where both have a
    measured run (:func:`tailjob.stats.bootstrap_ratio_ci`, runs paired by
    trial); ``None`` with fewer than :data:`tailjob.stats.MIN_PAIRS` (8) such
    trials, the A/B's rule: a bootstrap over fewer runs claims more than it knows.
    A server against itself is ``[1.0, 1.0]`` once it has a measured run.
    """
    def by_trial(key: str) -> dict[int, float]:
        return {r.trial: r.metrics[INTERVAL_METRIC] for r in runs
                if not r.warmup and r.arm == key and r.metrics.get(INTERVAL_METRIC) is not None}

    values = {key: by_trial(key) for key in servers}
    refs = [r for r in REFERENCES if r in values]
    out: dict = {}
    for key in servers:
        out[key] = {}
        for ref in refs:
            trials = sorted(set(values[key]) & set(values[ref]))
            if key == ref and trials:
                out[key][ref] = [1.0, 1.0]  # exact, however few the trials
                continue
            if len(trials) < MIN_PAIRS:
                out[key][ref] = None
                continue
            low, high = bootstrap_ratio_ci([values[ref][t] for t in trials], [values[key][t] for t in trials],
                                           seed=seed)
            out[key][ref] = [low, high]
    return out


Progress = Callable[[str, dict], None]


def run_peers(legs: list[Leg], servers: list[Peer], settings: Settings, *, ambient: Mapping[str, str],
              nginx: str | None, progress: Progress | None = None) -> list[PeersLegResult]:
    """Run every leg; :class:`tailjob.runner.JobError` if a run fails (see the module docstring).

    ``progress(event, info)`` as in :func:`tailjob.runner.run_job`, with the
    :class:`Peer` as ``info["arm"]``.
    """
    notify = progress or (lambda event, info: None)
    by_key = {s.key: s for s in servers}
    results = []
    for leg in legs:
        keys = [s.key for s in servers]
        lr = PeersLegResult(leg=leg, servers=keys, runs=[],
                            schedule=shuffled_schedule(keys, leg.runs, seed=settings.seed + leg.index))
        plan = ([(-1, 0, lr.schedule[0][0], True)] if settings.warmup else []) + [
            (t, pos, key, False) for t, order in enumerate(lr.schedule) for pos, key in enumerate(order)]
        for trial, pos, key, warmup in plan:
            peer = by_key[key]
            info = {"leg": leg, "arm": peer, "trial": trial, "warmup": warmup}
            notify("run-start", info)
            server = make_server(peer, ambient=ambient, host=settings.host, cpus=settings.server_cpus,
                                 nginx=nginx)
            where = f"{leg.name}, {peer.label}"

            def check(srv: ServerProcess, peer=peer, where=where) -> None:
                if peer.backend and srv.backend != peer.backend:
                    raise JobError(f"{where}: asked for backend {peer.backend}, server reports {srv.backend}")

            record = measure_server(server, leg, where, settings, arm=key, trial=trial, position=pos,
                                    warmup=warmup, check=check)
            lr.runs.append(record)
            notify("run-end", {**info, "record": record})
        lr.summary = summarize(lr.runs, keys)
        lr.ratios = ratios(lr.summary)
        lr.intervals = ratio_intervals(lr.runs, keys, seed=settings.seed + leg.index)
        results.append(lr)
    return results


def history_line(job: PeersJobResult, *, result_file: str) -> dict:
    """One compact JSON object per peers job (for ``<out>/peers.jsonl``)."""
    s = job.settings
    return {
        "schema": 1, "started_at": job.started_at, "finished_at": job.finished_at, "result": result_file,
        "profile": job.profile, "argv": job.argv, "servers": [p.key for p in job.servers],
        "ceiling_note": job.ceiling_note, "pinned": s.pinned, "server_cpus": s.server_cpus,
        "wrk_cpus": s.wrk_cpus, "seed": s.seed, "warmup": s.warmup, "provenance": job.provenance,
        "legs": [{"name": lr.leg.name, "threads": lr.leg.threads, "connections": lr.leg.connections,
                  "duration_s": lr.leg.duration_s, "runs": lr.leg.runs, "summary": lr.summary,
                  "ratios": lr.ratios, "intervals": lr.intervals,
                  "flagged_runs": {flag: sum(flag in r.flags for r in lr.measured())
                                   for flag in ("polluted", "socket-errors", "non-2xx")}}
                 for lr in job.legs],
    }
