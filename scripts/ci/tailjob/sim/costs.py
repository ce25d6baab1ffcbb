"""The cost model of the virtual-time tier: what server work (and a closed loop's turnaround) costs
in virtual time.

The constants, what each is charged for and where its number comes from (``benchmarks/README.md``'s
peers comparison and instruction counts; ``wait_us`` and ``harvest_us`` are estimates):
docs/en/sim-tier.md, "The cost model", and :meth:`CostModel.sources`.  The injected knobs
(``CWIST_BENCH_DELAY_US``, ``SLOW_US``, ``STALL_US``, a traffic class's ``service_us``) cost virtual
time at their own length.  A dispatch policy costs its counted instructions (:data:`WALK`) at
``instruction_ns`` each: :meth:`CostModel.policy_us`.  A user who measured better numbers sets them with ``--sim-cost K=V``.
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

POLICY_COUNT = "benchmarks/results/policies/8df1ebb/"
"""The instruction tier's reports the policies' costs come from (``CWIST_REACTOR_POLICY=X
scripts/tail-latency.sh count --server bench-B``, one request in flight, ``TAIL_US=1``)."""
WALK = {
    "epoll": {"backend": 6154, "age": 14461, "oldest": 9315, "lifo": 15308, "shortest": 9315},
    "io_uring": {"backend": 6533, "age": 15237, "oldest": 9820, "lifo": 16019, "shortest": 9820},
}
"""Each policy's dispatch-walk instructions per request, by backend (:data:`POLICY_COUNT`)."""
TOTAL = {"epoll": 50798, "io_uring": 59199}
"""Backend order's whole request in the same count: user instructions per request."""
LOADED = {"epoll": 36000, "io_uring": 40400}
"""User instructions per request at c256 (benchmarks/README.md, the age order's share at c256): fewer
than the count with one request in flight, so ``request_us`` over them is ``instruction_ns``'s high bound."""


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
    policy_round_share: float = 0.0
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
                f"request_us over backend order's user instructions per request, {TOTAL[self._counted]:,} "
                f"({POLICY_COUNT}); a policy's cost (policy_us) is its dispatch walk's instructions over "
                f"backend order's, times instruction_ns, charged per event delivered: "
                + ", ".join(f"{p} {self.policy_us(p):.2f} us" for p in WALK[self._counted] if p != "backend")
                + "; high bound request_us over the c256 count, "
                f"{LOADED[self._counted]:,} ({_README})"
            ),
            "policy_round_share": (
                "the share of a policy's cost charged once per round instead of per event: the count "
                "runs one event per round and cannot separate them; 0 (per event) is the high bound "
                "under load, 1 (per round) the low"
            ),
            "client_us": CLIENT_US_SOURCE if self.client_us == CLIENT_US else "set with --sim-cost",
            "wrk_us": WRK_US_SOURCE if self.wrk_us == WRK_US else "set with --sim-cost",
        }

    @property
    def _counted(self) -> str:
        return "io_uring" if self.backend == "io_uring" else "epoll"

    def policy_us(self, policy: str) -> float:
        """Virtual us per event (x ``1 - policy_round_share``) and per round (x the share) that
        ``policy`` costs over backend order; 0 for one not counted (``module:Class``)."""
        walk = WALK[self._counted]
        return max(0, walk.get(policy, walk["backend"]) - walk["backend"]) * self.instruction_ns / 1000

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
            raise CostError(f"--sim-cost {token!r}: not K=V; accepted {', '.join(n + '=US' for n in names)}")
        if name not in names:
            raise CostError(f"--sim-cost {token}: unknown constant; accepted {', '.join(names)}")
        try:
            us = float(value)
        except ValueError:
            us = -1.0
        top, unit = {"policy_round_share": (1, ""), "instruction_ns": (LIMIT_US, " nanoseconds")}.get(
            name, (LIMIT_US, " microseconds")
        )
        if not 0 <= us <= top or us != us:
            raise CostError(f"--sim-cost {token}: accepted 0 to {top:g}{unit}")
        changes[name] = us
    return replace(model, **changes)
