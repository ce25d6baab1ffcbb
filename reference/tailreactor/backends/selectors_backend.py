"""selectors backend: the portable stdlib ``selectors`` module, one-shot by hand.

Role
----
A third backend written only against the public :mod:`tailreactor.backends.base`
contract, to show the plug-in path: ``selectors`` has no one-shot mode, so the
backend unregisters a direction when it reports it.  It runs wherever Python
does (``DefaultSelector`` is epoll on Linux, kqueue on BSD/macOS, poll or
select elsewhere; ``SelectorsBackend(selectors.PollSelector)`` picks one).

Capabilities (base.py) per selector
-----------------------------------
``ordered`` (readiness order, clause B9) is what the selector underneath can
keep, so it is declared per selector class in :data:`ORDERED_SELECTORS`:

* ``EpollSelector``: ordered.  ``epoll_wait`` returns the kernel's ready list,
  which is in the order readiness arose; the conformance suite checks it here.
* ``PollSelector``, ``SelectSelector``, ``DevpollSelector``: not ordered.
  They scan an fd array or set and say *that* an fd is ready, never *when*.
* ``KqueueSelector``: not claimed.  kqueue queues activated events in order,
  but this project's CI runs on Linux only, and a claim no run has checked
  is not made.

``max_batch`` is ``None``: one ``select()`` returns every ready fd.

Wake-ups use a non-blocking socketpair (portable, unlike eventfd).
"""

from __future__ import annotations

import os
import selectors
import socket

from .base import IN, OUT, READ, WAIT_MAX_S, WRITE, check_direction, closed_error, not_open_error, ready_now

_SEL_EVENT = {READ: selectors.EVENT_READ, WRITE: selectors.EVENT_WRITE}


#: The selector classes that keep readiness order (the ``ordered`` capability).
ORDERED_SELECTORS = frozenset({"EpollSelector"})
#: The selector classes whose kernel registration goes with the file (closing the last descriptor
#: drops it).  The others (poll, select) keep interest by fd number, so a ready fd is checked
#: against its file (B5).  Here a file closed without disarm while another descriptor keeps it
#: open (a dup, a forked child) stays registered under the number, out of the backend's reach
#: (epoll(7) Q6): a number found naming another file is checked at each report (:func:`ready_now`).
REGISTERS_FILES = frozenset({"EpollSelector", "KqueueSelector", "DevpollSelector"})


def _selector_events(revents: int) -> int:
    """poll(2) revents as selector events, the way EpollSelector maps epoll's."""
    return (selectors.EVENT_READ if revents & ~OUT else 0) | (selectors.EVENT_WRITE if revents & ~IN else 0)


