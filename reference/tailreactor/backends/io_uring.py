"""io_uring backend: one-shot ``IORING_OP_POLL_ADD`` through ``uring-api``.

Role
----
Implements :mod:`tailreactor.backends.base` on io_uring.  Each ``arm`` prepares
one POLL_ADD SQE; its CQE (``res`` = the poll revents) is the readiness report.
A POLL_ADD without the multishot flag is one-shot, like CWIST's.

One syscall per round
---------------------
``arm`` only *prepares* an SQE.  ``uring-api`` with ``auto_submit`` on flushes
prepared SQEs inside the next ``wait``, so the re-arms made while dispatching a
round ride the same ``io_uring_enter`` that waits for the next batch (CWIST
parks them in a deferred array for the same reason).  ``flush`` submits them
at once; the reactor calls it when a round overruns
``CWIST_REACTOR_ROUND_BUDGET_US``.

Disarm and stale completions
----------------------------
``disarm`` forgets the armed completion and prepares a cancel for it.  A CQE is
reported only if it belongs to the completion currently armed for its
``(fd, direction)`` (or to its multishot, below); the cancelled request's
``-ECANCELED`` CQE, or a CQE that raced with the disarm, is dropped.  A negative result other than
``-ECANCELED`` (say ``-EBADF``) is reported as ``ERR`` so the callback sees the
failure instead of waiting forever.

A WRITE poll and the peer's half-close
--------------------------------------
The kernel adds ``POLLRDHUP`` (with ``POLLERR``, ``POLLHUP``, ``POLLNVAL``) to
every POLL_ADD's mask.  After the peer's ``shutdown(SHUT_WR)`` a WRITE poll on a
socket whose send buffer is full therefore completes at once with ``RDHUP``
alone: READ's readiness, not room to write (``base.SATISFIES``), so it is no
report.  Armed again one-shot it would complete again at once: a spin.  So the
arming goes on as a *multishot* poll for ``POLLOUT``, which completes when it is
armed (with that ``RDHUP`` again, dropped) and then only at a wake-up of the
socket; its first completion with OUT, ERR or HUP is the report.  The multishot
is cancelled when the arming ends: at that report, at ``disarm``, at a re-arm,
or when its file check drops it.  It reaches the kernel with the next wait,
after this round's callbacks, so it is checked like an arm: an ``fstat`` when it
is prepared, compared at its report.  A multishot the kernel ends by itself
(its last completion, without ``IORING_CQE_F_MORE``, say when it could not post
one) with ``RDHUP`` alone is replaced by a new one.  Only this case pays for
it: a WRITE poll that finds room, and a READ poll, stay one-shot.

uring-api's part: each of a multishot's completions but the last comes as a new
``Completion`` object carrying the armed request's ``user_data``, so an arming
cannot know its completions by the object, as ``_report`` knows a one-shot's.
The ``user_data`` is a :class:`_RoomWatch` made for this arming alone, and a
completion belongs to the arming whose operation holds that same watch.
Python's part: an interrupt between the multishot's prepare and its store
(a C call's return) leaves a multishot the backend does not know: its
completions are dropped as stale, and it holds its file until the ring closes
(as a poll ``arm`` prepares does in the same window).  Nothing is lost: the
completion that asked for it is still pending, and arms another.

An fd closed while armed (without ``disarm``)
---------------------------------------------
A pending POLL_ADD holds its own reference to the file, so closing the fd
does not close the socket: the peer sees no FIN, and the file stays alive
until the poll completes -- its report is then dropped if the fd no longer
names the file a checked arm found (below); a hot re-arm's is not checked, and
its callback runs although the fd number is closed (``EBADF``) or names another
file -- or until the poll is cancelled by ``disarm``, by arming the same number
again (``arm`` cancels the old completion), or by :meth:`close`.  Nothing leaks
past those points and nothing hangs, but closing an armed fd is the owner's
bug to avoid: always disarm first (``tests/test_reliability_faults.py`` pins this).

Closed before the poll reached the kernel: ``arm`` only prepares the SQE, and
the kernel looks the fd number up when it is submitted (the next ``flush`` or
``wait``).  Closed and its number taken by another file in between, the poll
watches that file, and its readiness would be reported to the closed file's
token.  So the first report of a checked arm (below) is delivered only if the
fd still names the file the arm found there; otherwise it is dropped silently
(clause B5: "at every arm, and before a deferred registration reaches the
kernel, or at delivery").  One ``fstat`` per checked arm's first report: per
connection, not per request, since the hot re-arm is not checked.

Why an ``fstat`` check in ``arm``: epoll rejects a closed fd at arm
time, io_uring only in a later CQE.  One cheap syscall keeps "arming a closed
fd raises EBADF" identical on both backends (clause B16), and records the file
for the report's check above.  It is skipped for
the hot re-arm, of a direction the latest wait reported: that fd was open a
moment ago, in this round (the check would be one more syscall per
request, as costly as the ``epoll_ctl`` epoll avoids).  An fd closed without
disarm by a callback of the same round still fails, only later: its POLL_ADD
completes with ``-EBADF`` and the token is reported as ``ERR``.

Sources: io_uring_enter(2) (IORING_OP_POLL_ADD, IORING_POLL_ADD_MULTI,
IORING_OP_ASYNC_CANCEL), Linux io_uring/poll.c (``IO_POLL_UNMASK``),
uring-api 0.1.0rc5 README ("Lazy submit", "Threading Model", "Multishot
delivery contract").
"""

