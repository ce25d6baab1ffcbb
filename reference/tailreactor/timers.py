"""Timer heap: monotonic deadlines, fired in deadline order, never early.

Role
----
Caller-owned :class:`Timer` objects (as CWIST's ``cwist_reactor_timer_t``) on
a binary min-heap touched only by the reactor thread; other threads go
through ``Reactor.post``.

Rules (each is a conformance clause):

* a timer fires when the reactor clock is ``>= deadline`` -- never early;
* timers due together fire in deadline order, ties in arm order;
* ``cancel`` means it will not fire; re-arming replaces the deadline;
* a pass fires only timers armed before the pass started, so a callback that
  re-arms itself with delay 0 runs once per round instead of spinning forever.

Cancelled and replaced entries stay in the heap and are skipped when popped
("lazy deletion"), which keeps arm and cancel O(log n) and O(1).  So that
churn (every closed HTTP connection cancels a 15 s idle timer) cannot fill
memory with dead entries, the heap is rebuilt from its live entries once dead
ones are the majority (amortised O(1) per cancel).

A pass is two steps: :meth:`TimerHeap.take_due` moves the due entries from
the heap to the *pass list*, and the reactor fires them from it, marking each
entry fired just before its callback starts.  The pass list is the heap's own,
not a local of the pass, so that an exception that is not an ``Exception``
(a callback's ``KeyboardInterrupt``, or a signal handler's, which can land
between any two bytecodes) loses no timer (clause R21): the entries not yet
fired are still armed, and they go back on the heap, with their deadline and
sequence, so in the same order, when the next pass starts.
"""

from __future__ import annotations

import heapq
import itertools
from typing import NamedTuple


class TimerEntry:
    """One arming of a :class:`Timer` on the heap: ``(deadline_ns, seq)`` orders it.

    ``timer`` is None once the timer fired, was cancelled or was re-armed
    (the entry is then dead: skipped when popped).  ``on_heap`` is False
    while a pass holds the entry on its pass list.  The heap itself holds
    :class:`HeapItem` records.
    """

    __slots__ = ("deadline_ns", "seq", "timer", "on_heap")

    def __init__(self, deadline_ns: int, seq: int, timer: Timer):
        self.deadline_ns = deadline_ns
        self.seq = seq
        self.timer: Timer | None = timer
        self.on_heap = True


class HeapItem(NamedTuple):
    """What the heap holds for one :class:`TimerEntry`: ordered as a tuple,
    by deadline, then ``seq`` (unique, so ``entry`` is never compared)."""

    deadline_ns: int
    seq: int
    entry: TimerEntry


class Timer:
    """A one-shot timer.  ``callback(timer)`` runs on the reactor thread.

    Create with ``Reactor.timer(callback, data)``.  ``arm_us(delay_us)`` arms it
    ``delay_us`` microseconds from now (re-arming replaces the deadline);
    ``arm_at_ns(deadline_ns)`` uses an absolute reactor-clock deadline;
    ``cancel()`` disarms it; ``armed`` tells whether it is pending.
    """

    __slots__ = ("_heap", "callback", "data", "deadline_ns", "_entry")

    def __init__(self, heap: TimerHeap, callback, data=None):
        self._heap = heap
        self.callback = callback
        self.data = data
        self.deadline_ns = 0
        self._entry: TimerEntry | None = None  # the live heap entry, or None when unarmed

    @property
    def armed(self) -> bool:
        return self._entry is not None

    def arm_us(self, delay_us: int | float) -> None:
        """Arm ``delay_us`` microseconds (>= 0) from the reactor clock's now.

        Raises ``ValueError`` for a negative delay.
        """
        if delay_us < 0:
            raise ValueError(f"timer delay must be >= 0 us, got {delay_us!r}")
        self._heap.push(self, self._heap.clock() + int(delay_us * 1000))

    def arm_at_ns(self, deadline_ns: int) -> None:
        """Arm at an absolute reactor-clock deadline (ns)."""
        self._heap.push(self, int(deadline_ns))

    def cancel(self) -> None:
        entry = self._entry
        if entry is not None:
            entry.timer = None  # lazy deletion: the popped entry is skipped
            self._entry = None
            if entry.on_heap:  # not taken by the pass running now: one more dead entry
                self._heap.dead += 1


