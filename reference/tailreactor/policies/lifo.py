"""Adaptive LIFO: first come, first served until the round's queue is old, then newest first.

Rule: before each delivery, if the oldest remaining event has waited at least
``CWIST_REACTOR_TAIL_US`` (its age counted from the stamp
``CWIST_REACTOR_AGE_FROM`` names), the newest remaining event runs (latest
stamp; ties: the later in backend order); else the first remaining event in
backend order.  With ``TAIL_US=0`` the queue is never old: backend order.

Facebook's "Fail at Scale" (ACM Queue 2015; folly's CoDel executors): under
overload a FIFO queue makes every request late, newest first lets the fresh
ones meet their deadline while the old ones, late anyway, wait.  Nothing is
dropped here: every event of a round runs in it, the oldest last.  Nothing
is flagged ``dispatch_late()``.

Once old, old for the rest of the round: the oldest remaining event stays
remaining (newest first runs it last) and its age only grows.  So a round is
a prefix in backend order, then the rest newest first.  The walk: a cursor
in backend order while the clock is before ``_check_at``, the time the oldest
remaining event ages (a lower bound: events run since may have been older);
at that time, the events still ``READY`` sorted by stamp (stable, once per
round) and a look at the first one still ``READY``: aged, the rest of the
round walks that order from its end; not yet, ``_check_at`` is its aging
time.  Stamps are read when the order is built, from events still ``READY``,
whose stamps are the round start's (age.py, "What a port
must keep"); a harvest (:meth:`add`) builds it again.
"""

from __future__ import annotations

from collections.abc import Callable

from ..dispatch import NEVER
from ..events import READY, stamp_of

__all__ = ["AdaptiveLifo"]


class AdaptiveLifo:
    """Adaptive LIFO (module docstring).  Raises ``ValueError`` for a bad ``age_from``."""

    name = "lifo"
    __slots__ = (
        "_stamp",
        "_threshold",
        "_batch",
        "_i",
        "_check_at",
        "_by_age",
        "_lo",
        "_j",
        "_lifo",
        "_sorted",
        "reads_clock",
        "in_backend_order",
    )
    elevated = False  # never: newest first is not a promotion for lateness
    _stamp: Callable  # the stamp AGE_FROM names (events.stamp_of)
    _by_age: list  # the events READY at the first look, by stamp (once _sorted)
    _j: int  # newest first: by_age[:_j] is what is left to give

    def __init__(self, age_from: str = "arm", threshold_ns: int = 0):
        self._stamp = stamp_of(age_from)
        self._threshold = threshold_ns
        self.reads_clock = threshold_ns > 0  # with TAIL_US=0 the queue is never old
        self.in_backend_order = not threshold_ns  # ... and the order is the backend's
        self.start([])

    def start(self, batch: list) -> None:
        """Begin a round over ``batch``, first come first served; first look at its age at once."""
        self._batch = batch
        self._i = 0
        self._by_age = []
        self._sorted = False
        self._lifo = False
        self._check_at = 0 if self._threshold else NEVER

    def next(self, now_ns: int):
        """The newest remaining event once the queue is old, else the next in backend order."""
        if not self._lifo and now_ns >= self._check_at:
            self._check(now_ns)
        if self._lifo:
            j = self._j
            if j > 0:
                self._j = j - 1
                return self._by_age[j - 1]
            return None
        i = self._i
        if i < len(self._batch):
            self._i = i + 1
            return self._batch[i]
        return None

    def _check(self, now_ns: int) -> None:
        """Is the oldest remaining event aged at ``now_ns``?  Then newest first from now on."""
        if not self._sorted:
            self._by_age = sorted([ev for ev in self._batch if ev.state == READY], key=self._stamp)
            self._sorted, self._lo = True, 0
        by_age = self._by_age
        lo = self._lo
        while lo < len(by_age) and by_age[lo].state != READY:
            lo += 1  # it ran in backend order
        self._lo = lo
        if lo == len(by_age):
            self._check_at = NEVER  # nothing left
        elif now_ns - self._stamp(by_age[lo]) >= self._threshold:
            self._lifo, self._j = True, len(by_age)
        else:
            self._check_at = self._stamp(by_age[lo]) + self._threshold

    def again(self) -> None:
        """The event :meth:`next` gave last was not taken: give it again."""
        if self._lifo:
            self._j += 1
        else:
            self._i -= 1

    def add(self, events: list) -> None:
        """``events`` joined the batch at its end: look at the age again at the next delivery.

        The order by stamp is built again then, over the events still
        ``READY`` (the joined ones too); in backend order the cursor reaches
        them in turn.  A queue that was old is still old (its oldest event
        has not run).
        """
        self._by_age = []
        self._sorted = False
        self._lifo = False
        self._check_at = 0 if self._threshold else NEVER
