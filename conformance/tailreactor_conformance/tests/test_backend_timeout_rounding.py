"""Backend clause B8, wait timeout, for the timeout's own length: fractions of a
millisecond, a thousand short waits in a row, a second without timer slack and waits under a
microsecond are never early, which a timeout rounded down to the kernel's or library's unit
makes them.
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

import pytest

from tailreactor.backends import READ
from tailreactor_conformance import ctiming


# -- B8 ------------------------------------------------------------------------
@pytest.mark.clause("B8")
# Fractions of a millisecond too: the reactor passes the time to the next timer as is,
# and a backend that truncated 0.0005 s to 0 ms would spin until the deadline.
@pytest.mark.parametrize("timeout_s", [0.0005, 0.001, 0.0025, 0.02, 0.05])
def test_wait_timeout_is_never_early(make_backend, pairs, timeout_s):
    """A C backend's waits are timed in C around the library's call alone (the adapter's
    ``time_waits``, as B8's waits under a microsecond are): timed from Python, the adapter's
    own work around the call hides an early return smaller than it (a timeout rounded down to
    whole milliseconds returns a 2.5 ms wait after 2 ms and a little: early by less than a
    Python caller adds, at times)."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    if hasattr(b, "time_waits"):
        _never_early_timed_in_c(b, timeout_s)
        return
    # The one legitimate wall-clock check: elapsed >= timeout on a monotonic
    # clock.  No upper bound: a loaded machine may return late, never early.
    t0 = time.monotonic_ns()
    got = b.wait(timeout_s)
    elapsed = time.monotonic_ns() - t0
    assert got == []
    assert elapsed >= timeout_s * 1e9, f"wait({timeout_s}) returned after {elapsed / 1e6:.3f} ms"


#: A C backend's waits of each timeout, timed in C: at least this many, for at least this long (s):
#: a timeout rounded down to milliseconds returns early in most waits, not in every one (a
#: loaded machine makes some late).
MS_WAITS_IN_C, MS_BUDGET_S = 5, 0.1


def _never_early_timed_in_c(b, timeout_s):
    """``MS_WAITS_IN_C`` waits of ``timeout_s`` with nothing ready, timed in C: none early."""
    from tailreactor_conformance import ctiming

    timeout_ns = math.ceil(timeout_s * 1e9)  # as the adapter passes it
    try:
        times = b.time_waits(timeout_ns, MS_BUDGET_S, MS_WAITS_IN_C)
    except ctiming.Unavailable as exc:
        pytest.skip(f"platform limit: {exc}")
    assert times.rc == 0, f"tr_backend_wait({timeout_ns} ns) returned {times.rc} with nothing ready"
    assert not times.early, (
        f"wait({timeout_s}) returned early in {times.early} of {times.waits} waits timed in C around "
        f"tr_backend_wait, after {times.least_ns / 1e6:.3f} ms at the least: "
        + early_hint(times, timeout_ns, 1_000_000, "milliseconds")
    )


def early_hint(times, timeout_ns: int, unit_ns: int, unit: str) -> str:
    """The likelier cause of early waits, from what was seen: a timeout rounded down (to
    ``unit`` or coarser) ends nearly every wait early (all but those a loaded machine makes
    late); a deadline taken from a clock read before the call, some of them."""
    rounded = f"is timeout_ns rounded down (to {unit}, or coarser)? Round up: timeout_ns / {unit_ns} + (timeout_ns % {unit_ns} != 0), which cannot overflow near INT64_MAX"
    cached = (
        "is the deadline taken from a clock read before the call (an event library's cached loop "
        "time, e.g. libev's ev_now or libuv's uv_now, not updated first)? Keep a CLOCK_MONOTONIC "
        "deadline of the backend's own"
    )
    if 2 * times.early >= times.waits:
        return f"{rounded}; else, {cached}"
    return (
        "only some were early (a deadline on a stale clock makes some early; so does a timeout "
        "rounded down that the library compares with a clock it truncates the same way, as GLib's "
        f"ready time in microseconds: about a quarter of waits of 2.5 us): {cached}; else, {rounded}"
    )


#: Short waits one after another: timeouts from SWEEP_FROM_NS to SWEEP_FROM_NS + SWEEP_SPREAD_NS
#: (1 us to 1 ms), for SWEEP_BUDGET_S of the profile (s; at least SWEEP_WAITS waits): about 700
#: waits a second over a backend that rounds up to milliseconds.
SWEEP_FROM_NS, SWEEP_SPREAD_NS, SWEEP_WAITS = 1_000, 999_000, 100
SWEEP_BUDGET_S = {"ci": 2.0, "deep": 15.0}


@pytest.mark.clause("B8")
def test_a_thousand_short_waits_in_a_row_each_return_and_none_early(make_backend, pairs):
    """Waits of 1 us to 1 ms with nothing ready, one after another for SWEEP_BUDGET_S: each
    returns, and none before its timeout.  A race a few waits seldom meet shows in a thousand:
    over libuv, a one-shot timer for the wait's timeout is due before uv_run polls whenever a
    millisecond boundary passes between uv_update_time and uv_run's own reading of the clock; it
    fires there, the poll has no timer left to bound it, and the wait blocks until an fd or a wake
    (a C backend's loop is timed in C, and the watchdog ends it)."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    if hasattr(b, "time_waits"):
        from tailreactor_conformance import ctiming

        try:
            times = b.time_waits(SWEEP_FROM_NS, _sweep_budget_s(), SWEEP_WAITS, SWEEP_SPREAD_NS)
        except ctiming.Unavailable as exc:
            pytest.skip(f"platform limit: {exc}")
    else:
        times = _short_waits_timed_in_python(b)
    assert times.rc == 0, f"tr_backend_wait(1 us to 1 ms) returned {times.rc} with nothing ready"
    assert not times.early, (
        f"{times.early} of {times.waits} waits of 1 us to 1 ms returned before their timeout: is "
        "the deadline kept on a clock of the backend's own (CLOCK_MONOTONIC), with the time left "
        "run again?"
    )


def _sweep_budget_s() -> float:
    """How long the sweep of short waits goes on in the active profile (deep: a rarer race)."""
    from tailreactor_conformance import profiles

    return SWEEP_BUDGET_S[profiles.name()]


def _short_waits_timed_in_python(b):
    """The sweep's waits of a Python backend, timed around ``wait`` (a hang: pytest-timeout)."""
    from tailreactor_conformance import ctiming

    waits = early = 0
    least = None
    deadline = time.monotonic() + _sweep_budget_s()
    while waits < SWEEP_WAITS or time.monotonic() < deadline:
        timeout_ns = SWEEP_FROM_NS + (waits * 7919 % 1000) * SWEEP_SPREAD_NS // 999
        t0 = time.monotonic_ns()
        got = b.wait(timeout_ns / 1e9)
        elapsed = time.monotonic_ns() - t0
        assert got == [], f"wait({timeout_ns / 1e9:g}) reported {got} with nothing ready"
        waits += 1
        least = elapsed if least is None else min(least, elapsed)
        early += elapsed < timeout_ns
    return ctiming.WaitTimes(waits, early, least, 0)


@contextlib.contextmanager
def _without_timer_slack():
    """The calling thread real-time (SCHED_FIFO, lowest priority) inside the block: the kernel
    gives a real-time thread's timers no slack.  Yields whether it could (CAP_SYS_NICE or
    RLIMIT_RTPRIO); the thread's policy is restored after."""
    if not hasattr(os, "sched_setscheduler"):
        yield False
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(os.sched_get_priority_min(os.SCHED_FIFO)))
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, policy, param)


