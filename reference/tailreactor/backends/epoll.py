"""epoll backend: stdlib ``select.epoll`` with ``EPOLLONESHOT``.

Role
----
Implements :mod:`tailreactor.backends.base` on Linux epoll.  One epoll
registration per fd carries both directions; ``EPOLLONESHOT`` gives CWIST's
one-shot model (after one report the fd is disabled until re-armed with
``EPOLL_CTL_MOD``).  Arming is synchronous: every ``arm`` is one
``epoll_ctl`` call, so ``flush`` has nothing to do.

Why level-triggered one-shot and not ``EPOLLET | EPOLLONESHOT`` as in CWIST:
with ONESHOT both report readiness that exists at arm time (a MOD re-evaluates
the fd), so the semantics are the same and level-triggered is easier to read.

Why re-MOD after a partial report: ONESHOT disables the *whole* registration
when it fires.  If read fired while write was also armed, the write interest
would be lost, so the backend re-arms what is still wanted (rare: the HTTP
server arms one direction at a time).

An fd closed while armed (without ``disarm``)
---------------------------------------------
The kernel keys a registration by (fd number, open file) and drops it when
the file's last descriptor closes, so the interest vanishes silently: the
event is never reported, the peer sees the close at once, and the reactor
still lists the event as armed until that fd number is disarmed or armed
again (``_apply`` then registers afresh).  If the file lives on in another
descriptor (``dup``, ``fork``), the registration survives and keeps
reporting under the closed number -- epoll(7) Q6.  Always disarm first
(``tests/test_reliability_faults.py`` pins this behaviour).

Source: epoll_ctl(2), epoll(7) "EPOLLONESHOT" and Q6.
"""

from __future__ import annotations

import errno
import os
import select

from .base import MAX_BATCH, READ, RDHUP, SATISFIES, WRITE, check_direction, closed_error

_ONESHOT = select.EPOLLONESHOT
_IN = select.EPOLLIN | RDHUP
_OUT = select.EPOLLOUT


class EpollBackend:
    """One-shot readiness on ``select.epoll``.  See the module docstring.

    ``max_batch`` bounds one ``wait`` (events not returned stay queued in the
    kernel's ready list for the next wait).
    """

    name = "epoll"

    def __init__(self, max_batch: int = MAX_BATCH):
        self._ep = select.epoll()
        self._max_batch = max_batch
        # The wake fd is level-triggered and never one-shot: a wake that lands
        # while we are not waiting is still seen by the next wait.
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._ep.register(self._wake_fd, select.EPOLLIN)
        # fd -> [read_token, write_token, registered]
        self._fds: dict[int, list] = {}
        self._closed = False
        self.ctl_calls = 0
        self.waits = 0

    # -- arming ---------------------------------------------------------------
    def arm(self, fd: int, direction: int, token: object) -> None:
        if self._closed:
            raise closed_error(self.name)
        check_direction(direction)
        rec = self._fds.get(fd)
        if rec is None:
            rec = self._fds[fd] = [None, None, False]
        old = rec[direction - 1]
        rec[direction - 1] = token
        try:
            self._apply(fd, rec)
        except OSError as exc:
            rec[direction - 1] = old
            if exc.errno == errno.EBADF:
                raise OSError(errno.EBADF, f"cannot arm fd {fd}: not an open file descriptor") from None
            raise OSError(exc.errno, f"cannot arm fd {fd} for epoll: {exc.strerror}") from None

    def _apply(self, fd: int, rec: list) -> None:
        mask = _ONESHOT | (_IN if rec[0] is not None else 0) | (_OUT if rec[1] is not None else 0)
        self.ctl_calls += 1
        if rec[2]:
            try:
                self._ep.modify(fd, mask)
                return
            except FileNotFoundError:
                # The fd was closed (the kernel dropped its registration) and
                # the number reused: register afresh.
                pass
        try:
            self._ep.register(fd, mask)
        except FileExistsError:
            self._ep.modify(fd, mask)
        rec[2] = True

    def disarm(self, fd: int, direction: int) -> None:
        if self._closed:
            raise closed_error(self.name)
        check_direction(direction)
        rec = self._fds.get(fd)
        if rec is None or rec[direction - 1] is None:
            return
        rec[direction - 1] = None
        if rec[0] is None and rec[1] is None:
            # Nothing wanted: remove the registration so a closed-then-reused
            # fd number starts clean.  ENOENT/EBADF mean it is already gone.
            del self._fds[fd]
            self.ctl_calls += 1
            try:
                self._ep.unregister(fd)
            except OSError:
                pass
        else:
            try:
                self._apply(fd, rec)
            except OSError:
                pass

    # -- waiting --------------------------------------------------------------
    def wait(self, timeout_s: float | None) -> list[tuple[object, int]]:
        if self._closed:
            raise closed_error(self.name)
        self.waits += 1
        # select.epoll.poll retries on EINTR itself (PEP 475) and rounds the
        # timeout up to whole milliseconds, so it never returns early.
        events = self._ep.poll(-1 if timeout_s is None else timeout_s, self._max_batch)
        out: list[tuple[object, int]] = []
        fds = self._fds
        for fd, revents in events:
            if fd == self._wake_fd:
                try:
                    os.eventfd_read(self._wake_fd)
                except BlockingIOError:
                    pass
                continue
            rec = fds.get(fd)
            if rec is None:
                continue
            rtok, wtok = rec[0], rec[1]
            if rtok is not None and revents & SATISFIES[READ]:
                out.append((rtok, revents))
                rec[0] = rtok = None
            if wtok is not None and revents & SATISFIES[WRITE]:
                out.append((wtok, revents))
                rec[1] = wtok = None
            if rtok is not None or wtok is not None:
                try:
                    self._apply(fd, rec)
                except OSError:
                    pass
        return out

    def flush(self) -> int:
        if self._closed:
            raise closed_error(self.name)
        return 0  # arming is synchronous: nothing is ever queued

    def wake(self) -> None:
        try:
            os.eventfd_write(self._wake_fd, 1)
        except (OSError, ValueError):
            pass  # closed concurrently: nothing left to wake

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ep.close()
        os.close(self._wake_fd)
        self._fds.clear()
