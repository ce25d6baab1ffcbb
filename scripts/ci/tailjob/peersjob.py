"""Run a ``peers`` comparison: every server, interleaved, per leg; medians and ratios.

:class:`PeersDesign` runs each leg (one wrk connection count) as trials of
:func:`tailjob.runner.run_trials`: a trial runs every server once in a random order, each on a freshly
started server, measured as the A/B job measures.  Per leg: the median of :data:`PEER_METRICS` per
server (:func:`summarize`), the ratio server / peer of those medians (:func:`ratios`), and for CPU a
95 % percentile-bootstrap interval over the trials (:func:`ratio_intervals`): on a shared machine two
sessions' medians can differ by 20 %.  No verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from .measure import WRK, Measure, RunPlan, RunRecord, Settings
from .metrics import PEER_METRICS
from .peers import REFERENCES, Peer, make_server
from .plan import Leg, shuffled_schedule
from .stats import MIN_PAIRS, bootstrap_ratio_ci, median

#: The metric whose ratios get an interval: issue 9's target, server CPU per request.
INTERVAL_METRIC = "cpu_us_per_req"


def peers_settings(
    *,
    seed: int = 1,
    warmup: bool = True,
    pin: bool = True,
    server_cpus: str = "0",
    wrk_cpus: str = "1",
    pollution_limit: float = 0.10,
) -> Settings:
    """Settings of a peers job: pinned by default (server on CPU 0, wrk on CPU 1), one bench worker."""
    return Settings(
        seed=seed,
        warmup=warmup,
        workers=1,
        server_cpus=server_cpus if pin else None,
        wrk_cpus=wrk_cpus if pin else None,
        pollution_limit=pollution_limit,
    )


@dataclass
class PeersLegResult:
    """A leg's runs (warm-up included, marked), per-server medians and ratios."""

    leg: Leg
    servers: list[str]
    schedule: list[list[str]]
    runs: list[RunRecord]
    summary: dict = field(default_factory=dict)  # server -> {runs, <metric>: median | None}
    ratios: dict = field(default_factory=dict)  # server -> reference -> metric -> ratio | None
    intervals: dict = field(default_factory=dict)  # server -> reference -> [low, high] | None (CPU)

    def measured(self, server: str | None = None) -> list[RunRecord]:
        return [r for r in self.runs if not r.warmup and (server is None or r.arm == server)]

    def as_dict(self) -> dict:
        return {
            "leg": asdict(self.leg),
            "name": self.leg.name,
            "servers": self.servers,
            "schedule": self.schedule,
            "runs": [r.as_dict() for r in self.runs],
            "summary": self.summary,
            "ratios": self.ratios,
            "intervals": self.intervals,
        }


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
        return {
            "mode": "peers",
            "argv": self.argv,
            "profile": self.profile,
            "servers": [asdict(s) for s in self.servers],
            "ceiling_note": self.ceiling_note,
            "settings": asdict(self.settings),
            "provenance": self.provenance,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "legs": [lr.as_dict() for lr in self.legs],
        }


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
    out: dict[str, dict] = {}
    for key, row in summary.items():
        out[key] = {}
        for ref in refs:
            base = summary[ref]
            out[key][ref] = {
                m: (row[m] / base[m] if row[m] is not None and base[m] else None) for m in PEER_METRICS
            }
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
        return {
            r.trial: r.metrics[INTERVAL_METRIC]
            for r in runs
            if not r.warmup and r.arm == key and r.metrics.get(INTERVAL_METRIC) is not None
        }

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
            low, high = bootstrap_ratio_ci(
                [values[ref][t] for t in trials], [values[key][t] for t in trials], seed=seed
            )
            out[key][ref] = [low, high]
    return out


@dataclass
class PeersDesign:
    """The ``peers`` comparison as a design of :func:`tailjob.runner.run_trials`: every server once
    per trial, in an order drawn at random, each freshly started; medians and ratios per leg."""

    servers: list[Peer]
    settings: Settings
    ambient: Mapping[str, str]
    nginx: str | None
    measure: Measure = WRK

    def arm(self, key: str) -> Peer:
        return next(p for p in self.servers if p.key == key)

    def warmup_arm(self, lr: PeersLegResult) -> str:
        return lr.schedule[0][0]

    def plan(self, leg: Leg, notify) -> PeersLegResult:
        keys = [p.key for p in self.servers]
        return PeersLegResult(
            leg=leg,
            servers=keys,
            runs=[],
            schedule=shuffled_schedule(keys, leg.runs, seed=self.settings.seed + leg.index),
        )

    def run_plan(self, lr: PeersLegResult, key: str, *, trial: int, position: int, warmup: bool) -> RunPlan:
        peer, s = self.arm(key), self.settings
        return RunPlan(
            leg=lr.leg,
            arm=key,
            env=self.ambient,
            settings=s,
            trial=trial,
            position=position,
            warmup=warmup,
            where=f"{lr.leg.name}, {peer.label}",
            backend=peer.backend,
            server=lambda env: make_server(
                peer, ambient=env, host=s.host, cpus=s.server_cpus, nginx=self.nginx
            ),
        )

    def decide(self, lr: PeersLegResult) -> None:
        lr.summary = summarize(lr.runs, lr.servers)
        lr.ratios = ratios(lr.summary)
        lr.intervals = ratio_intervals(lr.runs, lr.servers, seed=self.settings.seed + lr.leg.index)
