"""``cabi:PATH`` in the suite: the reference's C ABI adapter, with a watchdog on each call.

Role
----
Lets the suite check a backend written in C, Rust, Go or anything else that
exports the functions of ``conformance/include/tailreactor_backend.h``.  The
adapter itself is a runtime backend of the reference
(:mod:`tailreactor.backends.cabi`: tokens, errors, what only the adapter can
see, capabilities); the backend clauses run on it directly and the reactor and
HTTP clauses run through the Python reference reactor on top of it.

What the suite adds is the **watchdog**.  A call into C cannot be interrupted,
so a library whose ``tr_backend_wait`` ignores its timeout, or whose
``tr_backend_close`` loops in a list it corrupted, would hang the run forever:
a watchdog thread ends the process (one line on stderr, exit status
:data:`HUNG_EXIT`) when a wait has not returned :data:`WAIT_GRACE_S` after its
timeout, or ``LIVENESS_S + WAIT_GRACE_S`` after it started with no limit (the
suite wakes or rescues every such wait within ``LIVENESS_S``), or any other
call :data:`CALL_BOUND_S` after it started.  Every call goes through the
adapter's ``call_library``, which this module's adapter watches.  Under
pytest-xdist it ends a worker, not the run: it leaves its line for the
controller first (:func:`.failures.note_hang`), which fails the test's clause
as *hung* and quotes the line.  A server runs the reference's adapter,
without it: its ``wait(None)`` may block for good.

And B8's waits under a microsecond: :meth:`CabiBackend.time_waits` calls
``tr_backend_wait`` again and again from a loop in C (:mod:`.ctiming`), which
times the library's call alone, under the same watchdog.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import time
from collections import Counter

from tailreactor.backends import cabi as _cabi
from tailreactor.backends.cabi import (
    ABI_VERSION,
    PREFIX,
    SIGNATURES,
    CabiError,
    ContractError,
    UnknownToken,
    canonical,
    is_cabi,
    label,
    library_path,
    load_library,
)

from . import ctiming
from .failures import note_hang
from .harness import LIVENESS_S

__all__ = [
    "PREFIX",
    "ABI_VERSION",
    "SIGNATURES",
    "CabiError",
    "ContractError",
    "CabiBackend",
    "UnknownToken",
    "create_backend",
    "is_cabi",
    "canonical",
    "label",
    "load_library",
    "WAIT_GRACE_S",
    "wait_bound_s",
]

#: How late (s) past its timeout a tr_backend_wait may return before the watchdog
#: takes it as hung; a wait with no limit, or longer than LIVENESS_S, gets LIVENESS_S +
#: WAIT_GRACE_S, since the suite wakes or rescues every such wait within LIVENESS_S.
WAIT_GRACE_S = 2 * LIVENESS_S
#: How long (s) any other call into the library (create, arm, disarm, flush, wake, close,
#: destroy) may take before the watchdog takes it as hung: none of them blocks.
CALL_BOUND_S = WAIT_GRACE_S
#: The exit status of a process whose tr_backend_wait hung (the runner's "interrupted").
HUNG_EXIT = 2


def wait_bound_s(timeout_ns: int) -> float:
    """How long (s) the watchdog lets a ``tr_backend_wait`` of ``timeout_ns`` run: its timeout,
    at most LIVENESS_S (with no limit too: the suite wakes or rescues every wait within
    LIVENESS_S, whatever its timeout, and one of INT64_MAX that a wake does not end would
    otherwise run for good) + WAIT_GRACE_S, to the six significant digits the watchdog's line
    prints, so the line and ``--json``'s ``limit_s`` give one figure (a 500 ns wait: 6 s, not
    6.0000005)."""
    exact = (LIVENESS_S if timeout_ns < 0 else min(timeout_ns / 1e9, LIVENESS_S)) + WAIT_GRACE_S
    return float(f"{exact:g}")


class CabiBackend(_cabi.CabiBackend):
    """The reference's adapter (``path``: the library) whose every wait the watchdog bounds."""

    def __init__(self, path):
        _WATCH.ensure_started()  # once, with the first backend: before its create, outside any wait's timing
        super().__init__(path)
        #: What each ``tr_backend_wait`` call returned, counted: ``-EINTR``, 0, or ``"reports"``
        #: (n > 0). One ``wait()`` of the adapter is as many calls as the library returned -EINTR
        #: plus one; B7 and B8 count them to see a wait that spins instead of blocking.
        self.wait_returns: Counter = Counter()

    @staticmethod
    def call_library(name: str, fn, *args):
        """``fn(*args)``, watched: a wait may take wait_bound_s, any other call CALL_BOUND_S."""
        call = fn.__name__
        if call == "tr_backend_wait":
            timeout_ns = args[1]
            bound = wait_bound_s(timeout_ns)
            call = f"{call}(timeout {timeout_ns} ns{', no limit' if timeout_ns < 0 else ''})"
        else:
            bound = CALL_BOUND_S
        return _WATCH.bounded(bound, f"{name}: {call} did not return within {bound:g} s", fn, *args)

    def _call_wait(self, timeout_ns: int, capacity: int) -> int:
        rc = super()._call_wait(timeout_ns, capacity)
        self.wait_returns[rc if rc <= 0 else "reports"] += 1
        return rc

    def time_waits(
        self, timeout_ns: int, budget_s: float, at_least: int, spread_ns: int = 0, signal_every_ns: int = 0
    ) -> ctiming.WaitTimes:
        """``tr_backend_wait(timeout_ns)`` (up to ``timeout_ns + spread_ns``, a SIGALRM every
        ``signal_every_ns``: :mod:`.ctiming`)
        again and again into this adapter's array, each timed in C around the library's call
        alone, for at least ``at_least`` waits and ``budget_s``; the watchdog bounds the whole
        loop.  Raises :class:`.ctiming.Unavailable` where no C compiler can build the loop."""
        # The last wait may start as the budget ends; six significant digits, as wait_bound_s.
        bound = float(f"{budget_s + wait_bound_s(timeout_ns + spread_ns):g}")
        timeouts = f"{timeout_ns} ns" if not spread_ns else f"{timeout_ns} to {timeout_ns + spread_ns} ns"
        message = (
            f"{self.name}: tr_backend_wait(timeout {timeouts}), called for {budget_s:g} s "
            f"in a loop, did not return within {bound:g} s"
        )
        capacity = max(1, min(self.wait_capacity, len(self._events)))
        args = (self._lib.tr_backend_wait, self._h, timeout_ns, self._events, capacity)
        budget_ns = int(budget_s * 1e9)
        return _WATCH.bounded(
            bound, message, ctiming.time_waits, *args, budget_ns, at_least, spread_ns, signal_every_ns
        )


