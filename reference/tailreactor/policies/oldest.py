"""Oldest first: the round's events by age, oldest first, whatever their age.

Rule: before each delivery, the remaining event with the oldest stamp runs;
ties keep backend order.

The stamp is the one ``CWIST_REACTOR_AGE_FROM`` names (``armed_ns`` or
``ready_ns``), read once, at round start: a callback re-arms in place only its
own Event, which is then no longer ``READY``, so the stamps of the events the
order can still deliver do not change.  The order of the whole round is
therefore fixed when it starts: one stable sort by stamp, then one cursor.
It is the limit of age-based dispatch (age.py) as
``CWIST_REACTOR_TAIL_US`` goes to 0, without its elevation: nothing is
flagged ``dispatch_late()``.  ``CWIST_REACTOR_TAIL_US`` is not read.

The sort must be stable (ties keep backend order): C's ``qsort``, Go's
``sort.Slice`` and Rust's ``sort_unstable`` are not; sort by (key, position
in the batch) with them.  :class:`SortedOrder` is the walk for any key that
is fixed for the round (``shortest.py`` sorts by the owner's hint).
"""

from __future__ import annotations

from ..events import READY, stamp_of

__all__ = ["SortedOrder", "OldestFirst"]


class SortedOrder:
    """The round's events in the order of ``key`` (stable), one cursor over that order.

    Subclasses set ``key`` (a function of an Event, fixed for the round).
    Raises ``ValueError`` for an ``age_from`` other than ``arm`` or ``ready``.
    """

    name = "sorted"
    reads_clock = False
    in_backend_order = False
    __slots__ = ("key", "_order", "_i", "elevated")

    def __init__(self, age_from: str = "arm", threshold_ns: int = 0):
        self.key = stamp_of(age_from)
        self.elevated = False
        self.start([])

    def start(self, batch: list) -> None:
        """Begin a round over ``batch``: sort it by key, ties in backend order."""
        self._order = sorted(batch, key=self.key)
        self._i = 0

    def next(self, now_ns: int):
        """The next event in key order, or None when every one was given."""
        i = self._i
        if i < len(self._order):
            self._i = i + 1
            return self._order[i]
        return None

    def again(self) -> None:
        """The event :meth:`next` gave last was not taken: give it again."""
        self._i -= 1

    def add(self, events: list) -> None:
        """``events`` joined the batch at its end: sort them in among the events not yet given.

        Ties keep backend order: the round's own events before the joined
        ones.  An Event re-armed in place and joining again is a new arming:
        its entry from the earlier one goes.
        """
        joining = {id(ev) for ev in events}
        rest = [ev for ev in self._order[self._i :] if ev.state == READY and id(ev) not in joining]
        self._order = sorted(rest + events, key=self.key)
        self._i = 0


class OldestFirst(SortedOrder):
    """Strict oldest first (module docstring)."""

    name = "oldest"
    __slots__ = ()