from __future__ import annotations

import errno
import os
import resource
import time

from .base import ERR, IN, OUT, RDHUP, READ, WRITE, check_direction, closed_error, key_of, not_open_error

#: Ring size (``CWIST_URING_ENTRIES``): submission-queue entries; the completion queue
#: gets twice as many.  Both queues are locked memory, charged to ``RLIMIT_MEMLOCK``
#: for any user but root: about 28 KiB at 256 entries, so a stock 8 MiB limit holds
#: about 290 rings (CWIST's 4096 entries cost about 390 KiB, 21 rings).  A round
#: that re-arms more than this only submits early: ``auto_submit`` flushes a full
#: submission queue, and completions past the completion queue wait in the
#: kernel's overflow list (IORING_FEAT_NODROP), so the size bounds memory, not
#: correctness.
DEFAULT_ENTRIES = 256
_MASK = {READ: IN | RDHUP, WRITE: OUT}
_ECANCELED = -errno.ECANCELED


def _still_names(fd: int, file: tuple[int, int]) -> bool:
    """Whether ``fd`` still names the open file ``file`` (``(st_dev, st_ino)``)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == file


class _RoomWatch:
    """The ``user_data`` of one arming's multishot WRITE poll (module docstring,
    "A WRITE poll and the peer's half-close"): made per arming, so its identity
    tells this arming's completions from those of an earlier one."""

    __slots__ = ("key",)

    def __init__(self, key: int):
        self.key = key


class _Operation:
    """What the backend holds for one ``(fd, direction)`` key.

    While armed, ``completion`` is the prepared request (uring-api's handle:
    its CQE carries it) and ``token`` what to report; ``receive`` tells an
    ``IORING_OP_RECV`` (its result is reported as is) from a POLL_ADD.  Once
    reported, ``completion`` is None and ``reported_in`` is the number of
    the wait that reported it: a re-arm from that round is the hot re-arm
    (module docstring).  A re-arm of the key reuses its record.  ``file`` is the
    ``(st_dev, st_ino)`` a checked arm found on the fd, until its first report
    is checked against it (module docstring, "An fd closed while armed").
    ``watch`` is the :class:`_RoomWatch` while ``completion`` is a multishot
    WRITE poll waiting for room after the peer's half-close, else None.
    """

    __slots__ = ("completion", "token", "receive", "reported_in", "file", "watch")

    def __init__(self):
        self.completion = None
        self.token = None
        self.receive = False
        self.reported_in = 0
        self.file: tuple[int, int] | None = None
        self.watch: _RoomWatch | None = None


