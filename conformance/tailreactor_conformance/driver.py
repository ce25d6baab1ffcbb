"""Run a program of steps on a real reactor and on the model, side by side (clause R20).

Role
----
:class:`Driver` owns one reactor (on the backend under test, with a
ManualClock), real socketpairs and a :class:`~.model.Model`.  Each step
method does the same thing to both; every callback the reactor runs is
checked against the model the moment it runs.  Steps name pairs and timers
by an integer that is taken modulo what is live, so every generated program
is valid and Hypothesis can shrink freely.

Steps: ``open``, ``arm(i)``, ``disarm(i)``, ``write(i, n)``, ``read(i)``,
``close_peer(i)``, ``close(i)``, ``timer(delay_us)``, ``cancel(k)``,
``advance(us)``, ``post(n)``, ``run()``, ``settle()``.
"""

from __future__ import annotations

from tailreactor.backends import READ
from tailreactor.timers import Timer

from .harness import Pair
from .model import Model

__all__ = ["Driver", "STEPS"]

#: Step names and how many integer arguments each takes.
STEPS = {
    "open": 0,
    "arm": 1,
    "disarm": 1,
    "write": 2,
    "read": 1,
    "close_peer": 1,
    "close": 1,
    "timer": 1,
    "cancel": 1,
    "advance": 1,
    "post": 1,
    "run": 0,
    "settle": 0,
}


class Driver:
    """A reactor and the model under the same program.  ``check()`` raises
    ``AssertionError`` listing every disagreement so far."""

    def __init__(self, reactor, clock):
        self.reactor = reactor
        self.clock = clock
        self.model = Model()
        self.pairs: dict[int, Pair] = {}
        self.timers: dict[int, Timer] = {}
        self._ids = 0
        self._fired: list[int] = []
        self._ran_posts: list[int] = []

    def _new_id(self) -> int:
        self._ids += 1
        return self._ids

    def _pair(self, i: int) -> int | None:
        live = sorted(self.pairs)
        return live[i % len(live)] if live else None

    # -- callbacks: checked against the model as they run -------------------------
    def _on_io(self, event) -> None:
        self.model.delivered(event.data, event)

    def _on_timer(self, timer) -> None:
        self._fired.append(timer.data)

    def _on_post(self, post_id) -> None:
        self._ran_posts.append(post_id)

    # -- steps -----------------------------------------------------------------------
    def open(self) -> None:
        pid = self._new_id()
        self.pairs[pid] = Pair()
        self.model.open(pid)

    def arm(self, i: int) -> None:
        pid = self._pair(i)
        if pid is not None:
            ev = self.reactor.arm(self.pairs[pid].fd, READ, self._on_io, pid)
            self.model.arm(pid, ev)

    def disarm(self, i: int) -> None:
        pid = self._pair(i)
        if pid is not None:
            self.reactor.disarm(self.pairs[pid].fd, READ)
            self.model.disarm(pid)

    def write(self, i: int, n: int) -> None:
        pid = self._pair(i)
        if pid is not None and not self.model.pairs[pid].peer_closed:
            self.pairs[pid].peer.send(b"w" * n)
            self.model.write(pid, n)

    def read(self, i: int) -> None:
        pid = self._pair(i)
        if pid is not None:
            self.pairs[pid].drain()
            self.model.read_all(pid)

    def close_peer(self, i: int) -> None:
        pid = self._pair(i)
        if pid is not None and not self.model.pairs[pid].peer_closed:
            self.pairs[pid].peer.close()
            self.model.close_peer(pid)

    def close(self, i: int) -> None:
        pid = self._pair(i)
        if pid is not None:
            p = self.pairs.pop(pid)
            self.reactor.disarm(p.fd)  # the documented way: disarm, then close
            p.close()
            self.model.close(pid)

    def timer(self, delay_us: int) -> None:
        tid = self._new_id()
        deadline = self.clock() + delay_us * 1000
        self.timers[tid] = self.reactor.call_later_us(delay_us, self._on_timer, tid)
        self.model.timer(tid, deadline)

    def cancel(self, k: int) -> None:
        live = sorted(self.model.timers)
        if live:
            tid = live[k % len(live)]
            self.timers[tid].cancel()
            self.model.cancel(tid)

    def advance(self, us: int) -> None:
        self.clock.advance_us(us)

    def post(self, n: int = 1) -> None:
        """Post ``n`` callbacks in a row (their order is what FIFO is about)."""
        for _ in range(n):
            post_id = self._new_id()
            self.reactor.post(self._on_post, post_id)
            self.model.post(post_id)

    def run(self, timeout_s: float = 0) -> None:
        """One round: timers and posts must match the model exactly."""
        now = self.clock()  # the ManualClock does not move during the round
        want_timers = self.model.due_timers(now)
        want_posts = self.model.take_posts()
        self._fired, self._ran_posts = [], []
        self.reactor.run_once(timeout_s)
        if self._fired != want_timers:
            self.model.violations.append(f"timers fired {self._fired}, model says {want_timers}")
        if self._ran_posts != want_posts:
            self.model.violations.append(f"posts ran {self._ran_posts}, model says {want_posts}")

    def settle(self, max_rounds: int = 50) -> None:
        """Run a round, then more until every armed, readable event was delivered.

        Bounded in rounds, not time: the fds are ready already, so a conforming
        backend reports them in the next wait or two; 50 rounds only matter
        when it never will (and keep Hypothesis's shrinking fast then).
        """
        self.run()  # always one round: queued posts and due timers are checked too
        for _ in range(max_rounds):
            if not self.model.owed():
                break
            self.run(0.002)
        owed = self.model.owed()
        if owed:
            self.model.violations.append(
                f"pairs {owed} armed and readable, not delivered after {max_rounds} rounds"
            )

    # -- checking and cleanup ------------------------------------------------------------
    def check(self) -> None:
        assert not self.model.violations, "reactor disagrees with the model:\n  " + "\n  ".join(
            self.model.violations
        )

    def do(self, step: str, *args: int) -> None:
        getattr(self, step)(*args)

    def close_sockets(self) -> None:
        """Close every socket still open (after the reactor is closed)."""
        for p in self.pairs.values():
            p.close()
        self.pairs.clear()
