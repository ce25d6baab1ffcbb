"""Cross-thread posts: run a callback on the reactor thread, FIFO, exactly once.

Role
----
``post(callback, data)`` may be called from any thread.  Posts run on the
reactor thread, oldest first, each exactly once.  CWIST uses a Treiber MPSC
stack and reverses it on drain; a lock around a deque says the same thing in
Python, where the GIL makes a lock-free stack pointless.

Waking: a post from a foreign thread wakes the backend only when the queue
goes from empty to non-empty (CWIST's rule), because a non-empty queue means a
wake is already on its way or the reactor has not yet waited.  A post from the
reactor thread never wakes: the reactor sees the queue before it waits and
then waits with timeout 0, which saves a syscall on the HTTP server's
continuation path.

Starvation: a drain runs the posts queued when it started.  A post that posts
itself again runs in the *next* drain, so it cannot keep the reactor from
waiting for I/O.
"""

from __future__ import annotations

import threading
from collections import deque


class PostQueue:
    """FIFO of ``(callback, data, posted_ns)``; see the module docstring.

    ``wake`` is the backend's thread-safe wake; ``owner_ident`` returns the
    reactor thread's ident (or None before ``run``); ``clock`` gives ns.
    """

    def __init__(self, wake, owner_ident, clock):
        self._q: deque = deque()
        self._lock = threading.Lock()
        self._wake = wake
        self._owner_ident = owner_ident
        self._clock = clock

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def post(self, callback, data=None) -> None:
        if not callable(callback):
            raise TypeError(f"post() needs a callable, got {callback!r}")
        item = (callback, data, self._clock())
        with self._lock:
            was_empty = not self._q
            self._q.append(item)
        if was_empty and threading.get_ident() != self._owner_ident():
            self._wake()

    def take(self) -> deque:
        """Take every queued post (oldest first), leaving the queue empty."""
        with self._lock:
            items, self._q = self._q, deque()
        return items

    def put_back(self, items: deque) -> None:
        """Return posts taken by :meth:`take` and not run, to the front of the queue, in order.

        For a drain cut short by an exception that is not an ``Exception``
        (clause R21); posts made since the take stay behind them.
        """
        with self._lock:
            items.extend(self._q)
            self._q = items
