"""Waits under a microsecond timed in C: B8's "never early" for a ``cabi:`` backend, every time.

Role
----
A wait of 500 ns that truncates its timeout to whole microseconds (a ``struct
timeval``) polls: the kernel returns after a poll's cost, a few hundred ns at most.  Timed
from Python, the adapter's own work around the call (a ctypes call costs about
a microsecond) is inside the measurement, and whether one such poll still looks
early is the machine's to decide, run by run.  So the suite times these waits
in C: :data:`SOURCE` is a loop that calls the library's ``tr_backend_wait``
through its function pointer and reads ``CLOCK_MONOTONIC`` right before and
after each call.  Nothing but the call is between the two reads, so an early
return is seen as what it is: a wait that returned before its timeout, a fact
and not a threshold (a wait that returns late is fine).

The loop is built once per process with the C compiler ``$CC`` names (``cc``
when unset), as a shared library in a temporary directory that is removed once
it is loaded.  Without a compiler, or where it cannot build the loop, the check
cannot be made: :class:`Unavailable` says why in one line and names what to
install, and B8's test skips with it (a skip, never a pass, never a failure).
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SOURCE", "Misnamed", "Unavailable", "WaitTimes", "time_waits"]

#: The loop.  Each wait's timeout is ``timeout_ns``, or, with ``spread_ns``, one of 1000
#: timeouts from ``timeout_ns`` to ``timeout_ns + spread_ns`` in a scrambled order, and an early
#: return is one before the wait's own timeout.  With ``spread_ns`` the loop also sleeps between
#: waits, as a caller works between them, for a scrambled 0 to ``spread_ns``: a wait over a
#: library's whole-millisecond clock ends on one of its ticks, and without the pause every wait
#: would start at the same phase of that clock, where a race at the tick is never met.  With
#: ``signal_every_ns``, a thread of the loop's own sends SIGALRM to the waiting thread that often
#: (the caller installs a handler that returns first): a signal's EINTR is where a backend counts
#: the time left, and a count on a clock coarser or older than ``CLOCK_MONOTONIC`` comes short.
#: A wait that returns -EINTR is called again with the time left, as the adapter does; its
#: time runs from the first call to the last return.  The loop ends
#: at the first wait that returns anything but 0 (a report or an error: the caller
#: looks at ``rc``), else once it made ``at_least`` waits and ``budget_ns`` has passed.
SOURCE = r"""
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

typedef int (*tr_wait_fn)(void *, int64_t, void *, uint32_t);

struct tr_wait_times {
    uint64_t waits;      /* waits made */
    uint64_t early;      /* of them, returned before timeout_ns */
    int64_t least_ns;    /* the shortest wait */
    int rc;              /* the first return that was not 0, else 0 */
};

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

struct signaller {
    pthread_t waiter;
    int64_t every_ns;
    atomic_int stop;
};

static void *send_signals(void *arg) {
    struct signaller *s = arg;
    struct timespec p = {s->every_ns / 1000000000, s->every_ns % 1000000000};
    while (!atomic_load(&s->stop)) {
        nanosleep(&p, NULL);
        if (!atomic_load(&s->stop))
            pthread_kill(s->waiter, SIGALRM);
    }
    return NULL;
}

static void time_waits(tr_wait_fn wait, void *b, int64_t timeout_ns, int64_t spread_ns, void *events,
                       uint32_t capacity, int64_t budget_ns, uint64_t at_least, struct tr_wait_times *out);

void tr_time_waits(tr_wait_fn wait, void *b, int64_t timeout_ns, int64_t spread_ns, int64_t signal_every_ns,
                   void *events, uint32_t capacity, int64_t budget_ns, uint64_t at_least,
                   struct tr_wait_times *out) {
    struct signaller s = {pthread_self(), signal_every_ns, 0};
    pthread_t t;
    int signalled = signal_every_ns > 0 && pthread_create(&t, NULL, send_signals, &s) == 0;
    out->rc = 0;
    if (signal_every_ns > 0 && !signalled) {
        out->waits = out->early = 0;
        out->least_ns = INT64_MAX;
        out->rc = -EAGAIN; /* no thread to send the signals: reported, never a pass */
        return;
    }
    time_waits(wait, b, timeout_ns, spread_ns, events, capacity, budget_ns, at_least, out);
    if (signalled) {
        atomic_store(&s.stop, 1);
        pthread_join(t, NULL);
    }
}

