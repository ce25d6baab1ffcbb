"""The cost model of the virtual-time tier: what server work (and a closed loop's turnaround) costs
in virtual time.

The constants, what each is charged for and where its number comes from (``benchmarks/README.md``'s
peers comparison and instruction counts; ``wait_us`` and ``harvest_us`` are estimates):
docs/en/sim-tier.md, "The cost model", and :meth:`CostModel.sources`.  The injected knobs
(``CWIST_BENCH_DELAY_US``, ``SLOW_US``, ``STALL_US``, a traffic class's ``service_us``) cost virtual
time at their own length.  A dispatch policy costs the instructions it was counted to add to
backend order's (:data:`COUNTED`) at ``instruction_ns`` each: in a round of one event what that round
costs, in a larger round per round and per event (:meth:`CostModel.policy_us`).  A user who measured
better numbers sets them with ``--sim-cost K=V``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields, replace
from typing import Any

LIMIT_US = 100_000.0
"""Largest accepted constant (0.1 s per unit of work): beyond it a run models no server."""

IO_URING_FACTOR = 38.8 / 36.7
"""io_uring's CPU per request over epoll's (benchmarks/README.md, peers table, c256)."""

_README = "benchmarks/README.md"

CLIENT_US = 116.0
"""The load client's closed-loop turnaround (``client_us``)."""
CLIENT_US_SOURCE = (
    "the load client's measured turnaround, from the read with a batch's last answer to the next batch's "
    "write: the bulk class's p50 was 109-118 us (medians per backend and arm of 8 runs) under `mixed` at c64 "
    "on a quiet machine, benchmarks/results/study/20261202T051949Z-quick-tail.md, commit 0d51494 (a lower "
    "bound: the kernel's delivery and the client's wake-up are not in it)"
)
WRK_US = 6.0
"""wrk's closed-loop turnaround (``wrk_us``)."""
WRK_US_SOURCE = (
    "wrk at c1 (one connection, pinned, quiet): 1/(requests/s) minus the server's CPU per request, "
    "6.2 us on epoll and 5.7 us on io_uring (arm A medians of 3 runs), "
    "benchmarks/results/study/20261202T052334Z-quick-aa-c1.md, commit 0d51494"
)

POLICY_COUNT = "benchmarks/results/policies/2a50b77/"
"""The instruction tier's reports the policies' costs come from (``CWIST_REACTOR_POLICY=X
scripts/tail-latency.sh count --server bench-B --in-flight N``; ``TAIL_US=1``: every event aged)."""
BATCHES = (1, 4, 16)
"""The requests in flight of the counts (``--in-flight``): a round holds that many events."""
COUNTED = {
    "backend": (49716, 39096, 36626),
    "age": (52643, 42062, 38038),
    "oldest": (56528, 42277, 38894),
    "lifo": (63677, 44875, 40410),
    "shortest": (56528, 42227, 38849),
}
"""Each policy's user instructions per request on epoll (the whole request, exact) at each of
:data:`BATCHES` (:data:`POLICY_COUNT`).  The policies' code is the same on every backend, and epoll's
rounds hold exactly the batch (250 waits for 250 batches of 4); io_uring's waits are more than its
batches and differ by policy (a wait the stop interrupts is made again, and a batch may be split), so
io_uring's counts, in the same reports, are not fitted: at one in flight each policy adds to backend
order what it adds on epoll, within 2 % (benchmarks/README.md, "Dispatch policies: per round and per
event")."""
TOTAL = {"epoll": 49716, "io_uring": 58186}
"""Backend order's whole request at one in flight (:data:`POLICY_COUNT`): user instructions per request."""
LOADED = {"epoll": 36000, "io_uring": 40400}
"""User instructions per request at c256 (benchmarks/README.md, the age order's share at c256): fewer
than the count with one request in flight, so ``request_us`` over them is ``instruction_ns``'s high bound.
Neither is of today's tree: ``request_us`` was measured before the peers shared the request code, when
the bench server took about 43,800 instructions per request at c256 on epoll, and today's tree counts
more than these at c256 (benchmarks/README.md, "Dispatch policies in virtual time"); either would lower
the bound, so this one, the widest, is kept."""


def policy_instructions(policy: str) -> tuple[float, float, float]:
    """The instructions ``policy`` adds to backend order's (:data:`COUNTED`): (in a round of one
    event, per round and per event of a larger round).

    A round of one event is counted as it is (at one in flight; policies take a fast path there).
    In larger rounds a cost of ``R`` per round and ``E`` per event is ``R/N + E`` per request at ``N``
    in flight, so the counts at 4 and 16 give ``R`` and ``E`` (8 in flight, counted too, checks the
    line: benchmarks/README.md).  Whole requests, not the walk's row: the total is exact and holds
    what a policy adds outside its walk (its clock reads)."""
    ours, base = COUNTED[policy], COUNTED["backend"]
    (_, n1, n2), (one, d1, d2) = BATCHES, (p - b for p, b in zip(ours, base))
    per_event = (n2 * d2 - n1 * d1) / (n2 - n1)
    return one, n1 * (d1 - per_event), per_event


