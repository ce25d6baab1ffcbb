"""The job's workloads (``--workload NAME``) and their client classes.

Role
----
A workload says which clients load the bench server during a run and how they
are grouped into **classes**, each reported (and compared A/B) on its own.
Only ``uniform`` under closed-loop load is wrk; the others, and ``uniform``
with ``--load open``, run on the job's own load client (:mod:`tailjob.loadgen`).

=============  ==================================================================
``uniform``    ``GET /`` style requests on ``C`` connections (the profile's): wrk
               closed loop (today's, the seed's), or with ``--load open`` one
               open-loop class ``all`` offering ``--rate`` (default ``0.7x``).
``mixed``      ``bulk``: ``C/4`` keep-alive connections pipelining 16 requests per
               write, closed loop, keeping the server busy; ``interactive``: 8
               keep-alive connections sending single requests open loop at a low
               rate (``--rate``, default 200 req/s over the class, so each client
               thinks ~40 ms between requests).  Every request costs
               :data:`MIXED_SERVICE_US` of service time (``CWIST_BENCH_DELAY_US``,
               both arms), so the bulk class saturates the server and a round of
               it (16 bulk connections x 16 requests at c64, ~6 ms) lasts longer
               than the default ``CWIST_REACTOR_TAIL_US`` (3.5 ms): the probe's
               round time shows it.  ``interactive`` is the class that matters.
``slow-route`` open loop at ``--rate`` (default ``0.5x``): ``fast`` (``C``
               connections, ``GET /user/<seq>``) and ``slow`` (``C/16``, at least
               2, ``GET /slow/<seq>``), the slow share being :data:`SLOW_FRACTION`
               of the rate; the server busy-waits :data:`SLOW_US` per slow request
               (``CWIST_BENCH_SLOW_US``, set for both arms).
``think-time`` ``all``: ``4 C`` keep-alive connections, each sending one request,
               then idle for an exponential think time (mean :data:`THINK_MS`);
               most connections are idle between requests, so an event's arm age
               (since it was armed, before the think time) and its ready age
               (since the reactor reaped it) differ.
=============  ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .loadgen import ClientClass

__all__ = ["Workload", "WORKLOADS", "classes_for", "MIXED_SERVICE_US", "SLOW_FRACTION", "SLOW_US", "THINK_MS",
           "BULK_DEPTH", "INTERACTIVE_CONNECTIONS"]

MIXED_SERVICE_US = 20
SLOW_FRACTION = 0.01
SLOW_US = 2000
THINK_MS = 50.0
BULK_DEPTH = 16
INTERACTIVE_CONNECTIONS = 8


@dataclass(frozen=True)
class Workload:
    """``open_classes``: whether it has an open-loop class (then ``--rate`` applies, default
    ``default_rate``); ``server_env``: bench server variables it needs, for both arms."""

    name: str
    description: str
    open_classes: bool
    default_rate: str | None = None
    server_env: Mapping[str, str] = None  # type: ignore[assignment]

    def env(self) -> dict[str, str]:
        return dict(self.server_env or {})


WORKLOADS: dict[str, Workload] = {
    "uniform": Workload("uniform", "every connection alike (wrk closed loop; one open-loop class with "
                        "--load open)", open_classes=False, default_rate="0.7x"),
    "mixed": Workload("mixed", f"C/4 bulk connections pipelining depth {BULK_DEPTH} (closed loop) + "
                      f"{INTERACTIVE_CONNECTIONS} interactive clients (open loop, low rate), "
                      f"{MIXED_SERVICE_US} us of service per request", open_classes=True, default_rate="200",
                      server_env={"CWIST_BENCH_DELAY_US": str(MIXED_SERVICE_US)}),
    "slow-route": Workload("slow-route", f"open loop; {SLOW_FRACTION:.0%} of requests to /slow/ at "
                           f"{SLOW_US} us", open_classes=True, default_rate="0.5x",
                           server_env={"CWIST_BENCH_SLOW_US": str(SLOW_US)}),
    "think-time": Workload("think-time", f"4C keep-alive connections, think time {THINK_MS:g} ms mean "
                           "between requests (closed loop)", open_classes=False),
}


def classes_for(workload: str, *, connections: int, rate_rps: float | None,
                schedule: str = "poisson") -> tuple[ClientClass, ...]:
    """The client classes of ``workload`` for a leg of ``connections`` (see the module table).

    ``rate_rps`` is the resolved ``--rate`` (None for workloads without an open-loop class);
    uniform with a rate is the open-loop ``all`` class.
    """
    if workload == "uniform":
        if rate_rps is None:
            raise ValueError("uniform without a rate is wrk's closed loop, not the load client")
        return (ClientClass("all", connections, "open", rate=rate_rps, schedule=schedule),)
    if workload == "mixed":
        return (ClientClass("interactive", INTERACTIVE_CONNECTIONS, "open", rate=rate_rps,
                            schedule=schedule),
                ClientClass("bulk", max(connections // 4, 1), "closed", depth=BULK_DEPTH))
    if workload == "slow-route":
        return (ClientClass("fast", connections, "open", rate=rate_rps * (1 - SLOW_FRACTION),
                            schedule=schedule),
                ClientClass("slow", max(connections // 16, 2), "open", rate=rate_rps * SLOW_FRACTION,
                            schedule=schedule, path="/slow/"))
    if workload == "think-time":
        return (ClientClass("all", 4 * connections, "closed", think_ms=THINK_MS),)
    raise ValueError(f"workload {workload!r}: accepted {', '.join(WORKLOADS)}")