class _WaitWatch:
    """One daemon thread that ends the process when a call into the library overruns its bound.

    A call into C cannot be interrupted from Python: a wait that ignores its
    timeout would hang the run forever.  Each wait stores its deadline in
    :attr:`waits`; the thread sleeps until the earliest one and, if that wait is
    still inside the library, writes one line to stderr and exits the process (a
    pytest-xdist worker: the controller reports that test as hung).

    The waiting thread takes no lock the watchdog needs: a signal handler may raise
    in it at any call or return (a raise right after a lock was taken would keep
    that lock for good, and the watchdog would block on it, issue 41).  It stores
    and deletes its entry in a dict (each one step under the GIL) and, only when its
    deadline is earlier than the one the watchdog sleeps to, *releases* a lock the
    watchdog sleeps to acquire: a lock released and not taken is a wake pending, a
    second release finds it so and does nothing, and no raise can leave it held by
    the waiting thread (it never acquires it).  No descriptor: B14 counts the
    backend's.
    """

    def __init__(self):
        self.waits: dict[int, tuple[int, str, float]] = {}  # key -> (deadline_ns, what to print, bound_s)
        self.sleep_until = -math.inf  # what the watchdog sleeps to (ns); before it runs: poke always
        self._keys = itertools.count()
        self._lock = threading.Lock()  # ensure_started alone, never around a wait
        self._wakeup = threading.Lock()  # held: no wake pending; released by poke
        self._wakeup.acquire()
        self._thread: threading.Thread | None = None

    def bounded(self, bound_s: float, message: str, call, *args):
        """``call(*args)``, a call into the library, watched: if it has not returned within
        ``bound_s``, the process ends with ``message``."""
        key = next(self._keys)
        deadline = time.monotonic_ns() + int(bound_s * 1e9)
        waits = self.waits
        # A signal handler (the suite's own R21 tests raise at every call and return of a wait)
        # may raise anywhere here: the entry is stored and removed by statements alone, inside
        # the try, so no raise leaves it behind (the watchdog would end a worker for a wait that
        # returned), and this thread takes no lock the watchdog needs (issue 41: a raise at the
        # return of Condition.__enter__ left its lock held, and the watchdog never woke again).
        try:
            waits[key] = (deadline, message, bound_s)
            if deadline < self.sleep_until:
                self.poke()
            return call(*args)
        finally:
            if key in waits:
                del waits[key]

    def poke(self) -> None:
        """Wake the watchdog to look at the deadlines again."""
        try:
            self._wakeup.release()
        except RuntimeError:  # released already: a wake is pending
            pass

    def ensure_started(self) -> None:
        """Start the thread (once, with the first backend: not inside a wait's timing)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="cabi-wait-watchdog", daemon=True)
                self._thread.start()

    def _watch(self) -> None:
        while True:
            due = min(list(self.waits.values()), default=None)
            self.sleep_until = math.inf if due is None else due[0]
            # A wait stored between the look above and the line above saw the old sleep_until
            # and may not have poked: look again before sleeping.
            if min(list(self.waits.values()), default=None) != due:
                continue
            now = time.monotonic_ns()
            if due is not None and due[0] <= now:
                break
            self._wakeup.acquire(timeout=-1 if due is None else (due[0] - now) / 1e9)
        line = (
            f"{due[1]}; exiting: a call into the library cannot be interrupted (a wait may "
            f"take its timeout + {WAIT_GRACE_S:g} s, {LIVENESS_S + WAIT_GRACE_S:g} s with no limit or a longer one, "
            f"any other call {CALL_BOUND_S:g} s)"
        )
        config = _config()
        try:
            note_hang(config, line, due[2])
        finally:  # the process ends whatever writing the note met
            _uncapture(config)
            os.write(2, f"\n{line}\n".encode())  # its own line, not after a row of dots
            os._exit(HUNG_EXIT)


_WATCH = _WaitWatch()


def _config():
    """This session's pytest config (None outside a pytest session)."""
    return getattr(sys.modules.get("tailreactor_conformance.plugin"), "CONFIG", None)


def _uncapture(config) -> None:
    """Give fd 2 back to the terminal if pytest captures it (it would lose the line at exit)."""
    capman = config and config.pluginmanager.getplugin("capturemanager")
    try:
        if capman:
            capman.suspend_global_capture(in_=False)
    except Exception:  # noqa: BLE001 - the line goes to the captured fd then; the exit still happens
        pass


def create_backend(name: str):
    """``cabi:PATH`` -> a watched :class:`CabiBackend`; any other name -> the reference's backend."""
    if is_cabi(name):
        return CabiBackend(library_path(name))
    from tailreactor.backends import create_backend as create

    return create(name)
