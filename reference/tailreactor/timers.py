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
"""

from __future__ import annotations

import heapq
import itertools


class Timer:
    """A one-shot timer.  ``callback(timer)`` runs on the reactor thread.

    Create with ``Reactor.timer(callback, data)``.  ``arm_us(delay_us)`` arms it
    ``delay_us`` microseconds from now (re-arming replaces the deadline);
    ``arm_at_ns(deadline_ns)`` uses an absolute reactor-clock deadline;
    ``cancel()`` disarms it; ``armed`` tells whether it is pending.
    """

    __slots__ = ("_heap", "callback", "data", "deadline_ns", "_entry")

    def __init__(self, heap: "TimerHeap", callback, data=None):
        self._heap = heap
        self.callback = callback
        self.data = data
        self.deadline_ns = 0
        self._entry = None  # the live heap entry, or None when unarmed

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
            entry[2] = None  # lazy deletion: the popped entry is skipped
            self._entry = None
            if entry[3]:  # still on the heap (not taken by the pass running now): one more dead entry
                self._heap.dead += 1


class TimerHeap:
    """The reactor's timers.  ``clock`` returns ns; see the module docstring."""

    def __init__(self, clock):
        self.clock = clock
        # [deadline_ns, seq, timer or None, on_heap]; (deadline, seq) orders them, seq is unique.
        self._heap: list[list] = []
        self._seq = itertools.count()
        self.dead = 0  # entries in _heap whose timer was cancelled or re-armed

    #: Below this many dead entries a rebuild is not worth it.
    COMPACT_MIN = 64

    def push(self, timer: Timer, deadline_ns: int) -> None:
        timer.cancel()
        if self.dead > self.COMPACT_MIN and self.dead * 2 > len(self._heap):
            self._compact()
        entry = [deadline_ns, next(self._seq), timer, True]
        timer.deadline_ns = deadline_ns
        timer._entry = entry
        heapq.heappush(self._heap, entry)

    def _compact(self) -> None:
        """Drop dead entries and restore the heap property (order is kept by (deadline, seq))."""
        self._heap = [e for e in self._heap if e[2] is not None]
        heapq.heapify(self._heap)
        self.dead = 0

    def next_deadline(self) -> int | None:
        """Earliest live deadline (ns), or None."""
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            self.dead -= 1
        return heap[0][0] if heap else None

    def __len__(self) -> int:
        return sum(1 for e in self._heap if e[2] is not None)

    def fire_due(self, now_ns: int, run) -> int:
        """Fire the timers due at ``now_ns`` by calling ``run(timer)``; return how many ran.

        The due entries are taken off the heap first and only then run, so a
        timer armed (or re-armed) by a callback during this pass waits for the
        next pass.  An entry cancelled or replaced by an earlier callback of the
        same pass is skipped: cancel means it will not fire.
        """
        heap = self._heap
        due: list[list] = []
        while heap and heap[0][0] <= now_ns:
            entry = heapq.heappop(heap)
            if entry[2] is not None:
                entry[3] = False  # off the heap: a cancel during the pass is not a dead entry
                due.append(entry)
            else:
                self.dead -= 1
        fired = 0
        for k, entry in enumerate(due):
            timer = entry[2]
            if timer is None:
                continue  # cancelled by an earlier callback of this pass
            entry[2] = None
            timer._entry = None
            fired += 1
            try:
                run(timer)
            except BaseException:
                # run() catches Exceptions; this is KeyboardInterrupt or SystemExit.  The
                # rest of the pass goes back on the heap (same deadline and sequence, so
                # the same order) and fires in a later pass (clause R21).
                for rest in due[k + 1:]:
                    if rest[2] is not None:  # not cancelled meanwhile
                        rest[3] = True
                        heapq.heappush(self._heap, rest)  # not `heap`: a callback may have compacted it
                raise
        return fired
