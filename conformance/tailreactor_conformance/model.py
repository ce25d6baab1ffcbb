"""Small pure models the reactor is checked against (no I/O, no clock of their own).

Role
----
* :func:`age_order` -- the dispatch order of one round under age-based
  dispatch (clauses R10-R13), written as the rule the clause states, not as
  the reactor implements it (no cursors, no sorting: a scan per delivery).
* :data:`POLICY_MODELS` -- the same for every shipped dispatch policy
  (clause R26), by its ``CWIST_REACTOR_POLICY`` name, each the rule its
  module states first, as a scan per delivery.
* :class:`Model` -- what a reactor must do with a program of arm, disarm,
  write, read, close, timer, cancel, clock, post and run steps (clause R20):
  which events may be delivered, which timers fire and in what order, which
  posts run.  :mod:`.driver` runs the same program on a real reactor and asks
  the model about every delivery.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["age_order", "POLICY_MODELS", "policy_model", "Model", "PairState"]

K = TypeVar("K", bound=Hashable)  # an event's key in age_order


def age_order(
    backend_order: list[K],
    stamps: dict[K, int],
    tail_ns: int,
    start_ns: int,
    advance_ns: dict[K, int] | None = None,
) -> list[tuple[K, bool]]:
    """The events of one batch in dispatch order, each with its ``dispatch_late`` flag.

    ``backend_order``: event keys as the backend reported them; ``stamps``:
    key -> age stamp (ns; arm stamp, or the round start under AGE_FROM=ready);
    ``tail_ns``: CWIST_REACTOR_TAIL_US in ns (0 = off); ``start_ns``: the clock
    at round start; ``advance_ns``: key -> how far that event's callback moves
    the clock (a slow callback).

    Rule (clause R10): before each delivery, if the oldest remaining event
    (ties: earlier in backend order) has age >= tail_ns, it runs and is late;
    otherwise the first remaining event in backend order runs, not late.
    """
    advance_ns = advance_ns or {}
    remaining = list(backend_order)
    now = start_ns
    out = []
    while remaining:
        if tail_ns > 0:
            oldest = min(remaining, key=lambda k: (stamps[k], remaining.index(k)))
            if now - stamps[oldest] >= tail_ns:
                nxt, late = oldest, True
            else:
                nxt, late = remaining[0], False
        else:
            nxt, late = remaining[0], False
        remaining.remove(nxt)
        out.append((nxt, late))
        now += advance_ns.get(nxt, 0)
    return out


def _scan(
    backend_order: list[K], advance_ns: dict[K, int] | None, start_ns: int, pick
) -> list[tuple[K, bool]]:
    """Deliver ``backend_order`` one event at a time: ``pick(remaining, now)`` -> (key, late)."""
    advance_ns = advance_ns or {}
    remaining = list(backend_order)
    now = start_ns
    out = []
    while remaining:
        nxt, late = pick(remaining, now)
        remaining.remove(nxt)
        out.append((nxt, late))
        now += advance_ns.get(nxt, 0)
    return out


def backend_model(backend_order, stamps, hints, tail_ns, start_ns, advance_ns=None):
    """``backend``: the first remaining event in backend order runs; none is late."""
    return [(k, False) for k in backend_order]


def age_model(backend_order, stamps, hints, tail_ns, start_ns, advance_ns=None):
    """``age``: :func:`age_order` (clause R10)."""
    return age_order(backend_order, stamps, tail_ns, start_ns, advance_ns)


def oldest_model(backend_order, stamps, hints, tail_ns, start_ns, advance_ns=None):
    """``oldest``: the remaining event with the oldest stamp runs, ties in backend order; none is late."""

    def pick(remaining, now):
        return min(remaining, key=lambda k: (stamps[k], backend_order.index(k))), False

    return _scan(backend_order, advance_ns, start_ns, pick)


def lifo_model(backend_order, stamps, hints, tail_ns, start_ns, advance_ns=None):
    """``lifo``: if the oldest remaining event has age >= ``tail_ns`` (> 0), the newest
    remaining runs (latest stamp, ties: the later in backend order); else the first
    remaining in backend order.  None is late."""

    def pick(remaining, now):
        by_age = sorted(remaining, key=lambda k: (stamps[k], backend_order.index(k)))
        if tail_ns > 0 and now - stamps[by_age[0]] >= tail_ns:
            return by_age[-1], False
        return remaining[0], False

    return _scan(backend_order, advance_ns, start_ns, pick)


def shortest_model(backend_order, stamps, hints, tail_ns, start_ns, advance_ns=None):
    """``shortest``: the remaining event with the smallest hint runs, ties in backend order."""

    def pick(remaining, now):
        return min(remaining, key=lambda k: (hints[k], backend_order.index(k))), False

    return _scan(backend_order, advance_ns, start_ns, pick)


#: The model of each shipped policy, by name: ``model(backend_order, stamps, hints,
#: tail_ns, start_ns, advance_ns)`` -> ``[(key, late), ...]`` in delivery order
#: (``stamps``: key -> the stamp AGE_FROM names; ``hints``: key -> ``Event.hint``).
POLICY_MODELS = {
    "backend": backend_model,
    "age": age_model,
    "oldest": oldest_model,
    "lifo": lifo_model,
    "shortest": shortest_model,
}


def policy_model(policy_class):
    """The model a policy class is checked against (clause R26), or None.

    Its own ``model`` attribute (a function of :data:`POLICY_MODELS`'
    signature: a third party's order states its rule that way), else the
    shipped policy's of its ``name``.
    """
    own = getattr(policy_class, "model", None)
    if own is not None:
        return own
    return POLICY_MODELS.get(getattr(policy_class, "name", None))


@dataclass
class PairState:
    """One socketpair as the model sees it.

    ``woke``: the fd was readable at some moment since it was armed.  A
    delivery needs that, not readability *now*: io_uring's POLL_ADD completes
    with the readiness seen when the socket woke it, so data read by someone
    else before the reap still yields a (stale) report -- readiness is a hint
    and a callback must handle EAGAIN.  What must be delivered (``owed``) is
    an armed event whose fd is readable now.
    """

    pending: int = 0  # bytes written by the peer and not read yet
    peer_closed: bool = False
    armed: object = None  # the Event currently armed for READ, or None
    woke: bool = False

    @property
    def readable(self) -> bool:
        return self.pending > 0 or self.peer_closed


@dataclass
class Model:
    """The expected behaviour of a reactor under a program (clause R20).

    Times are the test's ManualClock in ns.  ``violations`` collects every
    disagreement as one line; the driver asserts it stays empty.
    """

    pairs: dict[int, PairState] = field(default_factory=dict)  # pair id -> state
    timers: dict[int, tuple[int, int]] = field(default_factory=dict)  # timer id -> (deadline, seq)
    posts: list[int] = field(default_factory=list)  # post ids queued, FIFO
    seq: int = 0
    violations: list[str] = field(default_factory=list)

    # -- steps ------------------------------------------------------------------
    def open(self, pid: int) -> None:
        self.pairs[pid] = PairState()

    def arm(self, pid: int, event) -> None:
        st = self.pairs[pid]
        st.armed = event  # replaces any earlier arming
        st.woke = st.readable

    def disarm(self, pid: int) -> None:
        self.pairs[pid].armed = None

    def write(self, pid: int, n: int) -> None:
        st = self.pairs[pid]
        st.pending += n
        st.woke = st.armed is not None

    def read_all(self, pid: int) -> None:
        self.pairs[pid].pending = 0

    def close_peer(self, pid: int) -> None:
        st = self.pairs[pid]
        st.peer_closed = True
        st.woke = st.armed is not None

    def close(self, pid: int) -> None:
        del self.pairs[pid]

    def timer(self, tid: int, deadline_ns: int) -> None:
        self.seq += 1
        self.timers[tid] = (deadline_ns, self.seq)

    def cancel(self, tid: int) -> None:
        self.timers.pop(tid, None)

    def post(self, post_id: int) -> None:
        self.posts.append(post_id)

    # -- expectations --------------------------------------------------------------
    def delivered(self, pid: int, event) -> None:
        """An I/O callback ran for ``event`` of pair ``pid``: was it allowed?"""
        st = self.pairs.get(pid)
        if st is None:
            self.violations.append(f"pair {pid}: callback ran after its fd was closed")
        elif st.armed is not event:
            self.violations.append(
                f"pair {pid}: a callback ran for an event that is not the armed "
                f"one (disarmed, replaced or delivered already)"
            )
        elif not (st.readable or st.woke):
            self.violations.append(
                f"pair {pid}: callback ran although the fd was never readable since it was armed"
            )
        else:
            st.armed = None  # one-shot
            st.woke = False

    def due_timers(self, now_ns: int) -> list[int]:
        """Timer ids that must fire in a pass at ``now_ns``, in firing order; removes them."""
        due = sorted((v, tid) for tid, v in self.timers.items() if v[0] <= now_ns)
        for _, tid in due:
            del self.timers[tid]
        return [tid for _, tid in due]

    def take_posts(self) -> list[int]:
        out, self.posts = self.posts, []
        return out

    def owed(self) -> list[int]:
        """Pairs whose armed event must eventually be delivered (armed and readable)."""
        return [pid for pid, st in self.pairs.items() if st.armed is not None and st.readable]