class SelectorsBackend:
    """One-shot readiness on a :mod:`selectors` selector (``DefaultSelector`` unless given)."""

    name = "selectors"
    max_batch = None  # capability (base.py): no cap of its own

    def __init__(self, selector_class: type[selectors.BaseSelector] | None = None):
        self._sel = (selector_class or selectors.DefaultSelector)()
        self.selector = type(self._sel).__name__
        self.ordered = self.selector in ORDERED_SELECTORS  # capability (base.py)
        self._check_files = self.selector not in REGISTERS_FILES  # at delivery: one fstat per report
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        # What the wait running now has reported (and dropped), kept here, not in a
        # local: a wait cut short by a KeyboardInterrupt hands it over from the next
        # wait (clause R21; the same pattern as epoll and io_uring).
        self._reported: list[tuple[object, int]] = []
        self._files: dict[int, tuple[int, int]] = {}  # fd -> the file armed on it, (st_dev, st_ino)
        self._reused: set[int] = set()  # numbers whose old file may still be registered (REGISTERS_FILES)
        self._closed = False

    def _check_fd(self, fd: int) -> tuple[int, int]:
        """The open file ``fd`` names now, as ``(st_dev, st_ino)``; EBADF if it names none."""
        try:
            st = os.fstat(fd)
        except OSError:
            raise not_open_error(fd) from None
        return st.st_dev, st.st_ino

    def _still_armed_file(self, fd: int) -> bool:
        """Whether ``fd`` still names the file it was armed for; if not, forget its armings.

        Checked at delivery, not only at the next arm: a number closed without disarm and taken
        by another file that is never armed again would otherwise be reported to the closed
        file's tokens when the new file becomes ready (clause B5).  poll(2) keys by number alone
        and reports a closed number as POLLNVAL; both cases are dropped silently here.
        """
        try:
            same = self._check_fd(fd) == self._files.get(fd)
        except OSError:
            same = False
        if not same:
            self._forget(fd)
        return same

    def arm(self, fd: int, direction: int, token: object) -> None:
        if self._closed:
            raise closed_error(self.name)
        check_direction(direction)
        file = self._check_fd(fd)
        if self._files.get(fd, file) != file:
            # Closed without disarm and the number reused by another file: the armings made
            # for the closed file go with it, never reported for this one (clause B5).  A
            # selector keys by number alone, so the file is told by its inode.
            self._lost(fd)
        self._files[fd] = file
        try:
            key = self._sel.get_key(fd)
        except KeyError:
            self._register(fd, _SEL_EVENT[direction], {direction: token})
            return
        tokens = dict(key.data)
        tokens[direction] = token
        events = key.events | _SEL_EVENT[direction]
        # The number may name another file than the one registered: closed without disarm
        # and reused, the kernel dropped the old file's registration.  Registering afresh
        # watches the new one: after a failed modify (selectors has forgotten the key then),
        # and where the interest is unchanged, since selectors then tells the kernel nothing.
        try:
            if events == key.events:
                self._sel.unregister(fd)
            else:
                self._sel.modify(fd, events, tokens)
                return
        except OSError:
            pass
        self._register(fd, events, tokens)

    def _register(self, fd: int, events: int, tokens: dict) -> None:
        """Register ``fd`` with the selector.  EEXIST (epoll only): the kernel still holds this very
        file's registration under ``fd``, which the selector forgot when the file was closed without
        disarm while a dup kept it open (:meth:`_lost`), and a dup2 gave the file its number back.
        The number reaches that registration again: remove it and register afresh (clause B5)."""
        try:
            self._sel.register(fd, events, tokens)
        except FileExistsError:
            self._sel._selector.unregister(fd)  # type: ignore[attr-defined]  # private: no public way
            self._sel.register(fd, events, tokens)

    def _drop(self, fd: int, direction: int) -> None:
        try:
            key = self._sel.get_key(fd)
        except KeyError:
            return
        tokens = dict(key.data)
        tokens.pop(direction, None)
        events = key.events & ~_SEL_EVENT[direction]
        if not events:
            self._forget(fd)
            return
        try:
            self._sel.modify(fd, events, tokens)
        except (OSError, ValueError, KeyError):
            self._forget(fd)

    def _forget(self, fd: int) -> None:
        """Unregister ``fd``; closed under us, forget it without touching the kernel."""
        self._files.pop(fd, None)
        try:
            self._sel.unregister(fd)
        except (OSError, ValueError, KeyError):
            self._sel._fd_to_key.pop(fd, None)  # type: ignore[attr-defined]  # private: no public way

    def _lost(self, fd: int) -> None:
        """Forget ``fd``, whose armed file was closed without disarm (``fd`` is closed, or names
        another file): where the kernel registers files, that file may live on in another
        descriptor, registered under ``fd`` out of reach (EpollSelector swallows the failed
        EPOLL_CTL_DEL), so later reports under ``fd`` are checked (clause B5)."""
        if not self._check_files:
            self._reused.add(fd)
        self._forget(fd)

    def disarm(self, fd: int, direction: int) -> None:
        if self._closed:
            raise closed_error(self.name)
        check_direction(direction)
        if not self._check_files and fd in self._files:
            # One fstat per disarm: a late disarm (the file closed, its number maybe reused)
            # finds the kernel's registration gone, which EpollSelector does not say.
            try:
                same = self._check_fd(fd) == self._files[fd]
            except OSError:
                same = False
            if not same:
                self._lost(fd)
                return
        self._drop(fd, direction)

    def wait(self, timeout_s: float | None) -> list[tuple[object, int]]:
        if self._closed:
            raise closed_error(self.name)
        out = self._reported
        if out:  # a wait cut short: hand its events over now
            timeout_s = 0
        self._report(self._sel.select(None if timeout_s is None else min(timeout_s, WAIT_MAX_S)), None)
        self._reported = []
        return out

    def harvest(self, max_events: int) -> list[tuple[object, int]]:
        """What is ready now, without blocking (``select(0)``): at most ``max_events`` reports.

        Reports as :meth:`wait` does; the wake socket stays readable for the
        next wait, and a direction past ``max_events`` stays registered (the
        next wait reports it).
        """
        if self._closed:
            raise closed_error(self.name)
        out = self._reported
        self._report(self._sel.select(0), max_events)
        self._reported = []
        return out

    def _report(self, ready, limit: int | None) -> None:
        """Turn one select's ``(key, mask)`` into ``(token, revents)`` reports in ``_reported``, at most ``limit``.

        The one report loop of :meth:`wait` (``limit`` None: it also empties
        the wake socket) and :meth:`harvest`.  Each reported direction is
        listed, then dropped from the selector (one-shot).
        """
        out = self._reported  # kept on the backend until the caller returns it (clause R21)
        for key, mask in ready:
            if key.fileobj is self._wake_r:
                if limit is None:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except BlockingIOError:
                        pass
                continue
            if self._check_files and not self._still_armed_file(key.fd):
                continue  # its file was closed without disarm: the armings go with it (clause B5)
            if key.fd in self._reused:
                # Two registrations under one number (the closed file's and the new one's) may
                # both be in this select: the number's file decides, and a direction the first
                # reported is gone from the key it left.
                mask &= _selector_events(ready_now(key.fd))
                key = self._sel.get_map().get(key.fd)
                if key is None:
                    continue
            # Kept on two lines: conformance/mutation-survivors.toml names them by their text.
            # fmt: off
            for direction in (READ, WRITE):
                if mask & _SEL_EVENT[direction] and direction in key.data and (limit is None or len(out) < limit):
                    out.append((key.data[direction], IN if direction == READ else OUT))  # listed before dropped
                    self._drop(key.fd, direction)
            # fmt: on

    def flush(self) -> int:
        if self._closed:
            raise closed_error(self.name)
        return 0  # arming is synchronous: nothing is ever queued

    def wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # buffer full means a wake is pending already; closed means nothing to wake

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()
