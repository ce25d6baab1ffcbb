"""``peers`` as a design of :func:`tailjob.runner.run_trials`: N servers, every one once per trial in a
random order, each freshly started and measured as the A/B measures; per leg the median of each
:data:`PEER_METRICS` per server, the ratios server / peer of those medians, and for CPU per request the
A/B's 95 % interval of the ratio over the trials (on a shared machine two sessions' medians can differ
by 20 %).  No verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from .measure import WRK, Measure, RunPlan, RunRecord, Settings
from .metrics import PEER_METRICS, metric
from .peers import REFERENCES, Peer, make_server
from .plan import Leg, shuffled_schedule
from .stats import compare, median

#: The metric whose ratios get an interval: issue 9's target, server CPU per request.
INTERVAL_METRIC = "cpu_us_per_req"


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
        doc = asdict(self)
        return {"leg": doc.pop("leg"), "name": self.leg.name, **doc}


@dataclass
class PeersJobResult:
    """Everything a peers job produced.  ``ceiling_note``: why there is no ceiling (nginx missing), else
    None; ``partial``: why the job stopped before its last run (None: it finished).  ``arms`` (the
    servers) and ``ab`` give it the shape the plot and the history read."""

    argv: list[str]
    profile: str
    servers: list[Peer]
    settings: Settings
    legs: list[PeersLegResult]
    provenance: dict
    started_at: str
    finished_at: str
    ceiling_note: str | None = None
    partial: str | None = None
    ab: str = "peers"

    @property
    def arms(self) -> list[Peer]:
        return self.servers

    def as_dict(self) -> dict:
        doc = {"mode": "peers", **asdict(self), "legs": [lr.as_dict() for lr in self.legs]}
        del doc["ab"]  # the mode says it
        return doc


def summarize(runs: list[RunRecord], servers: list[str]) -> dict:
    """Per server: ``{runs: n, <PEER_METRICS>: median over measured runs, None if none}``."""
    out = {}
    for key in servers:
        measured = [r for r in runs if not r.warmup and r.arm == key]
        values = {m: [r.metrics[m] for r in measured if r.metrics.get(m) is not None] for m in PEER_METRICS}
        out[key] = {"runs": len(measured), **{m: median(v) if v else None for m, v in values.items()}}
    return out


def ratios(summary: dict) -> dict:
    """Per server, per reference in :data:`REFERENCES` that ran: ``{metric: median / peer's median}``
    (None where either median is missing or the peer's is 0)."""
    refs = [r for r in REFERENCES if r in summary]
    return {
        key: {
            ref: {
                m: row[m] / summary[ref][m] if row[m] is not None and summary[ref][m] else None
                for m in PEER_METRICS
            }
            for ref in refs
        }
        for key, row in summary.items()
    }


def ratio_intervals(runs: list[RunRecord], servers: list[str], *, seed: int) -> dict:
    """Per server, per reference that ran: ``[low, high]``, the 95 % interval of its CPU us/request
    ratio as the A/B computes it (:func:`tailjob.stats.compare`: runs paired by trial, None under 8
    pairs); a server against itself too (``[1.0, 1.0]`` from 8 pairs)."""
    trials = sorted({r.trial for r in runs if not r.warmup})
    cpu = {
        k: {r.trial: r.metrics.get(INTERVAL_METRIC) for r in runs if not r.warmup and r.arm == k}
        for k in servers
    }
    out: dict = {}
    for key in servers:
        out[key] = {}
        for ref in (r for r in REFERENCES if r in cpu):
            a, b = ([cpu[k].get(t) for t in trials] for k in (ref, key))
            ci = compare(metric(INTERVAL_METRIC), a, b, seed=seed).ci
            out[key][ref] = list(ci) if ci else None
    return out


@dataclass
class PeersDesign:
    """The ``peers`` comparison (see the module docstring); ``nginx``: the ceiling's binary."""

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
            leg, keys, shuffled_schedule(keys, leg.runs, seed=self.settings.seed + leg.index), []
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
