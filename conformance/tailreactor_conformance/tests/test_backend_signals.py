"""Backend clauses B7 and B8 under signals: a signal whose handler returns neither ends a wait
early (B8) nor ends a wait without a limit (B7); one whose handler raises ends it; the backend
changes no signal handler or mask; and waits under a signal about every millisecond are never
early (B8).
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tailreactor.backends import READ
from tailreactor_conformance import ctiming
from tailreactor_conformance.harness import (
    LIVENESS_S,
    Watchdog,
    signal_names,
    wait_until_blocked,
)


def _signal_during(b, timeout_s, handler_s, rescue):
    """``b.wait(timeout_s)`` with a SIGALRM sent to this thread once it blocks; the handler returns
    after ``handler_s``.  Returns (reports, elapsed ns, whether the watchdog had to rescue it,
    ns from the wait's start to the signal)."""
    main = threading.get_native_id()
    main_ident = threading.get_ident()
    sent = [None]
    returned = threading.Event()

    def handler(signum, frame):
        if handler_s:
            time.sleep(handler_s)  # a handler slower than the wait's timeout: none is left after it

    def interrupt():
        wait_until_blocked(main, returned)
        if returned.is_set():
            return  # the wait ended before it was seen blocking: no signal to send
        sent[0] = time.monotonic_ns()
        signal.pthread_kill(main_ident, signal.SIGALRM)

    old = signal.signal(signal.SIGALRM, handler)
    t = threading.Thread(target=interrupt)
    try:
        with Watchdog(rescue) as dog:
            t.start()
            t0 = time.monotonic_ns()
            got = b.wait(timeout_s)
            elapsed = time.monotonic_ns() - t0
            dog.done()
    finally:
        returned.set()
        t.join()
        signal.signal(signal.SIGALRM, old)
    return got, elapsed, dog.fired, (sent[0] - t0 if sent[0] is not None else None)


#: Waits a signal interrupts, one after another: an early return by less than a millisecond (a
#: library's EINTR retry on a whole-millisecond clock) is hidden in some waits, not in all.
SIGNALLED_WAITS = 12


@pytest.mark.clause("B8")
def test_a_signal_whose_handler_returns_does_not_end_a_wait_early(make_backend, pairs):
    """PEP 475: a signal interrupts the kernel's wait, its handler returns, and the wait goes on
    with the time left (stdlib epoll and poll retry so; a backend on a call that returns EINTR
    must too); a handler that outlasts the timeout leaves none, and the wait returns, empty."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    timeout_s = 0.05
    for attempt in range(1, SIGNALLED_WAITS + 1):
        got, elapsed, rescued, sent = _signal_during(b, timeout_s, 0, p.make_readable)
        assert not rescued and got == [], f"a wait({timeout_s}) interrupted by a signal did not return: {got}"
        assert elapsed >= timeout_s * 1e9, _early_after_a_signal(timeout_s, elapsed, sent, attempt)
    got, elapsed, rescued, _ = _signal_during(b, timeout_s, 2 * timeout_s, p.make_readable)
    assert not rescued and got == [], (
        f"wait({timeout_s}) interrupted by a signal whose handler took {2 * timeout_s} s did not return "
        f"within {LIVENESS_S} s: the time left was not taken after the handler"
    )


def _early_after_a_signal(timeout_s, elapsed, sent, attempt):
    """Why a wait a signal was to interrupt ended early, from when: before the signal (``sent``
    None, or after the return: it was never seen blocking), it ignored its timeout; at once
    after the signal, it returned 0 for it; near its timeout, the time left was counted short.
    ``elapsed`` and ``sent`` are ns from the wait's start."""
    seen = f"returned nothing after {elapsed / 1e6:.3f} ms, early (wait {attempt} of {SIGNALLED_WAITS})"
    fix = "keep a CLOCK_MONOTONIC deadline of the backend's own and run the loop again with the time left"
    if sent is None or sent >= elapsed:
        return (
            f"wait({timeout_s}), to be interrupted by a signal once it blocked, {seen}, before the signal was "
            f"sent, with {(timeout_s * 1e9 - elapsed) / 1e6:.3f} ms of its timeout left: early with no signal; is the "
            "deadline taken from a clock cached before the call, or timeout_ns rounded down? "
            f"{fix[0].upper()}{fix[1:]}"
        )
    seen = f"wait({timeout_s}) interrupted by a signal {seen}"
    if elapsed - sent < (timeout_s * 1e9 - sent) / 2:
        return (
            f"{seen}, {max(0, elapsed - sent) / 1e6:.3f} ms after the signal, with "
            f"{(timeout_s * 1e9 - sent) / 1e6:.3f} ms of its timeout left: did the wait return 0 when a "
            f"signal ended its poll or its library's loop run with nothing ready? Return -EINTR, or {fix}"
        )
    return (
        f"{seen}, {(timeout_s * 1e9 - elapsed) / 1e6:.3f} ms before its timeout: was the time left after "
        "the signal counted on a clock coarser or older than CLOCK_MONOTONIC (a library that retries "
        f"EINTR itself counts it on its own clock, e.g. libuv's whole milliseconds)? {fix[0].upper()}{fix[1:]}"
    )


@pytest.mark.clause("B7")
def test_a_signal_whose_handler_returns_does_not_end_a_wait_without_a_limit(make_backend, pairs):
    """wait(None) interrupted by a signal whose handler returns goes on waiting (PEP 475): only
    the wake ends it."""
    b = make_backend()
    rescue, idle = pairs(2)
    b.arm(idle.fd, READ, "never ready")
    b.arm(rescue.fd, READ, "rescue")
    main = threading.get_native_id()
    main_ident = threading.get_ident()
    woken = threading.Event()

    def interrupt_then_wake():
        wait_until_blocked(main)
        signal.pthread_kill(main_ident, signal.SIGALRM)
        wait_until_blocked(main)  # back in the wait after the handler
        woken.set()
        b.wake()

    old = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    t = threading.Thread(target=interrupt_then_wake)
    try:
        with Watchdog(rescue.make_readable) as dog:
            t.start()
            got = b.wait(None)
            early = not woken.is_set()
            dog.done()
    finally:
        t.join()
        signal.signal(signal.SIGALRM, old)
    assert not dog.fired, "wait(None) interrupted by a signal did not return after wake()"
    assert not early, "wait(None) returned after a signal whose handler returned, before the wake"
    assert "rescue" not in [tok for tok, _ in got]


class _Interrupted(Exception):
    """Raised by the test's signal handler, as KeyboardInterrupt is by Python's SIGINT handler."""


@pytest.mark.clause("B7")
@pytest.mark.parametrize("timeout_s", [None, 2**63 / 1e9], ids=["no-limit", "largest"])
def test_a_signal_whose_handler_raises_ends_a_wait_without_a_limit_or_of_the_largest_timeout(
    make_backend, pairs, timeout_s
):
    """wait(None), and a wait of the largest timeout (2**63 ns, about 292 years), with nothing
    ready, a signal sent to the waiting thread again and again until the wait ends, its handler
    raising (Ctrl-C's KeyboardInterrupt): the wait ends by that exception (a libuv reader's
    backend whose deadline, now + INT64_MAX, wrapped blocked there with no slices). A signal's EINTR is returned (-EINTR), so the caller runs its handlers; a
    backend that retries EINTR inside its wait, or whose library does (libevent's loop,
    libuv's uv_run, a GLib poll function that loops), never returns to run them, and an idle
    reactor ignores Ctrl-C until its next wake. The watchdog wakes such a wait after the
    liveness bound (no clock: the signals keep coming until the wait ends)."""
    b = make_backend()
    idle, rescue = pairs(2)
    b.arm(idle.fd, READ, "never ready")
    b.arm(rescue.fd, READ, "rescue")
    main, main_ident = threading.get_native_id(), threading.get_ident()
    ended, armed = threading.Event(), threading.Event()
    sent = [0]

    def handler(signum, frame):
        if armed.is_set():  # only inside the wait: a signal still in flight after it is ignored
            raise _Interrupted

    def interrupt_until_the_wait_ends():
        while wait_until_blocked(main, ended) and not ended.is_set():
            sent[0] += 1
            signal.pthread_kill(main_ident, signal.SIGALRM)

    old = signal.signal(signal.SIGALRM, handler)
    t = threading.Thread(target=interrupt_until_the_wait_ends)
    got = raised = None
    try:
        with Watchdog(b.wake) as dog:
            armed.set()
            t.start()
            try:
                got = b.wait(timeout_s)
            except _Interrupted:
                raised = True
            finally:
                armed.clear()
                ended.set()
            dog.done()
    finally:
        ended.set()
        t.join()
        signal.signal(signal.SIGALRM, old)
    assert raised and not dog.fired, _unraised(sent[0], got, dog.fired, timeout_s)


def _unraised(sent, got, fired, timeout_s=None):
    """Why a wait sent ``sent`` signals, whose handler raises, did not end by that exception:
    one that returned before any signal came returned with nothing, no signal and no wake, and
    EINTR has nothing to do with it."""
    wait = "wait(None)" if timeout_s is None else f"wait({timeout_s:g} s)"
    if not sent and not fired:
        return (
            f"{wait} returned {got} before any signal was sent (0 signals), with nothing ready, "
            "no signal and no wake: a wait without a limit returns only with reports, at a wake, or "
            "with -EINTR (a library's empty loop run, its own wakeup, is not a wake: run it again)"
        )
    return (
        f"{wait} was sent a signal {sent} time(s), its handler raising, and "
        + (f"ended only when the watchdog woke it after {LIVENESS_S} s" if fired else f"returned {got}")
        + ": a signal's EINTR is returned (-EINTR) so that the caller runs its handlers; a backend "
        "that retries it inside the wait (or whose library does) delays them until its timeout"
    )


@pytest.mark.clause("B7")
def test_the_backend_changes_no_signal_handler_and_no_signal_mask(make_backend, conformance_backend):
    """A signal ends a wait through the caller's handlers (-EINTR, then the handler runs): a
    backend that installs a handler of its own (libev's ev_default_loop: SIGCHLD), ignores a
    signal or blocks one takes that from the process.  Checked in a fresh process, which
    creates and uses one backend (a handler installed once would already be there in this
    one): the caught, ignored and blocked signals of /proc/thread-self/status are the same
    after each step as before the create."""
    make_backend().close()  # a backend the kernel refuses (io_uring) skips here, with the reason
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = (
        "import json, sys; from tailreactor_conformance.harness import signal_changes; "
        "print(json.dumps(signal_changes(sys.argv[1])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, conformance_backend],
        env=env,
        capture_output=True,
        text=True,
        timeout=60 + 3 * LIVENESS_S,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"a fresh process that created and used the backend exited with status {proc.returncode}: "
            f"{proc.stderr.strip()[-1500:]}",
            pytrace=False,
        )
    what = {"SigCgt": "signals with a handler", "SigIgn": "ignored signals", "SigBlk": "blocked signals"}
    changed = []
    for c in json.loads(proc.stdout.strip().splitlines()[-1]):
        gained, lost = signal_names(c["after"] & ~c["before"]), signal_names(c["before"] & ~c["after"])
        changed.append(
            f"after {c['step']}, the {what[c['field']]} ({c['field']})"
            + (f" gained {', '.join(gained)}" if gained else "")
            + (" and" if gained and lost else "")
            + (f" lost {', '.join(lost)}" if lost else "")
        )
    assert not changed, (
        "the backend changed the process's signal state: "
        + "; ".join(changed)
        + " (signal handlers and the mask are the process's: an event library's default loop or "
        "signal watcher takes them; libev: ev_loop_new with EVFLAG_NOSIGMASK, never ev_default_loop, "
        "which installs a SIGCHLD handler; GLib: no g_unix_signal_source_new or g_unix_signal_add, and "
        "no g_child_watch_source_new where GLib has no pidfd; libuv: no uv_signal_start or uv_spawn "
        "(SIGCHLD); libevent: no evsignal_new)"
    )


# -- B8: waits under frequent signals ---------------------------------------------------
# From an event-library backend's mistake: a backend on libevent kept its deadline on a coarse clock
# after a signal's EINTR (issue 41).
#: Waits of SIGNALLED_TIMEOUT_NS (a whole number neither of milliseconds nor of a coarse clock's
#: tick) with a SIGALRM about every SIGNAL_EVERY_NS, whose handler returns: each EINTR is where a
#: backend, or its library, counts the time left, and a count on a clock coarser or older than
#: CLOCK_MONOTONIC comes short by up to its tick.  At least SIGNALLED_SERIES_WAITS waits, for
#: SIGNALLED_BUDGET_S of the profile (s): such a count is early in some waits, not in all.
SIGNALLED_TIMEOUT_NS, SIGNAL_EVERY_NS, SIGNALLED_SERIES_WAITS = 3_500_000, 1_000_000, 150
SIGNALLED_BUDGET_S = {"ci": 0.5, "deep": 3.0}


@pytest.mark.clause("B8")
def test_waits_under_a_signal_about_every_millisecond_are_never_early(make_backend, pairs):
    """Waits of 3.5 ms with nothing ready, one after another, a signal about every millisecond
    (its handler returns): none returns before its timeout.  A library that retries EINTR
    itself and keeps the deadline on its own clock (libevent's loop on CLOCK_MONOTONIC_COARSE
    without EVENT_BASE_FLAG_PRECISE_TIMER: a tick of 1 to 10 ms; libuv's loop time in whole
    milliseconds) ends a wait up to a tick early after a signal; one signal in a long wait
    seldom shows it.  A C backend's waits and signals are timed and sent in C (the adapter's
    ``time_waits``), a Python backend's from Python (and a C backend's where no C compiler can
    build the loop: an early return by more than the adapter's own cost still shows)."""
    from tailreactor_conformance import profiles

    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    budget_s = SIGNALLED_BUDGET_S[profiles.name()]
    old = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    try:
        times = None
        if hasattr(b, "time_waits"):
            with contextlib.suppress(ctiming.Unavailable):  # no C compiler: timed from Python, as below
                times = b.time_waits(
                    SIGNALLED_TIMEOUT_NS, budget_s, SIGNALLED_SERIES_WAITS, signal_every_ns=SIGNAL_EVERY_NS
                )
        if times is None:
            times = _signalled_waits_in_python(b, budget_s)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert times.waits, "the C timing loop could not start the thread that sends its signals"
    assert times.rc == 0, (
        f"tr_backend_wait({SIGNALLED_TIMEOUT_NS} ns) returned {times.rc} with nothing ready, a signal "
        "about every millisecond"
    )
    assert not times.early, _early_under_signals(times)


def _early_under_signals(times):
    """Why waits under signals ended early, from how many and how soon: most, one within about
    two signals' interval, fits a wait that returns 0 at a signal; some, a time left counted short."""
    seen = (
        f"{times.early} of {times.waits} waits of {SIGNALLED_TIMEOUT_NS / 1e6:g} ms, with nothing ready and "
        f"a signal about every {SIGNAL_EVERY_NS / 1e6:g} ms whose handler returned, returned before their "
        f"timeout, after {times.least_ns / 1e6:.3f} ms at the least"
    )
    fix = "keep a CLOCK_MONOTONIC deadline of the backend's own and run the loop again with the time left"
    if 4 * times.early >= 3 * times.waits and times.least_ns < 2 * SIGNAL_EVERY_NS:
        return (
            f"{seen}: most ended early, one within about two signals: does the wait return 0 when a signal "
            f"ends its poll or its library's loop run with nothing ready? Return -EINTR, or {fix}"
        )
    return (
        f"{seen}: after a signal the time left was counted short, likely on a clock coarser or older than "
        "CLOCK_MONOTONIC (an event library's own, e.g. libevent's coarse clock without "
        "EVENT_BASE_FLAG_PRECISE_TIMER, or a loop time read before the call), or the timeout was rounded "
        f"down (B8's waits without signals would show that too): {fix}, checked before returning 0"
    )


def _signalled_waits_in_python(b, budget_s):
    """The waits of a Python backend, timed around ``wait``, while a thread sends SIGALRM to
    this one about every SIGNAL_EVERY_NS."""
    main, stop = threading.get_ident(), threading.Event()

    def send():
        while not stop.wait(SIGNAL_EVERY_NS / 1e9):
            signal.pthread_kill(main, signal.SIGALRM)

    sender = threading.Thread(target=send, daemon=True)
    timeout_s, waits, early, least = SIGNALLED_TIMEOUT_NS / 1e9, 0, 0, None
    sender.start()
    try:
        deadline = time.monotonic() + budget_s
        while waits < SIGNALLED_SERIES_WAITS or time.monotonic() < deadline:
            t0 = time.monotonic_ns()
            got = b.wait(timeout_s)
            elapsed = time.monotonic_ns() - t0
            assert got == [], f"wait({timeout_s}) reported {got} with nothing ready"
            waits += 1
            least = elapsed if least is None else min(least, elapsed)
            early += elapsed < SIGNALLED_TIMEOUT_NS
    finally:
        stop.set()
        sender.join()
    return ctiming.WaitTimes(waits, early, least, 0)
