"""The job's workloads (``--workload NAME``): each one definition, its client classes and server settings.

A workload says which clients load the bench server during a run and how they are grouped into
classes, each reported (and compared A/B) on its own: one entry of :data:`WORKLOADS` (its
description for ``--help``, whether it has an open-loop class and its default rate, the bench
server variables it sets for both arms, its classes for a leg's connections and rate).  The
workloads and why each is sized as it is: docs/en/workloads.md, "Workloads".  Only ``uniform``
under closed-loop load is wrk; the others run on the job's load client (:mod:`tailjob.loadgen`).
A user's own traffic (``--workload FILE.toml``, ``--class``): :mod:`tailjob.traffic`.

The job's side of the load client: :class:`LoadPlan` (``--workload``, ``--load``, ``--rate`` and
``--schedule``, checked once by :func:`plan_load`; ``None`` is wrk's closed loop), a rate as
requests/s (``2000``) or a fraction of the capacity (``0.7x``, measured per leg by a
:data:`CAPACITY_S` s closed-loop wrk run on arm A), and :class:`LoadRunResult`, a run's output read
like :class:`tailjob.wrk.WrkResult`, with the per-class figures.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import loadgen
from .loadgen import ClientClass, LoadSpec
from .metrics import LATENCY_KEYS, Percentile, RunCounts
from .plan import Leg, PlanError
from .traffic import (  # noqa: F401  (the job reads them here)
    SERVICE_PATH,
    TRAFFIC_KEYS,
    Traffic,
    TrafficClass,
    TrafficError,
    _traffic,
    parse_classes,
    parse_rate,
    service_text,
    traffic_of,
)

CAPACITY_S = 2
"""Seconds of the closed-loop run that measures capacity for a ``0.7x`` rate."""
CAPACITY_PATH = "/user/"
"""What the capacity run's wrk requests: ``GET /user/<seq>`` (``tail_latency.lua``), the load client's
request (every class's but the 1 % of ``slow-route`` sent to ``/slow/``), not ``GET /``."""
MIXED_SERVICE_US = 20
SLOW_FRACTION = 0.01
SLOW_US = 2000
THINK_MS = 50.0
BULK_DEPTH = 16
INTERACTIVE_CONNECTIONS = 8

#: ``classes(connections, rate_rps, schedule)`` of a workload (rate: None without an open-loop class).
Classes = Callable[[int, "float | None", str], tuple[ClientClass, ...]]


@dataclass(frozen=True)
class Workload:
    """One workload: ``open_classes``: whether it has an open-loop class (then ``--rate`` applies,
    default ``default_rate``); ``server_env``: bench server variables it needs, for both arms;
    ``classes``: its client classes (see :data:`Classes`)."""

    name: str
    description: str
    classes: Classes
    open_classes: bool
    default_rate: str | None = None
    server_env: Mapping[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return dict(self.server_env)


def _rate(rate: float | None) -> float:
    """The rate of an open-loop class: ``classes_for`` gets one for every workload with ``open_classes``."""
    if rate is None:
        raise ValueError("an open-loop class needs a rate (--rate)")
    return rate


def _uniform(connections: int, rate: float | None, schedule: str) -> tuple[ClientClass, ...]:
    if rate is None:
        raise ValueError("uniform without a rate is wrk's closed loop, not the load client")
    return (ClientClass("all", connections, "open", rate=rate, schedule=schedule),)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "uniform",
            "every connection alike (wrk closed loop; one open-loop class with --load open)",
            _uniform,
            open_classes=False,
            default_rate="0.7x",
        ),
        Workload(
            "mixed",
            f"C/4 bulk connections pipelining depth {BULK_DEPTH} (closed loop) + "
            f"{INTERACTIVE_CONNECTIONS} interactive clients (open loop, low rate), "
            f"{MIXED_SERVICE_US} us of service per request",
            lambda c, rate, sched: (
                ClientClass("interactive", INTERACTIVE_CONNECTIONS, "open", rate=_rate(rate), schedule=sched),
                ClientClass("bulk", max(c // 4, 1), "closed", depth=BULK_DEPTH),
            ),
            open_classes=True,
            default_rate="200",
            server_env={"CWIST_BENCH_DELAY_US": str(MIXED_SERVICE_US)},
        ),
        Workload(
            "slow-route",
            f"open loop; {SLOW_FRACTION:.0%} of requests to /slow/ at {SLOW_US} us",
            lambda c, rate, sched: (
                ClientClass("fast", c, "open", rate=_rate(rate) * (1 - SLOW_FRACTION), schedule=sched),
                ClientClass(
                    "slow",
                    max(c // 16, 2),
                    "open",
                    rate=_rate(rate) * SLOW_FRACTION,
                    schedule=sched,
                    path="/slow/",
                ),
            ),
            open_classes=True,
            default_rate="0.5x",
            server_env={"CWIST_BENCH_SLOW_US": str(SLOW_US)},
        ),
        Workload(
            "think-time",
            f"4C keep-alive connections, think time {THINK_MS:g} ms mean between requests (closed loop)",
            lambda c, rate, sched: (ClientClass("all", 4 * c, "closed", think_ms=THINK_MS),),
            open_classes=False,
        ),
    )
}


_ACCEPTED = f"{', '.join(WORKLOADS)} or a traffic file FILE.toml"


def read_traffic(path: str | Path, *, where: str | None = None) -> Traffic:
    """The traffic of a TOML file, one table per class (see the module docstring); checked whole.
    ``where`` starts every error's line (default ``--workload PATH``; a sweep's grid names its load point)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser as a package (pyproject.toml)
        import tomli as tomllib
    where = where or f"--workload {path}"
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TrafficError(f"{where}: no such file ({Path(path).absolute()}); accepted {_ACCEPTED}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TrafficError(f"{where}: cannot read it ({e.__class__.__name__}: {e})") from None
    except tomllib.TOMLDecodeError as e:
        raise TrafficError(f"{where}: not TOML ({e}); accepted one table per class") from None
    return _traffic(where, str(path), list(raw.items()), ("--workload", str(path)))


def workload_of(text: str) -> str | Traffic:
    """``--workload``'s value: a workload's name, or the traffic of a ``.toml`` file."""
    if text in WORKLOADS:
        return text
    if text.endswith(".toml"):
        return read_traffic(text)
    raise TrafficError(f"--workload {text}: accepted {_ACCEPTED}")


def _sets(traffic: Traffic, what: str) -> str:
    return f"the traffic ({traffic.name}) sets each class's {what}"


def label(workload: str | Traffic) -> str:
    """What a report calls a workload: its name, or the traffic file's name."""
    return str(workload)


def resolve(workload: str | Traffic) -> Workload | Traffic:
    """The definition behind ``--workload``: the named :class:`Workload`, or the traffic itself."""
    return workload if isinstance(workload, Traffic) else WORKLOADS[workload]


def classes_for(
    workload: str, *, connections: int, rate_rps: float | None, schedule: str = "poisson"
) -> tuple[ClientClass, ...]:
    """The client classes of ``workload`` for a leg of ``connections`` (see the module table).

    ``rate_rps`` is the resolved ``--rate`` (None for workloads without an open-loop class);
    uniform with a rate is the open-loop ``all`` class.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"workload {workload!r}: accepted {', '.join(WORKLOADS)}")
    return WORKLOADS[workload].classes(connections, rate_rps, schedule)


@dataclass(frozen=True)
class LoadPlan:
    """The load of every run of a job (``rate``: as given, e.g. ``0.7x``; None without open classes
    and for a :class:`Traffic`, whose classes give their own)."""

    workload: str | Traffic
    rate: str | None
    schedule: str = "poisson"

    @property
    def relative(self) -> bool:
        if isinstance(self.workload, Traffic):
            return self.workload.relative
        return self.rate is not None and parse_rate(self.rate)[1]

    def server_env(self) -> dict[str, str]:
        """Variables the workload sets for the server of both arms."""
        return resolve(self.workload).env()

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
        if isinstance(self.workload, Traffic):
            classes = self.workload.client_classes(capacity_rps)
        else:
            classes = classes_for(
                self.workload,
                connections=leg.connections,
                rate_rps=self.resolve_rate(capacity_rps),
                schedule=self.schedule,
            )
        spec = LoadSpec(
            classes=classes,
            duration_s=float(leg.duration_s),
            seed=seed,
        )
        spec.check()
        return spec

    def describe(self) -> str:
        if isinstance(self.workload, Traffic):
            return f"traffic `{self.workload.name}` ({self.workload.description})"
        w = WORKLOADS[self.workload]
        rate = f", rate {self.rate}" + (" of capacity" if self.relative else " req/s") if self.rate else ""
        sched = f", {self.schedule} schedule" if self.rate else ""
        return f"workload `{self.workload}` ({w.description}){rate}{sched}"


def plan_load(
    workload: str | Traffic, load: str | None, rate: str | None, schedule: str | None
) -> LoadPlan | None:
    """Check the load options together; None for today's job (uniform under wrk)."""
    if isinstance(workload, Traffic):
        for given, name, what in (
            (load, "--load", "loop"),
            (rate, "--rate", "rate"),
            (schedule, "--schedule", "schedule"),
        ):
            if given is not None:
                raise PlanError(f"{name} {given}: {_sets(workload, what)}; leave out {name}")
        return LoadPlan(workload=workload, rate=None)
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
            raise PlanError(
                f"--load {load}: workload {workload} sets its own load (see --help); leave out --load"
            )
        if not w.open_classes:
            for given, name in ((rate, "--rate"), (schedule, "--schedule")):
                if given is not None:
                    raise PlanError(f"{name}: workload {workload} has no open-loop class")
        else:
            rate = rate or w.default_rate
    if rate is not None:
        parse_rate(rate)
    return LoadPlan(workload=workload, rate=rate, schedule=schedule or "poisson")


class LoadRunResult(RunCounts):
    """One run of the load client, answering like :class:`tailjob.wrk.WrkResult` for the job.

    ``requests``: answers inside the run's window, all classes; ``rps`` their
    rate; percentiles of all classes merged.  The wrk-style ``errors`` map the
    client's ``timeout`` (owed answers missing at the end) and ``mismatch``
    (a body that is not its request's echo) to wrk's ``timeout`` and ``read``.
    """

    @classmethod
    def parse(cls, stdout: str) -> LoadRunResult:
        """The result of the last ``TAILREACTOR_LOAD`` line of the client's output."""
        return cls(loadgen.parse_output(stdout))

    def __init__(self, doc: dict):
        self.doc = doc
        merged = doc["all"]
        self.requests = merged["answered_in_window"]
        self.duration_us = merged["duration_us"]
        self.latency_samples = merged["latency"]["count"]
        e = merged["errors"]
        self.errors = {
            "connect": e["connect"],
            "read": e["read"] + e["mismatch"],
            "write": e["write"],
            "status": e["status"],
            "timeout": e["timeout"],
        }

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
            turn = {q["p"]: q["us"] for q in c.get("turnaround", {}).get("percentiles", [])}
            m = {
                "rps": c["achieved_rps"],
                "offered_rps": c["offered_rps"],
                "loop": c["loop"],
                "connections": c["connections"],
                "answered": c["answered"],
                "saturated": c["saturated"],
                "errors": c["errors"],
                "lag_p50": lag[50],
                "lag_p99": lag[99],
                "turnaround_p50": turn.get(50),
                "turnaround_p99": turn.get(99),
                "histogram": c["latency"].get("histogram"),
            }
            for key, p in LATENCY_KEYS.items():
                m[key] = pct[p]["us"]
                m[f"{key}_samples"] = pct[p]["samples"]
            out[name] = m
        return out

    def as_dict(self) -> dict:
        """The run's record (``RunRecord.wrk``): wrk's keys where they mean the same, plus ``classes``."""
        merged = self.doc["all"]
        return {
            "tool": "tailjob.loadgen",
            "requests": self.requests,
            "duration_us": self.duration_us,
            "rps": self.rps,
            "latency_samples": self.latency_samples,
            "latency_us": {k: merged["latency"][k] for k in ("min", "max", "mean")},
            "percentiles": merged["latency"]["percentiles"],
            "spectrum": merged["latency"].get("spectrum", []),
            "errors": self.errors,
            "histogram": merged["latency"].get("histogram"),
            "classes": self.doc["classes"],
        }
