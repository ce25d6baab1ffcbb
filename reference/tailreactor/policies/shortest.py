"""Shortest expected first: the round's events by the work their owner expects, least first.

Rule: before each delivery, the remaining event with the smallest hint runs;
ties keep backend order.

``Event.hint`` is what the event's owner says about its next callback, never
read from the socket: the HTTP layer sets the requests its connection served
in its last callback (a client pipelining 16 deep is a long job, an
interactive one a short one; a new connection is 0).  An order by expected
size is the one that can lower the mean response time, which no order blind
to size can (Kleinrock's conservation law); SRPT is its preemptive form and
Nudge (Grosof et al., SIGMETRICS 2021) its mildest.  A hint is fixed while
its event is ``READY``, so, as for the oldest-first order, the round's order
is one stable sort at its start.  Neither ``CWIST_REACTOR_TAIL_US`` nor
``AGE_FROM`` is read, and nothing is flagged ``dispatch_late()``.

A long job cannot starve: every event of a round runs in that round, the
long ones last.

With harvesting on (``CWIST_REACTOR_HARVEST_US``) the order is what puts a
short event that becomes ready mid-round ahead of the round's long ones:
``add`` sorts it in, and the reactor harvests to the round's last delivery
and runs at most as many harvested events as the wait returned, leaving to
the next round those harvested past that bound (dispatch.py, "Harvesting
mid-round").  The short one is sorted before them, so it runs in the round;
the long ones harvested with it lead the next.  A short event then waits at
most about ``HARVEST_US`` and one long callback, not the rest of the round.
"""

from __future__ import annotations

from operator import attrgetter

from .oldest import SortedOrder

__all__ = ["ShortestFirst"]


class ShortestFirst(SortedOrder):
    """Shortest expected first (module docstring)."""

    name = "shortest"
    __slots__ = ()

    def __init__(self, age_from: str = "arm", threshold_ns: int = 0):
        super().__init__(age_from, threshold_ns)
        self.key = attrgetter("hint")
