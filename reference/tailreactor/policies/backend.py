"""Backend order: the round's events in the order the backend reported them.

Rule: before each delivery, the first remaining event of the batch runs.

What asyncio's ready queue and libuv do: first come, first served by
readiness (on a backend that declares ``ordered``, clause B9).  Nothing is
ever elevated (``dispatch_late()`` stays false).  The walk is one cursor over
the batch.  It does not skip an event that is no longer ``READY`` (it ran, or
an earlier callback disarmed it): the reactor skips it, whatever the policy
(policies/__init__.py, "What the reactor keeps, whatever the policy").  Events that join
the batch at its end (a harvest) are reached by the same cursor.
"""

from __future__ import annotations

__all__ = ["BackendOrder"]


class BackendOrder:
    """The policy interface, in its simplest form (``policies/__init__.py`` states it)."""

    name = "backend"
    reads_clock = False  # next() ignores now_ns: the reactor need not read the clock for it
    in_backend_order = True  # so the reactor walks the batch itself and calls none of the methods below
    __slots__ = ("_batch", "_i", "elevated")

    def __init__(self, age_from: str = "arm", threshold_ns: int = 0):
        self.elevated = False  # never: no event is moved ahead for its age
        self.start([])

    def start(self, batch: list) -> None:
        """Begin a round over ``batch`` (backend order; the reactor's own list)."""
        self._batch = batch
        self._i = 0

    def next(self, now_ns: int):
        """The next event of the batch, or None when the walk is at its end."""
        i = self._i
        if i < len(self._batch):
            self._i = i + 1
            return self._batch[i]
        return None

    def again(self) -> None:
        """The event :meth:`next` gave last was not taken: give it again."""
        self._i -= 1

    def add(self, events: list) -> None:
        """``events`` joined the batch at its end: the cursor reaches them in turn."""