static void time_waits(tr_wait_fn wait, void *b, int64_t timeout_ns, int64_t spread_ns, void *events,
                       uint32_t capacity, int64_t budget_ns, uint64_t at_least, struct tr_wait_times *out) {
    int64_t end = now_ns() + budget_ns;
    out->waits = out->early = 0;
    out->least_ns = INT64_MAX;
    out->rc = 0;
    for (;;) {
        int64_t timeout = timeout_ns + (int64_t)((out->waits * 7919) % 1000) * spread_ns / 999;
        int64_t left = timeout, start = now_ns();
        int rc = wait(b, left, events, capacity);
        while (rc == -EINTR) {
            left = start + timeout - now_ns();
            rc = wait(b, left > 0 ? left : 0, events, capacity);
        }
        int64_t elapsed = now_ns() - start;
        out->waits++;
        if (elapsed < out->least_ns)
            out->least_ns = elapsed;
        if (elapsed < timeout)
            out->early++;
        if (rc != 0) {
            out->rc = rc;
            return;
        }
        if (out->waits >= at_least && now_ns() >= end)
            return;
        if (spread_ns) {
            int64_t pause = (int64_t)((out->waits * 104729) % 1000) * spread_ns / 999;
            struct timespec p = {pause / 1000000000, pause % 1000000000};
            nanosleep(&p, NULL);
        }
    }
}
"""

#: What to install when no compiler is found (one line, in the skip reason).
INSTALL = "install a C compiler (apt-get install gcc, dnf install gcc) or name one in CC"


class Unavailable(Exception):
    """The loop cannot be built here: the one-line reason, naming what to install."""


class Misnamed(Exception):
    """``$CC`` names no program on PATH: the user's setting is wrong, not the platform (the tests
    that need the loop fail, naming it, rather than skip as for a machine with no compiler)."""


class _Times(ctypes.Structure):
    _fields_ = [
        ("waits", ctypes.c_uint64),
        ("early", ctypes.c_uint64),
        ("least_ns", ctypes.c_int64),
        ("rc", ctypes.c_int),
    ]


@dataclass(frozen=True)
class WaitTimes:
    """What the loop saw: ``waits`` made, ``early`` of them before their timeout, the
    shortest (``least_ns``), and the first return that was not 0 (``rc``: reports or -errno)."""

    waits: int
    early: int
    least_ns: int
    rc: int


_loop: ctypes.CDLL | str | None = None  # built, or why it cannot be (a str), or not tried yet


def _build() -> ctypes.CDLL:
    """Compile :data:`SOURCE` with ``$CC`` (or ``cc``) and load it; :class:`Unavailable` if it cannot."""
    named = os.environ.get("CC", "").strip()
    cc = shlex.split(named or "cc")
    if named and cc and shutil.which(cc[0]) is None:
        raise Misnamed(
            f"CC={named} names no program on PATH: name an installed C compiler in CC, or unset CC to use "
            "cc (B8 times waits under a microsecond in C)"
        )
    if not cc or shutil.which(cc[0]) is None:
        raise Unavailable(
            f"no C compiler ({' '.join(cc) or 'cc'} is not on PATH) to time waits under a "
            f"microsecond outside Python: {INSTALL}"
        )
    with tempfile.TemporaryDirectory(prefix="tailreactor-conformance-") as tmp:
        src, lib = Path(tmp, "tr_time_waits.c"), Path(tmp, "tr_time_waits.so")
        src.write_text(SOURCE)
        try:
            done = subprocess.run(
                [
                    *cc,
                    "-O2",
                    "-std=c11",
                    "-D_POSIX_C_SOURCE=200809L",
                    "-fPIC",
                    "-shared",
                    "-pthread",
                    "-o",
                    str(lib),
                    str(src),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"{cc[0]} could not build the C timing loop ({exc}): {INSTALL}") from None
        if done.returncode != 0:
            first = next(
                (ln for ln in done.stderr.splitlines() if ln.strip()), f"exit status {done.returncode}"
            )
            raise Unavailable(f"{cc[0]} could not build the C timing loop ({first.strip()}): {INSTALL}")
        loop = ctypes.CDLL(str(lib))  # loaded: the file may go with its directory
    fn = loop.tr_time_waits
    fn.restype = None
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int64,
        ctypes.c_uint64,
        ctypes.POINTER(_Times),
    ]
    return loop


def time_waits(
    wait_fn,
    handle,
    timeout_ns: int,
    events,
    capacity: int,
    budget_ns: int,
    at_least: int,
    spread_ns: int = 0,
    signal_every_ns: int = 0,
) -> WaitTimes:
    """Call ``wait_fn`` (a library's ``tr_backend_wait``) on ``handle`` with ``timeout_ns`` (up to
    ``timeout_ns + spread_ns``; with ``signal_every_ns``, SIGALRM sent to the calling thread that
    often, whose handler the caller installs: see :data:`SOURCE`), timed in C, for at least
    ``at_least`` waits and ``budget_ns``; the loop is built at the first call
    (:class:`Unavailable` if it cannot be, then and at every later call)."""
    global _loop
    if _loop is None:
        try:
            _loop = _build()
        except Unavailable as exc:
            _loop = str(exc)
    if isinstance(_loop, str):
        raise Unavailable(_loop)
    out = _Times()
    _loop.tr_time_waits(
        ctypes.cast(wait_fn, ctypes.c_void_p),
        handle,
        timeout_ns,
        spread_ns,
        signal_every_ns,
        ctypes.cast(events, ctypes.c_void_p),
        capacity,
        budget_ns,
        at_least,
        ctypes.byref(out),
    )
    return WaitTimes(out.waits, out.early, out.least_ns, out.rc)