class IoUringUnavailable(OSError):
    """io_uring cannot be used here.

    ``errno`` is the setup errno (EPERM, ENOSYS, ENOMEM, ...) or ``None``;
    ``reason`` is one line saying why, including
    ``/proc/sys/kernel/io_uring_disabled`` when it can be read.
    """

    def __init__(self, err: int | None, reason: str):
        super().__init__(err, reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def io_uring_disabled_sysctl() -> str | None:
    """Contents of ``/proc/sys/kernel/io_uring_disabled`` (kernel >= 6.6), or None."""
    try:
        with open("/proc/sys/kernel/io_uring_disabled") as f:
            return f.read().strip()
    except OSError:
        return None


def memlock_text() -> str:
    """``RLIMIT_MEMLOCK`` as ``ulimit -l`` would show it, in KiB (or ``unlimited``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"


def memlock_hint(entries: int) -> str:
    """Why a ring of ``entries`` was refused ENOMEM, and the two ways out."""
    return (
        f"locked-memory limit too low for another ring of {entries} entries (about "
        f"{ring_kib(entries)} KiB of locked memory; RLIMIT_MEMLOCK {memlock_text()}, shared by "
        f"every process of this user, root exempt): raise it (ulimit -l, memlock in "
        f"/etc/security/limits.conf) or lower CWIST_URING_ENTRIES"
    )


def ring_kib(entries: int) -> int:
    """Locked memory of one ring in KiB, rounded up: a 64-byte SQE and two 16-byte CQEs an
    entry (entries rounded up to a power of two), plus a page of ring headers."""
    n = 1 << max(entries - 1, 0).bit_length()
    return -(-(n * (64 + 2 * 16) + 4096) // 1024)


def _explain(err: int | None, detail: str, entries: int = DEFAULT_ENTRIES) -> str:
    sysctl = io_uring_disabled_sysctl()
    hint = {
        errno.EPERM: "blocked by io_uring_disabled or a seccomp filter (e.g. Docker's default profile)",
        errno.ENOSYS: "kernel built without CONFIG_IO_URING, or a sandbox (gVisor, nix) hides it",
        errno.ENOMEM: memlock_hint(entries),
    }.get(err or -1, "")
    parts = [f"io_uring unavailable: {detail}"]
    if err:
        parts.append(f"errno {errno.errorcode.get(err, err)}")
    if hint:
        parts.append(hint)
    parts.append(f"io_uring_disabled={sysctl if sysctl is not None else 'unreadable'}")
    return "; ".join(parts)


def _open_ring(entries: int):
    """Import uring-api and create a ring; raise IoUringUnavailable with the reason."""
    try:
        import uring_api
    except ImportError as exc:  # pragma: no cover - dependency is pinned
        raise IoUringUnavailable(None, _explain(None, f"uring-api not importable ({exc})")) from None
    native_err = getattr(uring_api, "_native_import_error", None)
    if native_err is not None:
        raise IoUringUnavailable(None, _explain(None, f"uring-api native part missing ({native_err})"))
    try:
        # skip_owner_break_wait=False: uring-api by default ignores break_wait()
        # from the thread that created the ring, assuming that thread is the
        # waiter.  A reactor may be built on one thread and run on another, and
        # then a post or stop from the creating thread must still wake it.
        return uring_api.Ring(entries, skip_owner_break_wait=False)
    except OSError as exc:
        raise IoUringUnavailable(exc.errno, _explain(exc.errno, "ring setup failed", entries)) from None


class IoUringBackend:
    """One-shot POLL_ADD readiness on io_uring.  See the module docstring.

    Raises :class:`IoUringUnavailable` from the constructor when a ring cannot
    be set up.  ``ring_factory`` exists for tests that simulate setup failure.
    """

    name = "io_uring"
    #: Capabilities (base.py): completions are reaped in completion-ring order, and
    #: one wait returns every completion the ring holds (no cap of its own).
    ordered = True
    max_batch = None

    def __init__(self, entries: int = DEFAULT_ENTRIES, ring_factory=None):
        self._ring = (ring_factory or _open_ring)(entries)
        # key_of(fd, direction) -> its operation, armed or reported.
        self._ops: dict[int, _Operation] = {}
        # The wait running now: completions taken off the ring and not yet handled,
        # and what it has to report.  Kept here, not in locals: a wait cut short by
        # a signal handler's KeyboardInterrupt goes on in the next wait (clause R21).
        self._pending: list = []
        self._reported: list[tuple[object, int]] = []
        self._closed = False
        self.flushes = 0
        self.waits = 0
        self.fd_checks = 0

    def arm(self, fd: int, direction: int, token: object) -> None:
        if self._closed:
            raise closed_error(self.name)
        mask = _MASK.get(direction)
        if mask is None:
            check_direction(direction)  # raises ValueError
        key = key_of(fd, direction)
        op = self._operation(fd, key)
        op.completion = self._ring.prepare_poll(fd, mask, key)
        op.token = token
        op.receive = False

    def _operation(self, fd: int, key: int) -> _Operation:
        """The record to arm ``key`` with, once what it held is cancelled or ``fd`` is checked open.

        No check for the hot re-arm: a direction the latest wait reported
        (module docstring).
        """
        op = self._ops.get(key)
        if op is not None and op.completion is None and op.reported_in == self.waits:
            return op
        if op is not None and op.completion is not None:
            self._ring.prepare_cancel_nowait(op.completion)  # re-armed while armed: replace
            op.watch = None  # its multishot's completions are stale now
            op.file = None  # the caller arms the file the number names now: no check to make
            return op
        if op is None:
            op = _Operation()
        self.fd_checks += 1
        try:
            st = os.fstat(fd)
        except OSError:
            raise not_open_error(fd) from None
        op.file = (st.st_dev, st.st_ino)
        self._ops[key] = op
        return op

    def arm_recv(self, fd: int, buffer, token: object) -> None:
        """One-shot ``IORING_OP_RECV`` into ``buffer``: RX-uring (CWIST PR #187).

        Occupies ``fd``'s READ direction: arming READ replaces it and
        ``disarm(fd, READ)`` cancels it.  ``wait`` reports ``(token, result)``:
        bytes received, 0 at EOF, or ``-errno`` (a cancelled receive is not
        reported).  ``buffer`` is any writable buffer; uring-api keeps it
        exported until the completion arrives, also after a cancel.  Raises
        ``OSError(EBADF)`` for a closed fd, as :meth:`arm` does.
        """
        if self._closed:
            raise closed_error(self.name)
        key = key_of(fd, READ)
        op = self._operation(fd, key)
        op.completion = self._ring.prepare_recv(fd, buffer, 0, key)
        op.token = token
        op.receive = True

    def disarm(self, fd: int, direction: int) -> None:
        if self._closed:
            raise closed_error(self.name)
        check_direction(direction)
        op = self._ops.pop(key_of(fd, direction), None)
        if op is not None and op.completion is not None:
            self._ring.prepare_cancel_nowait(op.completion)

    def wait(self, timeout_s: float | None) -> list[tuple[object, int]]:
        if self._closed:
            raise closed_error(self.name)
        self.waits = waits = self.waits + 1
        out, pending = self._reported, self._pending
        if out or pending:  # a wait cut short: hand its events over now
            timeout_s = 0
        # Completions ring.wait took off the ring are lost if an interrupt lands
        # before they are stored here: the one window Python cannot close.
        pending.extend(self._wait_retrying_eintr(timeout_s))
        self._report(waits, None)
        self._reported = []
        return out

    def harvest(self, max_events: int) -> list[tuple[object, int]]:
        """What is ready now, without blocking: at most ``max_events`` reports.

        uring-api's ``Ring.wait(0)`` first submits the SQEs queued since the
        round's wait (one ``io_uring_enter``, as :meth:`flush`; none when
        nothing is queued), then *peeks* the completion queue: liburing's
        ``io_uring_peek_cqe`` reads the shared CQ ring, no system call unless
        the kernel flags a CQ overflow to flush.  Completions past
        ``max_events`` stay pending for the next wait, which then does not
        block.  A wake is not consumed: uring-api latches a ``break_wait``
        made outside a blocking wait, and a peek leaves the latch for the next
        wait.  Part of the round of the latest wait: its reports keep that
        wait's number, so a harvested fd's re-arm skips the ``fstat`` check.
        """
        if self._closed:
            raise closed_error(self.name)
        self._pending.extend(self._ring.wait(0) or ())
        out = self._report(self.waits, max_events)
        self._reported = []
        return out

    def _report(self, waits: int, limit: int | None) -> list[tuple[object, int]]:
        """Turn the pending completions into reports (``_reported``), at most ``limit``;
        the rest stay pending.  A reported operation forgets its completion."""
        out, pending = self._reported, self._pending
        ops = self._ops
        handled = 0
        for cqe in pending:
            if limit is not None and len(out) >= limit:
                break
            handled += 1
            key = cqe.user_data
            if type(key) is int:
                op = ops.get(key)
                if op is None or op.completion is not cqe:
                    continue  # a cancelled poll, one that raced a disarm, or handled already
            elif type(key) is _RoomWatch:  # a multishot WRITE poll's completion
                watch, key = key, key.key
                op = ops.get(key)
                if op is None or op.watch is not watch:
                    continue  # an ended arming's: cancelled, or raced its end
            else:
                continue  # a wake NOP
            res = cqe.res
            if res == RDHUP and key & 1:  # WRITE's poll: the peer's half-close alone, no room
                if cqe is op.completion:  # the request ended: wait for room by a multishot
                    self._wait_for_room(key, op)
                continue
            # Listed before forgotten: an interrupt in between lists it twice at
            # worst (the reactor runs only ARMED events), never not at all.
            if op.file is not None and not op.receive and res >= 0:
                if not _still_names(key >> 1, op.file):
                    self._drop(key, op)  # the armed file was closed before the poll was submitted (B5)
                    continue
                op.file = None
            if op.receive:  # bytes, 0 at EOF, or -errno
                if res != _ECANCELED:
                    out.append((op.token, res))
            elif res >= 0:
                out.append((op.token, res))
            elif res != _ECANCELED:
                out.append((op.token, ERR))
            op.reported_in = waits
            if op.watch is not None:
                self._end_watch(op)
            op.completion = None
        del pending[:handled]
        return out

    def _wait_for_room(self, key: int, op: _Operation) -> None:
        """Go on waiting for room with a multishot poll (module docstring, "A WRITE poll and
        the peer's half-close"), checked like an arm: dropped if the fd no longer names the
        file a checked arm found, else that file is compared at its report."""
        try:
            st = os.fstat(key >> 1)
        except OSError:
            file = None
        else:
            file = (st.st_dev, st.st_ino)
        if file is None or (op.file is not None and op.file != file):
            self._drop(key, op)
            return
        op.file = file
        op.watch = watch = _RoomWatch(key)
        # uring-api: the handle stays armed (the cancel's target); each completion
        # before the last comes as a new Completion carrying ``watch``.
        op.completion = self._ring.prepare_poll_multishot(key >> 1, OUT, watch)

    def _drop(self, key: int, op: _Operation) -> None:
        """Forget ``key``'s arming without a report (its file was closed: B5)."""
        if op.watch is not None:
            self._end_watch(op)
        del self._ops[key]

    def _end_watch(self, op: _Operation) -> None:
        """Cancel ``op``'s multishot poll; its completions from now on are stale."""
        self._ring.prepare_cancel_nowait(op.completion)
        op.watch = None

    def _wait_retrying_eintr(self, timeout_s: float | None):
        """``ring.wait`` with PEP 475 semantics: a signal does not end the wait early.

        uring-api raises ``InterruptedError`` when a signal interrupts
        ``io_uring_enter`` (after Python has run the handler); stdlib
        ``epoll.poll`` retries with the remaining time instead.  Doing the same
        keeps "a wait never returns before its timeout" true on both backends.
        A handler that raises (SIGINT's KeyboardInterrupt) still propagates.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                return self._ring.wait(timeout_s) or ()
            except InterruptedError:
                if deadline is not None:
                    timeout_s = deadline - time.monotonic()
                    if timeout_s <= 0:
                        return ()

    def flush(self) -> int:
        if self._closed:
            raise closed_error(self.name)
        self.flushes += 1
        return self._ring.submit()

    def wake(self) -> None:
        if not self._closed:
            self._ring.break_wait()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ops.clear()
        self._ring.close()

    def stats(self) -> dict[str, int]:
        """uring-api's ring counters (SQEs, CQEs, submits) plus ours."""
        s = dict(self._ring.stats()) if not self._closed else {}
        s["flushes"] = self.flushes
        s["waits"] = self.waits
        return s
