"""epoll backend: stdlib ``select.epoll``, one-shot in user space, lazy ``epoll_ctl``.

Role
----
Implements :mod:`tailreactor.backends.base` on Linux epoll.  One epoll
registration per fd carries both directions.  The one-shot model (a token is
reported once, then gone until armed again) is kept in user space: the
backend forgets a token when it reports it.  The kernel registration is
*level-triggered and persistent*, and it is changed only when it must be.

Why not ``EPOLLONESHOT`` (as in CWIST)
-------------------------------------
With ``EPOLLONESHOT`` every re-arm is an ``EPOLL_CTL_MOD``: one syscall per
request on a keep-alive connection, on top of its ``recv`` and ``send``.
asyncio and libuv keep an fd registered while it is watched and pay nothing
to keep watching it.  Here the common cycle -- report READ, the callback
reads, answers and re-arms READ -- costs no ``epoll_ctl`` at all: the re-arm
only stores the token, because the kernel still watches the fd for reading.
One ``epoll_ctl`` per request would be a syscall on every request's path, as
costly as its ``recv`` or ``send``.

The registration follows the tokens lazily:

* **rearm** -- the reactor's arm from inside the callback of the event just
  reported for that fd -- stores the token.  It calls ``epoll_ctl`` only when
  the kernel does not watch that direction (the other direction, or after the
  registration was narrowed).  **arm** from anywhere else always makes one
  ``epoll_ctl`` (see "Closed fds" below).
* **wait** reports a token when its direction is ready and forgets it.  A
  level-triggered fd that is still ready is reported again by the next wait;
  if no token wants what was reported, the registration is *narrowed* then
  (``EPOLL_CTL_MOD`` to what is still armed).  With nothing armed it becomes
  ``EPOLLONESHOT`` with no events: HUP and ERR, which epoll always reports,
  then come at most once.  So an fd ready but not armed costs one extra
  report and one ``epoll_ctl``, and is never reported in a loop.
* **disarm** with nothing left armed removes the registration
  (``EPOLL_CTL_DEL``), so a closed-then-reused number starts clean.

Readiness that exists at arm time is still reported (clause B2): either the
``epoll_ctl`` re-checks it, or the fd never left the kernel's ready list
(level-triggered).

Closed fds (clause B16)
-----------------------
``epoll_ctl`` on a closed fd fails with ``EBADF``, so an arm that makes the
call raises it, and on a number that was closed without disarm and reused it
fails with ``ENOENT``, so the arm registers the new file afresh, for its own
direction alone: an arming of the other direction was made for the closed
file and is dropped with it, never reported for the file that took the
number (clause B5).  The re-arm
that skips the call is taken only from inside the fd's own callback, for an fd
the latest ``wait`` reported: its registration was alive a moment ago, and
only that callback could have closed it since.  Any other arm makes the
call even for a just-reported fd: a new socket that reuses the number of one
closed without disarm, armed in the same round, must be registered afresh
or it is never reported (``tests/test_backend_syscalls.py``).  The one
case left unseen is a callback that closes its own fd without disarm and then
arms that number again; closing before disarming is the caller's bug
(below), as in asyncio and libuv.

An fd closed while armed (without ``disarm``)
---------------------------------------------
The kernel keys a registration by (fd number, open file) and drops it when
the file's last descriptor closes, so the interest vanishes silently: the
event is never reported, the peer sees the close at once, and the reactor
still lists the event as armed until that fd number is disarmed or armed
again (in a later round the arm makes an ``epoll_ctl``, finds the
registration gone and registers afresh).  If the file lives on in another
descriptor (``dup``, ``fork``, SCM_RIGHTS), the registration survives and
keeps reporting under the closed number -- epoll(7) Q6 -- and nothing can
remove it: ``epoll_ctl`` finds a registration by number *and* file.  While
the number is not armed again, such a report reaches the closed file's token
(the caller's bug: the C header's "An armed fd closed without disarm").  Once
the backend has found a number naming another file (``ENOENT`` from
``EPOLL_CTL_MOD``, a failed ``EPOLL_CTL_DEL``), it checks every later report
under that number with a ``poll`` of the file the number names now
(:func:`.base.ready_now`), so the old file's readiness never reaches a token
armed for the new one (clause B5).  ``select.epoll`` keeps only the fd number
in ``epoll_data``, so a generation beside it (the C example's way) is not
available here.  The old file's level-triggered registration still ends
waits early, with nothing, while that file stays ready.  Always disarm first
(``tests/test_reliability_faults.py`` pins this behaviour).

Sources: epoll_ctl(2), epoll(7) (level-triggered, "EPOLLONESHOT", Q6).
"""

from __future__ import annotations

import errno
import os
import select
import threading

from .base import (
    MAX_BATCH,
    RDHUP,
    READ,
    SATISFIES,
    WAIT_MAX_S,
    WRITE,
    check_direction,
    closed_error,
    not_open_error,
    ready_now,
)

_ONESHOT = select.EPOLLONESHOT
_IN = select.EPOLLIN | RDHUP
_OUT = select.EPOLLOUT
#: Kernel interest per direction.
_BIT = {READ: _IN, WRITE: _OUT}
_READY_READ = SATISFIES[READ]
_READY_WRITE = SATISFIES[WRITE]