class CostError(ValueError):
    """A cost constant the model cannot take; the message is one line naming the option."""


@dataclass(frozen=True)
class CostModel:
    """Virtual microseconds per unit of server work (see the module docstring)."""

    backend: str
    wait_us: float
    harvest_us: float
    callback_us: float
    request_us: float
    instruction_ns: float
    client_us: float = CLIENT_US
    wrk_us: float = WRK_US

    def sources(self) -> dict[str, str]:
        """Where each constant came from, by field name."""
        scale = (
            f" x{IO_URING_FACTOR:.3f} (io_uring's CPU/request over epoll's, {_README} peers table)"
            if self.backend == "io_uring"
            else ""
        )
        return {
            "wait_us": "estimate, not measured here: one wait system call returning a batch",
            "harvest_us": (
                "estimate: io_uring's harvest peeks the completion queue without a system call"
                if self.backend == "io_uring"
                else "estimate: one poll with timeout 0 (epoll_wait / select)"
            ),
            "callback_us": f"kernel CPU per request at one request per callback, 14.8 us ({_README}, "
            f"'Server CPU is about half user, half kernel'){scale}",
            "request_us": f"user CPU per request, 16.1 us ({_README}, same measurement){scale}",
            "instruction_ns": (
                f"request_us over backend order's user instructions per request at one in flight, "
                f"{TOTAL[self._counted]:,} ({POLICY_COUNT}); a policy's cost (policy_us) is the "
                f"instructions it adds to backend order's (counted on epoll at {', '.join(map(str, BATCHES))} "
                "in flight) times instruction_ns: "
                + ", ".join(
                    "{} {:.2f} | {:.2f} + {:.2f} us".format(p, *self.policy_us(p))
                    for p in COUNTED
                    if p != "backend"
                )
                + " (a round of one event | per round + per event of a larger one); high bound "
                f"request_us over the c256 count, {LOADED[self._counted]:,} ({_README})"
            ),
            "client_us": CLIENT_US_SOURCE if self.client_us == CLIENT_US else "set with --sim-cost",
            "wrk_us": WRK_US_SOURCE if self.wrk_us == WRK_US else "set with --sim-cost",
        }

    @property
    def _counted(self) -> str:
        return "io_uring" if self.backend == "io_uring" else "epoll"

    def policy_us(self, policy: str) -> tuple[float, float, float]:
        """Virtual us that ``policy`` costs over backend order (:func:`policy_instructions` times
        ``instruction_ns``): (a round of one event, per round and per event of a larger round); a
        round of ``n`` > 1 events is charged ``per round + n x per event``, never below 0.  (0, 0, 0)
        for one not counted (``module:Class``)."""
        if policy not in COUNTED:
            return 0.0, 0.0, 0.0
        one, per_round, per_event = policy_instructions(policy)
        ns = self.instruction_ns / 1000
        return one * ns, per_round * ns, per_event * ns

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def constants(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self) if f.name != "backend")


def for_backend(backend: str) -> CostModel:
    """The calibrated model of ``backend`` (``epoll``, ``io_uring`` or ``selectors``)."""
    if backend == "io_uring":
        k = IO_URING_FACTOR
        return CostModel(
            backend,
            wait_us=2.0,
            harvest_us=0.2,
            callback_us=round(14.8 * k, 2),
            request_us=round(16.1 * k, 2),
            instruction_ns=round(16.1 * k * 1000 / TOTAL["io_uring"], 4),
        )
    if backend in ("epoll", "selectors"):
        return CostModel(
            backend,
            wait_us=2.0,
            harvest_us=1.0,
            callback_us=14.8,
            request_us=16.1,
            instruction_ns=round(16.1 * 1000 / TOTAL["epoll"], 4),
        )
    raise CostError(f"backend {backend!r}: the cost model knows epoll, io_uring, selectors")


def with_overrides(model: CostModel, text: str | None) -> CostModel:
    """``model`` with ``'K=V ...'`` (``--sim-cost``) applied; :class:`CostError` (one line) if bad."""
    changes: dict[str, Any] = {}  # constant name -> us: replace() takes them as keywords
    names = model.constants
    for token in shlex.split(text or ""):
        name, sep, value = token.partition("=")
        if not sep:
            shown = ", ".join(n + ("=NS" if n.endswith("_ns") else "=US") for n in names)
            raise CostError(
                f"--sim-cost {token!r}: not K=V; accepted {shown} (US: microseconds, NS: nanoseconds)"
            )
        if name not in names:
            raise CostError(f"--sim-cost {token}: unknown constant; accepted {', '.join(names)}")
        if name in changes:  # else the later value would win unsaid
            raise CostError(f"--sim-cost: {name} set twice")
        try:
            us = float(value)
        except ValueError:
            us = -1.0
        top, unit = (LIMIT_US, " nanoseconds" if name == "instruction_ns" else " microseconds")
        if not 0 <= us <= top or us != us:
            raise CostError(f"--sim-cost {token}: accepted 0 to {top:g}{unit}")
        changes[name] = us
    return replace(model, **changes)
