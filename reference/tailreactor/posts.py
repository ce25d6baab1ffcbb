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

Interrupts (clause R21): :meth:`PostQueue.take` moves the queued posts to the
*drain list*, which belongs to the queue, not to the drain, and the drain
takes each post off that list only right before calling it.  So a
``KeyboardInterrupt`` -- a post's own, or a signal handler's, which can run
wherever Python calls out, also as the lock is released -- leaves the posts
not started on the drain list, and the next drain runs them, before any
queued since.
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
        # The drain list: posts taken by a drain and not started (reactor thread only).
        # Empty between drains, except after a drain an exception cut short.
        self._taken: deque = deque()
        self._lock = threading.Lock()
        self._wake = wake
        self._owner_ident = owner_ident
        self._clock = clock

    def __len__(self) -> int:
        return len(self._q) + len(self._taken)

    def pending(self) -> bool:
        """Whether a post is queued or on the drain list (also the truth value).  The reactor
        calls this method: Python runs a ``__bool__`` written in Python through a type slot,
        in an interpreter frame of its own, where a method call shares the caller's."""
        return bool(self._q or self._taken)

    __bool__ = pending

    def post(self, callback, data=None) -> None:
        if not callable(callback):
            raise TypeError(f"post() needs a callable, got {callback!r}")
        item = (callback, data, self._clock())
        with self._lock:
            was_empty = not self._q
            self._q.append(item)
        if was_empty and threading.get_ident() != self._owner_ident():
            self._wake()

    @property
    def cut_short(self) -> bool:
        """True when a drain cut short (or still running) left posts on the drain
        list: the next :meth:`take` returns only those."""
        return bool(self._taken)

    def take(self) -> deque:
        """Move every queued post to the drain list and return it (oldest first).

        The caller runs the posts from the front, removing each (``del
        items[0]``) right before calling it, with nothing in between that
        calls out.  After a drain cut short, the drain list still holds its
        posts not started: the next drain runs just those, and the queue
        waits for the drain after (merging the two would leave a moment where
        a post is in both, and a signal there would run it twice).  The
        swap below cannot leave a post in neither: until both names are
        stored, one deque may serve as both, which loses nothing either.
        """
        with self._lock:
            if not self._taken:
                self._taken, self._q = self._q, self._taken
        return self._taken