class _FdRecord:
    """What the backend holds for one registered fd.

    ``tokens``: the token armed for READ and for WRITE (by ``direction -
    1``; None = not armed).  ``mask``: the interest the kernel holds (0 =
    none, or disabled).  ``reported_in``: the number of the latest wait that
    reported the fd (as io_uring's ``_Operation.reported_in``).
    """

    __slots__ = ("tokens", "mask", "reported_in")

    def __init__(self):
        self.tokens = [None, None]
        self.mask = 0
        self.reported_in = 0


class EpollBackend:
    """One-shot readiness on ``select.epoll``.  See the module docstring.

    ``max_batch`` bounds one ``wait`` (events not returned stay queued in the
    kernel's ready list for the next wait).  ``ctl_calls`` counts
    ``epoll_ctl`` calls and ``waits`` the waits (tests and benchmarks read them).
    """

    name = "epoll"
    #: Capability (base.py): the kernel's ready list keeps readiness order (epoll(7)).
    ordered = True

    def __init__(self, max_batch: int = MAX_BATCH):
        self._ep = select.epoll()
        self._max_batch = max_batch
        self.max_batch = max_batch  # capability (base.py): epoll_wait's maxevents
        # The wake fd is level-triggered and always registered: a wake that
        # lands while we are not waiting is still seen by the next wait.
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._ep.register(self._wake_fd, select.EPOLLIN)
        # wake() may come from any thread while close() runs: both hold this lock around
        # the eventfd, so a wake never writes to its number once close() released it.
        self._wake_lock = threading.Lock()
        self._fds: dict[int, _FdRecord] = {}
        # Numbers whose registration the backend lost while the kernel may keep it: the file
        # closed without disarm and alive elsewhere (module docstring).  Checked at each report.
        self._reused: set[int] = set()
        # What the wait running now has taken (tokens forgotten) and not yet returned.
        # Kept here, not in a local: a wait cut short by a signal handler's
        # KeyboardInterrupt returns them from the next wait (clause R21).
        self._reported: list[tuple[object, int]] = []
        self._closed = False
        self.ctl_calls = 0
        self.waits = 0

    # -- arming ---------------------------------------------------------------
    def rearm(self, fd: int, direction: int, token: object) -> None:
        """:meth:`arm`, from inside the callback of the event the latest wait reported for ``fd``.

        The reactor calls it only there.  If the kernel still watches this
        direction, storing the token is the whole arm (module docstring): the
        fd was open a moment ago and only its own callback could have closed
        it since.  A bad direction has no bit and takes the checked path.
        """
        rec = self._fds.get(fd)
        if rec is not None and rec.reported_in == self.waits and rec.mask & _BIT.get(direction, 0):
            rec.tokens[direction - 1] = token
            return
        self.arm(fd, direction, token)

    def arm(self, fd: int, direction: int, token: object) -> None:
        """Arm with one ``epoll_ctl``: an arm from anywhere but the fd's own
        callback cannot know the number still names the file the kernel
        watches (closed and reused without disarm), and the call finds out."""
        if self._closed:
            raise closed_error(self.name)
        check_direction(direction)
        rec = self._fds.get(fd)
        new = rec is None
        if rec is None:
            rec = _FdRecord()
        old = list(rec.tokens)
        rec.tokens[direction - 1] = token
        try:
            self._register(fd, rec, new, direction)
        except OSError as exc:
            rec.tokens = old
            if exc.errno == errno.EBADF:
                raise not_open_error(fd) from None
            raise OSError(exc.errno, f"cannot arm fd {fd} for epoll: {exc.strerror}") from None
        if new:
            self._fds[fd] = rec

    def _register(self, fd: int, rec: _FdRecord, new: bool = False, fresh: int | None = None) -> None:
        """Make the kernel watch exactly the armed directions: one ``epoll_ctl``.

        With nothing armed the registration stays, disabled: ``EPOLLONESHOT``
        with no events, so HUP or ERR (which epoll always reports) come once.
        ``fresh`` is the direction the calling arm armed, the one arming known
        to be for the file the number names now.
        """
        mask = self._mask(rec)
        kernel = mask if mask else _ONESHOT
        self.ctl_calls += 1
        if new:
            try:
                self._ep.register(fd, kernel)
            except FileExistsError:  # registered by an earlier owner of the number
                self._ep.modify(fd, kernel)
        else:
            try:
                self._ep.modify(fd, kernel)
            except FileNotFoundError:
                # The fd was closed without disarm (the kernel dropped its
                # registration) and the number reused: the armings made for the
                # closed file go with it; register the new file afresh.
                self._reused.add(fd)
                rec.tokens[:] = [tok if d == fresh else None for d, tok in zip((READ, WRITE), rec.tokens)]
                mask = self._mask(rec)
                self._ep.register(fd, mask if mask else _ONESHOT)
        rec.mask = mask

    @staticmethod
    def _mask(rec: _FdRecord) -> int:
        read, write = rec.tokens
        return (_IN if read is not None else 0) | (_OUT if write is not None else 0)

    def disarm(self, fd: int, direction: int) -> None:
        if self._closed:
            raise closed_error(self.name)
        check_direction(direction)
        rec = self._fds.get(fd)
        if rec is None:
            return
        rec.tokens[direction - 1] = None
        # Also when the token was already reported: disarm is the owner's
        # "done with this fd" before a close, and the registration must go.
        if rec.tokens == [None, None]:
            # Nothing wanted: remove the registration so a closed-then-reused
            # fd number starts clean.  ENOENT/EBADF mean it is already gone.
            del self._fds[fd]
            self.ctl_calls += 1
            try:
                self._ep.unregister(fd)
            except OSError:
                self._reused.add(fd)  # closed, or names another file: the old one may live on
        # Disarming one direction of two leaves the kernel watching both: the
        # next unwanted report narrows it (module docstring).

    # -- waiting --------------------------------------------------------------
    def wait(self, timeout_s: float | None) -> list[tuple[object, int]]:
        if self._closed:
            raise closed_error(self.name)
        self.waits += 1
        out = self._reported
        if out:  # a wait cut short took these: hand them over now, with what is ready
            timeout_s = 0
        # select.epoll.poll retries on EINTR itself (PEP 475) and rounds the
        # timeout up to whole milliseconds, so it never returns early.  Events
        # it returns and an interrupt loses before _report stores them are not
        # lost: level-triggered, the next poll reports them again.
        timeout = -1 if timeout_s is None else min(timeout_s, WAIT_MAX_S)  # base.py: clamped, never refused
        self._report(self._ep.poll(timeout, self._max_batch), None)
        self._reported = []
        return out

    def harvest(self, max_events: int) -> list[tuple[object, int]]:
        """What is ready now, without blocking (``epoll_wait(..., 0)``): at most ``max_events`` reports.

        Part of the round of the latest wait (the reactor merges it into that
        round): it keeps that wait's number, so a harvested fd's own callback
        takes the cheap :meth:`rearm`.  It changes no registration: an fd the
        round's wait reported whose callback has not run yet is still ready
        and shows here unwanted, and narrowing it would cost two
        ``epoll_ctl`` calls when that callback re-arms; any other unwanted
        report the next wait narrows.  The wake fd stays set for the next
        wait, and a wanted report past ``max_events`` stays armed
        (level-triggered: the next wait reports it).
        """
        if self._closed:
            raise closed_error(self.name)
        out = self._reported
        self._report(self._ep.poll(0, self._max_batch), max_events)
        self._reported = []
        return out

    def _report(self, events, limit: int | None) -> None:
        """Turn one poll's ``(fd, revents)`` into ``(token, revents)`` reports in ``_reported``, at most ``limit``.

        The one report loop of :meth:`wait` (``limit`` None) and
        :meth:`harvest`.  A token wanted by what was reported is listed and
        forgotten, and its fd is marked reported in the latest wait.  Only a
        wait reads the wake fd and narrows a registration nobody wanted a
        report of (module docstring), so that a ready fd is not reported
        round after round; a harvest leaves both to the next wait.
        """
        out = self._reported  # kept on the backend until the caller returns it (clause R21)
        append = out.append
        fds = self._fds
        waits = self.waits
        reused = self._reused
        for fd, revents in events:
            rec = fds.get(fd)
            if rec is None:
                if fd == self._wake_fd and limit is None:
                    try:
                        os.eventfd_read(fd)
                    except BlockingIOError:
                        pass
                continue  # the wake fd, or an fd disarmed since
            if fd in reused:
                revents &= ready_now(fd)
                if not revents:
                    continue  # a closed file's registration under the number (module docstring)
            tokens = rec.tokens
            wanted = False
            # Listed before forgotten: an interrupt in between lists it twice at
            # worst (the reactor runs an event once: it takes only ARMED ones).
            tok = tokens[0]
            if tok is not None and revents & _READY_READ and (limit is None or len(out) < limit):
                append((tok, revents))
                tokens[0] = None
                wanted = True
            tok = tokens[1]
            if tok is not None and revents & _READY_WRITE and (limit is None or len(out) < limit):
                append((tok, revents))
                tokens[1] = None
                wanted = True
            if wanted:
                rec.reported_in = waits
            elif limit is None and (rec.mask or tokens != [None, None]):
                # (Mask 0 with nothing armed: the disabled registration fired
                # its one HUP/ERR and the kernel disabled it again.)
                try:
                    self._register(fd, rec)
                except OSError:
                    pass

    def flush(self) -> int:
        if self._closed:
            raise closed_error(self.name)
        return 0  # arming is synchronous: nothing is ever queued

    def wake(self) -> None:
        with self._wake_lock:
            if self._closed:
                return  # the eventfd's number may name another file now (clause B13)
            try:
                os.eventfd_write(self._wake_fd, 1)
            except (OSError, ValueError):
                pass  # the counter is full: a wake is pending anyway

    def close(self) -> None:
        if self._closed:
            return
        with self._wake_lock:
            self._closed = True
        self._ep.close()
        os.close(self._wake_fd)
        self._fds.clear()
        self._reused.clear()
