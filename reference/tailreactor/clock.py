"""Clocks: the reactor's default clock and a manual clock for deterministic tests.

Role
----
The reactor reads time only through its injected ``clock`` callable (integer
nanoseconds).  Production uses ``time.monotonic_ns`` (CLOCK_MONOTONIC, as
CWIST).  Tests use :class:`ManualClock`, whose time moves only when told to,
so "a slow callback" is a callback that calls ``clock.advance_us(5000)``: the
test asserts order and counts, never wall-clock thresholds.
"""

from __future__ import annotations

import time

monotonic_ns = time.monotonic_ns


class ManualClock:
    """A clock that moves only when advanced.  Call it to read ns.

    ``ManualClock(start_ns=1_000_000_000)``; ``advance_us(us)``,
    ``advance_ns(ns)``; ``set_ns(ns)`` (must not go backwards: ``ValueError``).
    """

    def __init__(self, start_ns: int = 1_000_000_000):
        self.now_ns = int(start_ns)

    def __call__(self) -> int:
        return self.now_ns

    def advance_ns(self, ns: int) -> None:
        if ns < 0:
            raise ValueError(f"a monotonic clock cannot go back ({ns} ns)")
        self.now_ns += int(ns)

    def advance_us(self, us: int | float) -> None:
        self.advance_ns(int(us * 1000))

    def set_ns(self, ns: int) -> None:
        if ns < self.now_ns:
            raise ValueError(f"a monotonic clock cannot go back from {self.now_ns} to {ns} ns")
        self.now_ns = int(ns)