@pytest.mark.clause("B8")
def test_a_wait_of_a_second_is_never_early_without_timer_slack(make_backend, pairs):
    """wait(1 s) with nothing ready lasts a second at least, timed with the kernel's timer slack
    off.  The kernel lets a poll(2)- or epoll-style wait's timer fire up to 0.1 % of its timeout
    late (its slack; 0.5 % for a niced thread), the very size of the error of a backend that
    converts a timeout 0.1 % short (to milliseconds as ceil(timeout_s * 999)): with the slack such
    a wait(1 s) mostly ends after the second anyway, without it a millisecond early every time.
    The thread is made real-time for the wait (a real-time thread's timers get no slack); where
    that is not allowed the wait is timed with the slack, a weaker check of the same rule.  A
    second, because the error is a fraction of the timeout: a shorter wait's is smaller than a
    thread's wake-up latency (this test's cost: one second)."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    timeout_s = 1.0
    with _without_timer_slack() as exact:
        t0 = time.monotonic_ns()
        got = b.wait(timeout_s)
        elapsed = time.monotonic_ns() - t0
    assert got == []
    assert elapsed >= timeout_s * 1e9, (
        f"wait({timeout_s}) returned after {elapsed / 1e6:.3f} ms"
        + (" (timer slack off: a real-time thread)" if exact else "")
        + ": is the timeout converted a fraction short?"
    )


# -- B8: a timeout under a microsecond, and of a few ------------------------------------
# From event-library backends' mistakes: a backend on libevent took a timeout under a microsecond
# as none (issue 41).
#: Timeouts under a microsecond: one that truncates the timeout to whole microseconds (a
#: struct timeval, libevent's timers) takes each as 0, a poll.  998.5 ns is 999 ns once
#: rounded up to whole nanoseconds (0.000000999 s would be 1000: a float is not exact).
#: And of a few microseconds: where this backend's poll costs more than the ones under a
#: microsecond (GLib's loop run: about 600 ns), those skip and the library's own work hides a
#: timeout of 0 us; one of 1.5 or 2.5 us truncated to 1 or 2 us returns early all the same.
SUBMICRO_S = (0.0000005, 0.0000009985, 0.0000015, 0.0000025)
SUBMICRO_IDS = ["500ns", "998.5ns", "1.5us", "2.5us"]
#: How long to keep waiting with each (seconds; at least SUBMICRO_WAITS waits).  A backend
#: that rounds up to milliseconds makes about 500 waits in it; one that polls, hundreds of
#: thousands.
SUBMICRO_BUDGET_S = 0.5
SUBMICRO_WAITS = 20
#: How long a C backend's polls are timed first (seconds; at least SUBMICRO_WAITS of them).
POLL_BUDGET_S = 0.05


@pytest.mark.clause("B8")
@pytest.mark.parametrize("timeout_s", SUBMICRO_S, ids=SUBMICRO_IDS)
def test_a_wait_under_a_microsecond_is_never_early(make_backend, pairs, timeout_s):
    """wait(timeout) with nothing ready, for timeouts under a microsecond and of a few, many
    times (for SUBMICRO_BUDGET_S): none returns before its timeout. A backend that converts
    timeout_ns to microseconds (struct timeval, g_source_set_ready_time) rounding down polls
    under a microsecond, and returns up to a microsecond early above one.

    A C backend's waits are timed in C around the library's call alone (the adapter's
    ``time_waits``, :mod:`tailreactor_conformance.ctiming`): a poll there costs a fraction of its timeout,
    so a wait that polls is seen as early every time. Where this backend's poll itself costs
    the timeout or more, no timing can tell one from a wait: that timeout skips, naming the
    cost, and the longer ones still run. A Python backend's waits are timed around ``wait``: a
    Python caller's own call costs more than a microsecond, so a Python backend's poll there is
    not early for any Python caller (its mutant skips the kernel to be seen)."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    timeout_ns = math.ceil(timeout_s * 1e9)  # as the adapter passes it: 998.5 ns -> 999
    if hasattr(b, "time_waits"):
        times = _timed_in_c(b, timeout_ns)
    else:
        times = _timed_in_python(b, timeout_s)
    assert times.rc == 0, f"tr_backend_wait({timeout_ns} ns) returned {times.rc} with nothing ready"
    assert not times.early, (
        f"{times.early} of {times.waits} waits of {timeout_s * 1e9:g} ns returned early, after "
        f"{times.least_ns} ns at the least: "
        + early_hint(times, timeout_ns, 1000, "microseconds (struct timeval, g_source_set_ready_time)")
    )


