"""Test harness: real socketpairs, a recording backend, bounded waits, watchdogs.

Role
----
Small tools the conformance tests share.  Nothing here replaces the path
under test: sockets are real, backends are real (wrapped only to *record*
what they returned), and waiting is for real kernel events.

Liveness
--------
A broken backend can lose an event or a wake-up, and a test must then fail,
not hang.  Every "eventually" in the suite is bounded by :data:`LIVENESS_S`
seconds of real time.  That bound is never a performance threshold: a
conforming backend meets it by orders of magnitude, and it is reached only
when the code under test is broken.  :class:`Watchdog` rescues a blocked
wait by making an armed "rescue" fd readable, so even a backend whose
``wake()`` does nothing cannot hang the suite.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter

import pytest

from tailreactor.backends.base import capabilities

__all__ = [
    "LIVENESS_S",
    "Pair",
    "make_pair",
    "RecordingBackend",
    "collect",
    "revents_named",
    "shown",
    "open_fd_count",
    "wait_until_blocked",
    "ready_if_it_sleeps",
    "Watchdog",
    "fill_send_buffer",
    "run_until",
    "require_capability",
    "require_batch",
    "backend_label",
    "reports_until",
    "rule_broken",
    "signal_state",
    "signal_names",
    "signal_changes",
]

#: Upper bound (s) for anything the suite waits for; reached only on failure.
#: ``TAILREACTOR_CONFORMANCE_LIVENESS_S`` overrides it (the meta-test uses 1 s
#: for its deliberately broken backends, which reach it on purpose).
LIVENESS_S = float(os.environ.get("TAILREACTOR_CONFORMANCE_LIVENESS_S") or 3.0)


class Pair:
    """A connected non-blocking socketpair: ``ours`` is armed, ``peer`` writes to it."""

    __slots__ = ("ours", "peer")

    def __init__(self):
        self.ours, self.peer = socket.socketpair()
        self.ours.setblocking(False)
        self.peer.setblocking(False)

    @property
    def fd(self) -> int:
        return self.ours.fileno()

    def make_readable(self, data: bytes = b"x") -> None:
        self.peer.send(data)

    def drain(self) -> bytes:
        """Read everything buffered on ``ours`` (empty when nothing is)."""
        out = bytearray()
        while True:
            try:
                chunk = self.ours.recv(65536)
            except BlockingIOError:
                return bytes(out)
            if not chunk:
                return bytes(out)
            out += chunk

    def close(self) -> None:
        self.ours.close()
        self.peer.close()


def make_pair() -> Pair:
    return Pair()


def fill_send_buffer(sock: socket.socket) -> None:
    """Write to non-blocking ``sock`` until the kernel refuses more (not writable)."""
    chunk = b"\0" * 65536
    while True:
        try:
            sock.send(chunk)
        except BlockingIOError:
            return


def backend_label(backend) -> str:
    return getattr(backend, "name", type(backend).__name__)


def require_capability(backend, capability: str, clause_id: str) -> None:
    """Skip, with the reason, a test that needs a capability ``backend`` does not declare.

    ``capability`` is an attribute of :class:`tailreactor.backends.base.Capabilities`
    (``ordered``); a backend that declares it False or not at all skips.  The reason
    names where the backend's author claims it: base.py's attribute, or the backend's own
    ``capability_spelling[capability]`` (the C adapter's: the flag and the header).
    """
    if not getattr(capabilities(backend), capability):
        spelled, where = getattr(backend, "capability_spelling", {}).get(
            capability, (f"{capability}=True", "tailreactor/backends/base.py, Capabilities")
        )
        pytest.skip(
            f"{backend_label(backend)} does not declare {spelled}: clause {clause_id} "
            f"applies only to a backend that claims it ({where})"
        )


class RecordingBackend:
    """Wraps a backend and records what it returned, so tests can compare the
    reactor's dispatch order with the backend's own order.

    ``batches``: one list of tokens per ``wait`` that returned something;
    ``harvests``: one list of tokens per ``harvest`` call (empty ones too);
    ``flushes``: ``(callbacks_seen_so_far, returned)`` per ``flush`` call, where
    the first item is set by the test through :meth:`note_callback`.
    Every other attribute is the wrapped backend's.

    Building a batch: a clause that needs ``n`` events in one batch cannot ask
    the backend for it (a backend may bound its batch, or split one, B10).
    ``gather=n`` makes the first ``wait`` that returns something keep calling
    the wrapped ``wait`` until it holds ``n`` reports (bounded by
    :data:`LIVENESS_S`), and return them together, as a backend without a cap
    could have; later waits pass through.  :meth:`preload` queues reports the
    test collected itself (to choose their order) for the next wait.
    """

    def __init__(self, inner, gather: int = 0):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.batches: list[list] = []
        self.harvests: list[list] = []
        if callable(getattr(inner, "harvest", None)):  # optional: only where the inner has it
            self.harvest = self._harvest
        self.flushes: list[tuple[int, int]] = []
        self.callbacks = 0
        self.gather = gather
        self._preloaded: list = []

    def preload(self, got: list) -> None:
        self._preloaded += got

    def note_callback(self) -> None:
        self.callbacks += 1

    def arm(self, fd, direction, token):
        return self.inner.arm(fd, direction, token)

    def disarm(self, fd, direction):
        return self.inner.disarm(fd, direction)

    def wait(self, timeout_s):
        if self._preloaded:
            got, self._preloaded = self._preloaded + self.inner.wait(0), []
        else:
            got = self.inner.wait(timeout_s)
        if got and self.gather:
            deadline = time.monotonic() + LIVENESS_S
            while len(got) < self.gather and time.monotonic() < deadline:
                got += self.inner.wait(0.01)
            self.gather = 0
        if got:
            self.batches.append([tok for tok, _ in got])
        return got

    def _harvest(self, max_events):
        got = self.inner.harvest(max_events)
        self.harvests.append([tok for tok, _ in got])
        return got

    def flush(self):
        n = self.inner.flush()
        self.flushes.append((self.callbacks, n))
        return n

    def wake(self):
        return self.inner.wake()

    def close(self):
        return self.inner.close()

    def __getattr__(self, name):
        return getattr(self.inner, name)


def rule_broken(rules: str, what: str) -> None:
    """Fail the running clause's test: the code under test broke ``rules``.

    A test may need something of the backend or reactor that is not its own
    clause's rule (two ready armed fds both reported, a post drained inside a
    batch).  Every correct backend and reactor meets it within the liveness
    bound, so not meeting it is a bug, and a skip would hide it: the clause
    fails, and the message names the rule that was broken.  Only a capability
    the backend declares absent (or the platform lacks, named) is a skip.
    """
    pytest.fail(
        f"rule of clause {rules} broken (every correct backend and reactor keeps it, so this "
        f"clause cannot hold): {what}",
        pytrace=False,
    )


def require_batch(rec: RecordingBackend, n: int, which: int = -1) -> None:
    """Fail unless batch ``which`` (default the latest) ``rec`` returned holds ``n`` reports.

    Called after a round built with ``gather=n``: a batch still short of ``n``
    means the backend did not report every ready armed fd within
    :data:`LIVENESS_S`, which breaks clauses B1 and B10; the clause under test
    fails naming them (:func:`rule_broken`).
    """
    got = len(rec.batches[which]) if rec.batches else 0
    if got != n:
        rule_broken(
            "B1, B10",
            f"{n} ready armed fds gave a batch of {got} within {LIVENESS_S} s of "
            f"waits; every ready armed fd must be reported",
        )


def reports(backend, expected: int, *, extra_waits: int = 2, wait_s: float = 0.01) -> list:
    """Call ``backend.wait`` until ``expected`` reports arrived (bounded by
    :data:`LIVENESS_S`), then ``extra_waits`` more times with timeout 0 to catch
    duplicates.  Returns every ``(token, value)`` reported, in order.
    """
    got: list = []
    deadline = time.monotonic() + LIVENESS_S
    while len(got) < expected and time.monotonic() < deadline:
        got += backend.wait(wait_s)
    for _ in range(extra_waits):
        got += backend.wait(0)
    return got


def reports_until(backend, done, *, wait_s: float = 0.01) -> list:
    """Call ``backend.wait`` until ``done(reports so far)`` is true (bounded by
    :data:`LIVENESS_S`); returns every ``(token, value)`` reported, in order."""
    got: list = []
    deadline = time.monotonic() + LIVENESS_S
    while not done(got) and time.monotonic() < deadline:
        got += backend.wait(wait_s)
    return got


#: The revents bits by name, as the C header names them (TR_IN ... TR_RDHUP).
_REVENTS_NAMES = ((0x1, "IN"), (0x4, "OUT"), (0x8, "ERR"), (0x10, "HUP"), (0x2000, "RDHUP"))


def revents_named(revents: int) -> str:
    """``revents`` one way wherever a message shows it: hex, then its bits' names
    (``0x11 IN|HUP``; an unnamed bit stays in the hex alone)."""
    names = "|".join(name for bit, name in _REVENTS_NAMES if revents & bit)
    return f"{revents:#x} {names}" if names else f"{revents:#x}"


def shown(got) -> str:
    """Reports ``[(token, revents), ...]`` in a message: ``write (revents 0x10 HUP)``, or
    ``nothing``."""
    return ", ".join(f"{tok!r} (revents {revents_named(rev)})" for tok, rev in got) or "nothing"


def collect(backend, expected: int, *, extra_waits: int = 2, wait_s: float = 0.01) -> Counter:
    """:func:`reports` as a Counter of tokens (a token reported twice counts 2)."""
    return Counter(token for token, _ in reports(backend, expected, extra_waits=extra_waits, wait_s=wait_s))


def run_until(reactor, done, *, timeout_s: float = 0.01, max_rounds: int | None = None) -> int:
    """Run ``reactor.run_once(timeout_s)`` until ``done()`` is true; return the
    rounds run.  Bounded by :data:`LIVENESS_S` (and ``max_rounds``); the caller
    asserts ``done()`` afterwards.
    """
    deadline = time.monotonic() + LIVENESS_S
    rounds = 0
    while not done() and time.monotonic() < deadline:
        if max_rounds is not None and rounds >= max_rounds:
            break
        reactor.run_once(timeout_s)
        rounds += 1
    return rounds


def open_fd_count() -> int:
    """How many file descriptors this process holds (Linux ``/proc/self/fd``)."""
    return len(os.listdir("/proc/self/fd"))


#: futex(2) syscall numbers (x86_64, arm64/riscv64 generic, i386): a thread
#: asleep in a futex waits for the GIL or a lock, not in the backend.
_FUTEX_NRS = {202, 98, 240}


def _asleep_in_a_wait(base: str) -> bool:
    with open(base + "wchan") as f:
        wchan = f.read().strip()  # the kernel function a sleeping task waits in; 0 while running
    with open(base + "stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    if state != "S":
        return False
    if wchan not in ("", "0"):
        # Read wchan first, then the state: still asleep after both reads means
        # it really is asleep in that function.
        return "futex" not in wchan
    # wchan hidden (kernel.kptr_restrict): the syscall number it sleeps in.
    with open(base + "syscall") as f:
        nr = f.read().split()[0]
    return nr.isdigit() and int(nr) not in _FUTEX_NRS


def wait_until_blocked(native_id: int, stop: threading.Event | None = None) -> bool:
    """Return True once thread ``native_id`` sleeps in a syscall other than a
    futex (i.e. in the backend's wait, not waiting for the GIL or a lock).

    Reads ``/proc/self/task/<tid>/`` (``wchan``, ``stat``, else ``syscall``).
    Returns False after :data:`LIVENESS_S` or if ``/proc`` cannot be read; the
    caller then acts anyway (a wake made before the wait must work too, B7).
    """
    base = f"/proc/self/task/{native_id}/"
    deadline = time.monotonic() + LIVENESS_S
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        try:
            if _asleep_in_a_wait(base):
                return True
        except OSError:
            return False
        time.sleep(0.0005)  # polling /proc: there is no event for "entered a syscall"
    return False


def ready_if_it_sleeps(call, late):
    """``call()`` on this thread while another makes the pair ``late`` readable once this
    thread sleeps in the kernel; returns what ``call()`` returned.

    How a call that must not block is shown not to, without a clock: an fd armed before the
    call becomes ready only after the calling thread was seen asleep in a system call
    (``/proc``, as B7's tests do). A call that polls never sleeps, so it cannot report that
    fd; one that blocks (a harvest that waits up to a second, a wait that holds reports and
    still blocks) sleeps, the fd becomes ready, and the call returns it. However loaded the
    machine, a correct call is never seen asleep (a thread that waits for the GIL sleeps in a
    futex, which does not count) and a blocking one is seen within its block.
    """
    me = threading.get_native_id()
    stop = threading.Event()

    def make_late_ready():
        if wait_until_blocked(me, stop) and not stop.is_set():
            late.make_readable()

    t = threading.Thread(target=make_late_ready, name="conformance-late", daemon=True)
    t.start()
    try:
        return call()
    finally:
        stop.set()
        t.join()


class Watchdog:
    """Rescue a wait that a broken backend never ends.

    ``Watchdog(rescue)`` starts a thread that calls ``rescue()`` once if
    :meth:`done` was not called within :data:`LIVENESS_S`; ``fired`` tells
    whether it had to.  Use as a context manager around the blocking call.
    """

    def __init__(self, rescue, timeout_s: float = LIVENESS_S):
        self._rescue = rescue
        self._timeout = timeout_s
        self._done = threading.Event()
        self.fired = False
        self._thread = threading.Thread(target=self._watch, name="conformance-watchdog", daemon=True)

    def _watch(self) -> None:
        if not self._done.wait(self._timeout):
            self.fired = True
            self._rescue()

    def done(self) -> None:
        self._done.set()

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done()
        self._thread.join()


# -- the process's signal state --------------------------------------------------------
#: The lines of /proc/thread-self/status a backend must leave as they were: the signals
#: with a handler (process-wide), the ignored ones (process-wide), this thread's mask.
SIGNAL_FIELDS = ("SigCgt", "SigIgn", "SigBlk")


def signal_state() -> dict[str, int]:
    """This process's caught and ignored signals and this thread's blocked mask, as bit masks
    (bit n-1 is signal n), from ``/proc/thread-self/status``."""
    with open("/proc/thread-self/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {name: int(fields[name].strip(), 16) for name in SIGNAL_FIELDS}


def signal_names(mask: int) -> list[str]:
    """The signals of ``mask`` by name (SIGCHLD), real-time ones as SIGRTMIN+k."""
    import signal

    names = []
    for n in range(1, mask.bit_length() + 1):
        if mask >> (n - 1) & 1:
            try:
                names.append(signal.Signals(n).name)
            except ValueError:
                names.append(f"SIGRTMIN+{n - signal.SIGRTMIN}" if n >= signal.SIGRTMIN else f"signal {n}")
    return names


def signal_changes(spec: str) -> list[dict]:
    """Create the backend ``spec`` in this process, use it (arm, flush, wait, a report, wake,
    disarm, close) and return, per field of :data:`SIGNAL_FIELDS` that changed, the first step
    after which it differed from before the create: ``{"step", "field", "before", "after"}``.

    Run in a fresh process (the test of clause B7 starts one): a handler a library installs
    once stays for the process's life, so a process where a backend of the same kind was made
    already would show no change."""
    from tailreactor.backends import READ

    from .cabi import create_backend

    # The process as the suite runs: threads started already (glibc installs its own handlers,
    # signals 32 and 33, at the first pthread_create, which the C adapter's watchdog makes).
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    before = signal_state()
    changes: dict[str, dict] = {}

    def check(step: str) -> None:
        for field, value in signal_state().items():
            if value != before[field] and field not in changes:
                changes[field] = {"step": step, "field": field, "before": before[field], "after": value}

    ours, peer = socket.socketpair()
    ours.setblocking(False)
    with ours, peer:
        b = create_backend(spec)
        check("create")
        b.arm(ours.fileno(), READ, "read")
        b.flush()
        check("arm and flush")
        b.wait(0.001)
        check("a wait that timed out")
        peer.send(b"x")
        reports_until(b, lambda got: got)
        check("a wait that reported")
        b.wake()
        b.wait(LIVENESS_S)
        check("wake and wait")
        b.disarm(ours.fileno(), READ)
        b.close()
        check("disarm and close")
    return list(changes.values())
