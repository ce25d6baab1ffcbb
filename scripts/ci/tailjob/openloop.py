"""The job's side of the load client: the load plan, its rate, and reading a run's classes.

Role
----
* :class:`LoadPlan` -- what ``--workload``, ``--load``, ``--rate`` and
  ``--schedule`` asked for, checked once (:func:`plan_load`).  ``None`` means
  today's job: wrk, closed loop, uniform.
* The **rate** is requests/s (``2000``) or a fraction of the server's capacity
  (``0.7x``).  Capacity is measured per leg by a short closed-loop wrk run
  against arm A (:data:`CAPACITY_S` seconds, the leg's wrk threads and
  connections), and reported with the rate it gave.
* :class:`Load` is one leg's load for :func:`tailjob.runner.measure_server`:
  the client's argv and the parser of its output into a :class:`LoadRunResult`,
  which answers like :class:`tailjob.wrk.WrkResult` for the job's metrics and
  carries the per-class figures (:meth:`LoadRunResult.class_metrics`).
* :func:`generator_bound` -- the check applied to every run, wrk's too: the
  load generator used nearly all the CPU it can use while the server did not,
  so the run measured the client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import loadgen
from .loadgen import LoadSpec
from .plan import Leg, PlanError
from .workloads import WORKLOADS, classes_for
from .wrk import Percentile, RunCounts

__all__ = ["LoadPlan", "plan_load", "parse_rate", "Load", "LoadRunResult", "generator_bound",
           "CAPACITY_S", "BUSY_FRACTION", "CLASS_METRICS"]

CAPACITY_S = 2
"""Seconds of the closed-loop run that measures capacity for a ``0.7x`` rate."""
BUSY_FRACTION = 0.9
"""A process using this share of the CPU it can use counts as busy (:func:`generator_bound`)."""
CLASS_METRICS = ("rps", "p50", "p99", "p99.9", "p99.99", "p99.999")
"""Metrics compared per class (server CPU per request belongs to the whole run, not to a class)."""

_RATE = re.compile(r"(\d+(?:\.\d+)?)(x?)")


def parse_rate(text: str) -> tuple[float, bool]:
    """``"2000"`` -> (2000.0, False); ``"0.7x"`` -> (0.7, True).  :class:`PlanError` otherwise."""
    m = _RATE.fullmatch(text.strip())
    value = float(m.group(1)) if m else 0.0
    if not m or value <= 0 or (m.group(2) and value > 10):
        raise PlanError(f"--rate {text!r}: accepted requests/s above 0 (e.g. 2000) or a fraction of "
                        "the measured capacity (e.g. 0.7x, at most 10x)")
    return value, bool(m.group(2))


@dataclass(frozen=True)
class LoadPlan:
    """The load of every run of a job (``rate``: as given, e.g. ``0.7x``; None without open classes)."""

    workload: str
    rate: str | None
    schedule: str = "poisson"

    @property
    def relative(self) -> bool:
        return self.rate is not None and parse_rate(self.rate)[1]

    def server_env(self) -> dict[str, str]:
        """Variables the workload sets for the server of both arms."""
        return WORKLOADS[self.workload].env()

    def resolve_rate(self, capacity_rps: float | None) -> float | None:
        if self.rate is None:
            return None
        value, relative = parse_rate(self.rate)
        if not relative:
            return value
        if not capacity_rps:
            raise PlanError(f"--rate {self.rate}: the capacity run completed no request")
        return value * capacity_rps

    def spec(self, leg: Leg, *, capacity_rps: float | None, seed: int) -> LoadSpec:
        """The client's spec for ``leg`` (one spec per leg: every run of the leg offers the same load)."""
        rate = self.resolve_rate(capacity_rps)
        spec = LoadSpec(classes=classes_for(self.workload, connections=leg.connections, rate_rps=rate,
                                            schedule=self.schedule),
                        duration_s=float(leg.duration_s), seed=seed)
        spec.check()
        return spec

    def describe(self) -> str:
        w = WORKLOADS[self.workload]
        rate = f", rate {self.rate}" + (" of capacity" if self.relative else " req/s") if self.rate else ""
        sched = f", {self.schedule} schedule" if self.rate else ""
        return f"workload `{self.workload}` ({w.description}){rate}{sched}"