def _timed_in_c(b, timeout_ns):
    """The waits of a ``cabi:`` backend timed in C; skips a timeout this backend's poll costs."""
    try:
        polls = b.time_waits(0, POLL_BUDGET_S, SUBMICRO_WAITS)
    except ctiming.Unavailable as exc:
        pytest.skip(f"platform limit: {exc}")
    assert polls.rc == 0, f"tr_backend_wait(0) returned {polls.rc} with nothing ready"
    if polls.least_ns >= timeout_ns:  # the backend's cost, not the platform's: longer ones run
        pytest.skip(
            f"tr_backend_wait(0) of this backend takes {polls.least_ns} ns at the least, not under "
            f"the {timeout_ns} ns timeout: a wait that polls looks like one that waited (the longer "
            "timeouts of this test still run)"
        )
    return b.time_waits(timeout_ns, SUBMICRO_BUDGET_S, SUBMICRO_WAITS)


def _timed_in_python(b, timeout_s):
    """The waits of a Python backend timed around ``wait``."""
    limit = timeout_s * 1e9
    waits = early = 0
    least = None
    deadline = time.monotonic() + SUBMICRO_BUDGET_S
    while waits < SUBMICRO_WAITS or time.monotonic() < deadline:
        waits += 1
        t0 = time.monotonic_ns()
        got = b.wait(timeout_s)
        elapsed = time.monotonic_ns() - t0
        assert got == [], got
        least = elapsed if least is None else min(least, elapsed)
        early += elapsed < limit
    return ctiming.WaitTimes(waits, early, least, 0)