class TimerHeap:
    """The reactor's timers.  ``clock`` returns ns; see the module docstring."""

    def __init__(self, clock):
        self.clock = clock
        self._heap: list[HeapItem] = []
        self._seq = itertools.count()
        # Compaction heuristic: entries in _heap whose timer was cancelled or re-armed
        # (an interrupt inside a pass can leave it off by one; _compact recounts).
        self.dead = 0
        # The pass list: entries taken off the heap by take_due for the pass running now.
        # Empty between passes, except after a pass an exception cut short (_restore).
        self._due: list[TimerEntry] = []

    #: Below this many dead entries a rebuild is not worth it.
    COMPACT_MIN = 64

    def push(self, timer: Timer, deadline_ns: int) -> None:
        timer.cancel()
        if self.dead > self.COMPACT_MIN and self.dead * 2 > len(self._heap):
            self._compact()
        entry = TimerEntry(deadline_ns, next(self._seq), timer)
        timer.deadline_ns = deadline_ns
        timer._entry = entry
        heapq.heappush(self._heap, HeapItem(deadline_ns, entry.seq, entry))

    def _compact(self) -> None:
        """Drop dead entries and restore the heap property (order is kept by (deadline, seq))."""
        self._heap = [item for item in self._heap if item.entry.timer is not None]
        heapq.heapify(self._heap)
        self.dead = 0

    def next_deadline(self) -> int | None:
        """Earliest live deadline (ns), or None.  Pops dead entries off the top; moves no live one.

        Timers left on the pass list by a pass cut short count too: they are
        due, so the reactor does not wait before the next pass fires them.
        """
        heap = self._heap
        while heap and heap[0].entry.timer is None:
            heapq.heappop(heap)
            self.dead -= 1
        top = heap[0].deadline_ns if heap else None
        if self._due:  # a pass is running, or was cut short (take_due puts the rest back)
            for entry in self._due:
                if entry.timer is not None and (top is None or entry.deadline_ns < top):
                    top = entry.deadline_ns
        return top

    def __len__(self) -> int:
        """Armed timers: live entries on the heap and on the pass list (not yet fired).

        Reads only: a callback may ask while its pass runs.
        """
        on_heap = {id(item.entry) for item in self._heap if item.entry.timer is not None}
        return len(on_heap) + sum(1 for e in self._due if e.timer is not None and id(e) not in on_heap)

    def take_due(self, now_ns: int) -> list[TimerEntry]:
        """Move the entries due at ``now_ns`` to the pass list and return it.

        The caller fires them in list order, which is deadline order, ties in
        arm order: for each entry whose timer is not ``None`` (``None``: it was
        cancelled or re-armed by an earlier callback of the pass), it sets
        ``entry.timer = None`` and ``timer._entry = None`` and calls the
        callback, with nothing in between that calls out, and it empties the
        list when the pass is done.  A timer armed or re-armed during the pass
        goes on the heap, so it waits for the next pass.
        """
        if self._due:
            self._restore()
        heap = self._heap
        due = self._due
        while heap and heap[0].deadline_ns <= now_ns:
            entry = heap[0].entry
            if entry.timer is not None:
                entry.on_heap = False  # off the heap: a cancel during the pass is not a dead entry
                due.append(entry)  # listed before it leaves the heap: an interrupt loses neither
            else:
                self.dead -= 1
            heapq.heappop(heap)
        return due

    def _restore(self) -> None:
        """Put the entries of a pass cut short and not fired back on the heap.

        Idempotent, so that a second interrupt during it loses nothing either:
        an entry already back on the heap (or never off it) is not pushed twice.
        """
        heap = self._heap
        on_heap = {id(item.entry) for item in heap}
        for entry in self._due:
            if entry.timer is not None:  # not fired and not cancelled
                entry.on_heap = True
                if id(entry) not in on_heap:
                    heapq.heappush(heap, HeapItem(entry.deadline_ns, entry.seq, entry))
                    on_heap.add(id(entry))
        self._due.clear()