def plan_load(workload: str, load: str | None, rate: str | None, schedule: str | None) -> LoadPlan | None:
    """Check the load options together; None for today's job (uniform under wrk)."""
    if workload not in WORKLOADS:
        raise PlanError(f"--workload {workload!r}: accepted {', '.join(WORKLOADS)}")
    w = WORKLOADS[workload]
    if workload == "uniform":
        if load in (None, "closed"):
            for given, name in ((rate, "--rate"), (schedule, "--schedule")):
                if given is not None:
                    raise PlanError(f"{name} needs open-loop load: add --load open")
            return None
        rate = rate or w.default_rate
    else:
        if load is not None:
            raise PlanError(f"--load {load}: workload {workload} sets its own load (see --help); "
                            "leave out --load")
        if not w.open_classes:
            for given, name in ((rate, "--rate"), (schedule, "--schedule")):
                if given is not None:
                    raise PlanError(f"{name}: workload {workload} has no open-loop class")
        else:
            rate = rate or w.default_rate
    if rate is not None:
        parse_rate(rate)
    return LoadPlan(workload=workload, rate=rate, schedule=schedule or "poisson")


def generator_bound(*, generator_busy: float, server_busy: float) -> bool:
    """True when the load generator was busy (>= :data:`BUSY_FRACTION` of the CPU it can use: for wrk,
    its threads' cores; for the load client, the busiest of its one-thread processes) and the server
    was not: the run's figures then describe the generator."""
    return generator_busy >= BUSY_FRACTION and server_busy < BUSY_FRACTION


class LoadRunResult(RunCounts):
    """One run of the load client, answering like :class:`tailjob.wrk.WrkResult` for the job.

    ``requests``: answers inside the run's window, all classes; ``rps`` their
    rate; percentiles of all classes merged.  The wrk-style ``errors`` map the
    client's ``timeout`` (owed answers missing at the end) and ``mismatch``
    (a body that is not its request's echo) to wrk's ``timeout`` and ``read``.
    """

    def __init__(self, doc: dict):
        self.doc = doc
        merged = doc["all"]
        self.requests = merged["answered_in_window"]
        self.duration_us = merged["duration_us"]
        self.latency_samples = merged["latency"]["count"]
        e = merged["errors"]
        self.errors = {"connect": e["connect"], "read": e["read"] + e["mismatch"], "write": e["write"],
                       "status": e["status"], "timeout": e["timeout"]}

    @property
    def generator_busy(self) -> float:
        """The busiest client process's CPU over its run, as a share of one core."""
        return max((p["busy"] for p in self.doc.get("processes", [])), default=0.0)

    @property
    def saturated(self) -> bool:
        return any(c["saturated"] for c in self.doc["classes"].values())

    def percentile(self, p: float) -> Percentile:
        for q in self.doc["all"]["latency"]["percentiles"]:
            if q["p"] == p:
                return Percentile(q["p"], q["us"], q["samples"])
        raise KeyError(f"percentile {p} not recorded")

    def class_metrics(self) -> dict[str, dict]:
        """Per class: the compared metrics (``rps`` = achieved) and what the report shows beside them."""
        out = {}
        for name, c in self.doc["classes"].items():
            pct = {q["p"]: q for q in c["latency"]["percentiles"]}
            lag = {q["p"]: q["us"] for q in c["lag"]["percentiles"]}
            m = {"rps": c["achieved_rps"], "offered_rps": c["offered_rps"], "loop": c["loop"],
                 "connections": c["connections"], "answered": c["answered"],
                 "saturated": c["saturated"], "errors": c["errors"],
                 "lag_p50": lag[50], "lag_p99": lag[99], "histogram": c["latency"].get("histogram")}
            for key, p in (("p50", 50), ("p99", 99), ("p99.9", 99.9), ("p99.99", 99.99), ("p99.999", 99.999)):
                m[key] = pct[p]["us"]
                m[f"{key}_samples"] = pct[p]["samples"]
            out[name] = m
        return out

    def as_dict(self) -> dict:
        """The run's record (``RunRecord.wrk``): wrk's keys where they mean the same, plus ``classes``."""
        merged = self.doc["all"]
        return {"tool": "tailjob.loadgen", "requests": self.requests, "duration_us": self.duration_us,
                "rps": self.rps, "latency_samples": self.latency_samples,
                "latency_us": {k: merged["latency"][k] for k in ("min", "max", "mean")},
                "percentiles": merged["latency"]["percentiles"],
                "spectrum": merged["latency"].get("spectrum", []), "errors": self.errors,
                "histogram": merged["latency"].get("histogram"),
                "classes": self.doc["classes"]}


@dataclass(frozen=True)
class Load:
    """One leg's load-client run, for :func:`tailjob.runner.measure_server`."""

    spec: LoadSpec

    @property
    def timeout_s(self) -> float:
        return self.spec.duration_s + self.spec.drain_s + 30

    def command(self, url: str, cpus: str | None) -> list[str]:
        return loadgen.command(url, self.spec, cpus=cpus)

    def env(self) -> dict:
        return loadgen.client_env()

    def parse(self, stdout: str) -> LoadRunResult:
        return LoadRunResult(loadgen.parse_output(stdout))
