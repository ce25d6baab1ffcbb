"""The cost model of the virtual-time tier: what server work (and a closed loop's turnaround) costs
in virtual time.

The constants, what each is charged for and where its number comes from (``benchmarks/README.md``'s
peers comparison and instruction counts; ``wait_us`` and ``harvest_us`` are estimates):
docs/en/sim-tier.md, "The cost model", and :meth:`CostModel.sources`.  The injected knobs
(``CWIST_BENCH_DELAY_US``, ``SLOW_US``, ``STALL_US``, a traffic class's ``service_us``) cost virtual
time at their own length.  A user who measured better numbers sets them with ``--sim-cost K=V``.
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
    age_order_us: float
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
            "age_order_us": (
                "the age order's share of user-space instructions per request at c256, "
                + ("1.6 % (630 of 40,400)" if self.backend == "io_uring" else "1.9 % (690 of 36,000)")
                + f" ({_README}), of request_us"
            ),
            "client_us": CLIENT_US_SOURCE if self.client_us == CLIENT_US else "set with --sim-cost",
            "wrk_us": WRK_US_SOURCE if self.wrk_us == WRK_US else "set with --sim-cost",
        }

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
            age_order_us=round(0.016 * 16.1 * k, 2),
        )
    if backend in ("epoll", "selectors"):
        return CostModel(
            backend,
            wait_us=2.0,
            harvest_us=1.0,
            callback_us=14.8,
            request_us=16.1,
            age_order_us=round(0.019 * 16.1, 2),
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
        if not 0 <= us <= LIMIT_US or us != us:
            raise CostError(f"--sim-cost {token}: accepted 0 to {LIMIT_US:g} microseconds")
        changes[name] = us
    return replace(model, **changes)
