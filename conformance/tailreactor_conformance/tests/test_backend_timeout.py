"""Backend clause B8, wait timeout, checked on the backend object itself: a ready fd disarmed,
reported or closed, or a wake already taken, never ends a wait early; wait(0) polls without
sleeping; and a wait blocks, it does not spin (B7 and B8).

The timeout's rounding to the kernel's or library's unit is in ``test_backend_timeout_rounding.py``;
waits under signals in ``test_backend_signals.py``.
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
import time
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import ERR
from tailreactor_conformance.harness import (
    LIVENESS_S,
    collect,
    fill_send_buffer,
    revents_named,
    shown,
    wait_until_blocked,
)
from tailreactor_conformance.tests._backend_helpers import (
    _close,
)


@pytest.mark.clause("B8")
def test_a_ready_disarmed_fd_does_not_end_a_wait_early(make_backend, pairs):
    """A disarmed direction leaves nothing armed: a backend that keeps watching the fd
    (its registration not narrowed) wakes at once and returns nothing, early."""
    b = make_backend()
    p, idle = pairs(2)
    p.make_readable()  # ready for good
    b.arm(p.fd, READ, "disarmed")
    b.flush()
    b.disarm(p.fd, READ)
    b.arm(idle.fd, READ, "never ready")
    # One poll first: it may reap what the disarm left in the kernel (io_uring's completion
    # of the cancelled poll, or of the poll itself if it completed before the cancel).
    _nothing_reported(b.wait(0), "after the disarm of the readable fd's READ ('disarmed')")
    _never_early(b, "with a readable fd's READ disarmed", "does the disarmed, ready fd wake it")


@pytest.mark.clause("B8")
def test_a_wake_already_taken_does_not_end_a_later_wait_early(make_backend, pairs):
    """The wait a wake ended took it (B7): later waits with nothing ready last their timeout.
    A backend that never empties its wake channel (an eventfd or a socket left readable)
    returns every later wait at once, empty."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    b.wake()
    assert b.wait(LIVENESS_S) == []  # ended by the wake (B7)
    assert b.wait(0) == []  # a poll may reap what the wake left in the kernel (a completion)
    _never_early(
        b,
        "after a wake already taken",
        "is the wake channel left readable (an eventfd or a socket not read empty)",
    )


def _never_early(b, situation, at_once):
    """wait(5 ms) and wait(20 ms) with nothing armed ready, in ``situation``: each reports nothing
    and lasts its timeout.  One ended at once is asked ``at_once`` (what the situation leaves
    ready); one ended late in its timeout, a deadline on a clock read before the call."""
    for timeout_s in (0.005, 0.02):
        t0 = time.monotonic_ns()
        got = b.wait(timeout_s)
        elapsed = time.monotonic_ns() - t0
        _nothing_reported(got, f"by wait({timeout_s}) {situation}")
        seen = f"wait({timeout_s}) {situation} returned nothing after {elapsed / 1e6:.3f} ms"
        assert elapsed >= timeout_s * 1e9, (
            f"{seen}, at once: {at_once}?"
            if elapsed < timeout_s * 1e9 / 10
            else f"{seen}, most of its timeout (what ends a wait at once is not it): is the deadline taken "
            "from a clock read before the call (an event library's cached loop time, a coarse clock)? "
            "Keep a CLOCK_MONOTONIC deadline of the backend's own"
        )


def _nothing_reported(got, when):
    """Nothing is armed and ready here: a report is a token that is not armed (B3's or B5's rule
    broken; this test times the waits)."""
    assert got == [], (
        f"reported {shown(got)} {when}, with nothing armed ready: a token disarmed, already reported, "
        "or armed for a closed file was reported (disarm must stop the library's watch of that "
        "direction; this B8 test times the waits around it)"
    )


@pytest.mark.clause("B8")
def test_a_ready_fd_with_its_ready_direction_disarmed_does_not_end_waits_early(make_backend, pairs):
    """Readable, its READ disarmed, its WRITE armed and not writable (a full send buffer): nothing
    armed is ready. A backend that keeps watching READ (a registration not narrowed, level
    triggered) wakes at once and returns nothing, wait after wait."""
    b = make_backend()
    (p,) = pairs(1)
    fill_send_buffer(p.ours)
    p.make_readable()
    b.arm(p.fd, READ, "disarmed")
    b.arm(p.fd, WRITE, "not writable")
    b.flush()
    b.disarm(p.fd, READ)
    # may reap what the disarm left (a completion, an unwanted report)
    _nothing_reported(b.wait(0) + b.wait(0), "after the disarm of the readable fd's READ ('disarmed')")
    _never_early(
        b,
        "with a readable fd's READ disarmed, its WRITE armed and not writable",
        "does the disarmed READ wake it",
    )
    b.disarm(p.fd, WRITE)


@pytest.mark.clause("B8")
def test_a_hung_up_fd_reported_and_not_rearmed_does_not_end_waits_early(make_backend, pairs):
    """The peer closed, the READ token was reported, nothing is armed on the fd since (its
    owner has not disarmed it yet): the hang-up, which the kernel reports unasked, may end a
    wait or two early, not every wait after."""
    b = make_backend()
    p, idle = pairs(2)
    b.arm(idle.fd, READ, "never ready")
    b.arm(p.fd, READ, "hung up")
    p.peer.close()
    assert collect(b, 1, extra_waits=1) == Counter({"hung up": 1})
    _nothing_reported(b.wait(0) + b.wait(0), "after the hung-up fd's READ was reported")
    _never_early(
        b, "with a hung-up fd reported and not re-armed", "does the hang-up nobody is armed for wake it"
    )
    b.disarm(p.fd, READ)


@pytest.mark.clause("B8")
def test_an_armed_fd_closed_without_disarm_does_not_end_waits_early(make_backend, pairs):
    """The header's rule for an armed fd closed without disarm (the caller's bug): the backend
    drops that arming silently or reports it once. Either way the closed number is
    not ready after that, and waits with nothing else ready last their timeout. A poll(2)
    backend that keeps the number in its array gets POLLNVAL from every poll: each wait
    returns at once, empty."""
    b = make_backend()
    p, idle = pairs(2)
    b.arm(idle.fd, READ, "never ready")
    b.arm(p.fd, READ, "closed")  # not readable: the peer stays open and writes nothing
    b.flush()
    number = p.ours.detach()
    os.close(number)  # armed, never disarmed; this test opens no fd after it, so the number stays closed
    # It may report the closed arming once (ERR; a selector that cannot tell says readable,
    # and the callback's recv then fails with EBADF).
    got = b.wait(0) + b.wait(0)
    assert [tok for tok, _ in got] in ([], ["closed"]), got
    _never_early(
        b, "with an armed fd closed without disarm", "does the closed number wake it (poll(2)'s POLLNVAL)"
    )


@pytest.mark.clause("B8")
def test_wait_zero_polls_without_blocking(make_backend, pairs):
    """wait(0) is a poll: 100 of them with nothing ready end well within the liveness bound
    (a backend that blocks, e.g. rounds 0 up to a millisecond or more, does not)."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    deadline = time.monotonic() + LIVENESS_S
    done = 0
    while done < 100 and time.monotonic() < deadline:
        assert b.wait(0) == []
        done += 1
    assert done == 100, f"only {done} of 100 wait(0) calls returned within {LIVENESS_S} s: wait(0) blocks"


@pytest.mark.clause("B8")
def test_wait_zero_never_sleeps(make_backend, pairs):
    """wait(0) is a poll, counted without a clock: 100 of them with nothing ready, and the
    calling thread's voluntary context switches (each sleep in the kernel is one) grow by
    fewer than 50. A backend that rounds 0 up to a millisecond sleeps in every one of them,
    which the test above, bounded by the liveness time, lets pass."""
    if not hasattr(resource, "RUSAGE_THREAD"):
        pytest.skip("platform limit: getrusage(RUSAGE_THREAD) (Linux) counts one thread's context switches")
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    assert b.wait(0) == []
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    for _ in range(100):
        assert b.wait(0) == []
    slept = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before
    assert slept < 50, f"100 wait(0) calls with nothing ready slept {slept} times: wait(0) blocks"


@pytest.mark.clause("B8")
@pytest.mark.parametrize("timeout_s", [0.001, 0.005])
def test_wait_timeout_after_an_idle_gap_is_never_early(make_backend, pairs, timeout_s):
    """A backend with a clock of its own (libuv's cached loop time, refreshed once per
    loop run) must refresh it before taking the deadline: here the last loop run ended
    two timeouts before this wait, and a deadline taken from the stale clock is past."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    b.wait(0)  # a loop run: a cached clock is fresh now
    time.sleep(2 * timeout_s)  # the idle gap under test (callbacks running), not a synchronisation
    t0 = time.monotonic_ns()
    got = b.wait(timeout_s)
    elapsed = time.monotonic_ns() - t0
    assert got == []
    assert elapsed >= timeout_s * 1e9, (
        f"wait({timeout_s}) after an idle gap of {2 * timeout_s * 1e3:g} ms returned after "
        f"{elapsed / 1e6:.3f} ms: is the deadline taken from a clock cached before the gap?"
    )


# -- B7, B8: a wait blocks, it does not spin (issue 41) ---------------------------------
# From event-library backends' mistakes: backends on libev, GLib and libuv whose waits spun.
# A wait held open for a while, then ended by wake() from this thread: what it did meanwhile
# is counted, not timed. A C backend's every tr_backend_wait call is counted by the suite's
# adapter (its ``wait_returns``): one wait() is as many calls as the library returned -EINTR,
# plus one. A wait that blocks makes one call, or one a slice: the header's backend that
# cannot let a signal through blocks in slices (say 100 ms) and returns -EINTR at each end.
# One that spins (libev's ev_async unref'd, a watcher left started on a ready fd with its
# callbacks ignored) makes tens of thousands, a core busy, and is never early or late.
# A Python backend's wait is one call whose inside is not counted: its early return is.
# Counting misses a spin inside one call (a library's loop re-run by the wait itself with
# nothing to do: a GLib source still polling an fd with condition 0, a ready time never set
# back, a libuv poll handle left started, its callbacks ignored), so the CPU time the waiting
# thread used in the wait is measured too, for every backend.

#: How long a wait is held open before the wake: a spin makes thousands of calls in it.
HOLD_S = 0.3
#: A wait with no limit is held past a second: a backend that returns 0 at the end of a slice
#: (100 ms), or takes "no limit" as a second (epoll_wait(1000)), returns inside it, unwoken.
NO_LIMIT_HOLD_S = 1.2
#: The shortest slice accepted: a tenth of the header's 100 ms. However loaded the machine,
#: a slice ends only after its time has passed, so a backend that blocks in slices of 100 ms
#: makes at most one call per 100 ms of the wait's measured run, ten times under this bound;
#: a spin's call takes microseconds, so even with a hundredth of a core it makes far more.
SLICE_S = 0.01
#: The CPU a held wait may use: a wait that blocks uses microseconds in the kernel and
#: the library, and the suite's Python around it (ctypes, the reports' conversion, a
#: -EINTR a slice) a few ms; the thread's CPU time counts only while it runs, so no load
#: makes it grow. SPIN_CPU_S is far above that. A spin uses all the CPU it is given: a
#: whole core on an idle machine, and at a load of 20 on 2 cores about 2/21 of one, so
#: over SPIN_SHARE of its run. A spin the machine starves below that share passes (a false
#: pass); a wait that blocks never fails.
SPIN_CPU_S = 0.03
SPIN_SHARE = 0.05


def _calls(b) -> Counter | None:
    """What ``b``'s tr_backend_wait calls have returned so far (None: a Python backend)."""
    returns = getattr(b, "wait_returns", None)
    return None if returns is None else Counter(returns)


def _named(calls: Counter) -> str:
    """``{-EINTR: 2, 0: 1}`` as "-EINTR 2 times, 0 once"."""
    return ", ".join(
        f"{'-EINTR' if rc == -errno.EINTR else rc} {'once' if n == 1 else f'{n} times'}"
        for rc, n in calls.items()
    )


def _held_wait(b, timeout_s: float | None, window_s: float) -> tuple[dict, Counter | None]:
    """``b.wait(timeout_s)`` on a thread of its own, left for ``window_s`` once it is seen
    asleep in the kernel (at most LIVENESS_S if never), then woken from this thread. Returns
    {"got", "elapsed_ns", "cpu_ns": the CPU time its thread used in the wait, "early": returned
    before the wake was sent} and the calls it made; what the wait raised, it raises."""
    before = _calls(b)
    started, returned, sent = threading.Event(), threading.Event(), threading.Event()
    result: dict = {}

    def waiter():
        result["tid"] = threading.get_native_id()
        started.set()
        t0, cpu0 = time.monotonic_ns(), time.thread_time_ns()
        try:
            result["got"] = b.wait(timeout_s)
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            result["raised"] = exc
        finally:
            result["cpu_ns"] = time.thread_time_ns() - cpu0
            result["elapsed_ns"] = time.monotonic_ns() - t0
            result["early"] = not sent.is_set()
            returned.set()

    t = threading.Thread(target=waiter, name="conformance-held-wait", daemon=True)
    t.start()
    started.wait()
    wait_until_blocked(result["tid"], returned)
    returned.wait(window_s)  # the window itself: a wait that returns in it was not woken
    sent.set()
    b.wake()
    woken = returned.wait(LIVENESS_S)
    assert woken, f"wait({timeout_s}) did not return within {LIVENESS_S} s of wake()"
    t.join()
    if "raised" in result:
        raise result["raised"]
    after = _calls(b)
    return result, None if before is None or after is None else after - before


def _spin_inside(what: str, cpu_ns: int, elapsed_ns: int) -> str | None:
    """Why a wait that used ``cpu_ns`` of CPU in ``elapsed_ns`` spins, or None: at most
    SPIN_CPU_S, or SPIN_SHARE of its run, is a wait that blocks."""
    bound_ns = max(SPIN_CPU_S * 1e9, SPIN_SHARE * elapsed_ns)
    if cpu_ns <= bound_ns:
        return None
    return (
        f"{what} used {cpu_ns / 1e6:.0f} ms of CPU in {elapsed_ns / 1e6:.0f} ms "
        f"(accepted: at most {bound_ns / 1e6:.0f} ms, the larger of {SPIN_CPU_S * 1e3:g} ms and "
        f"{SPIN_SHARE:.0%} of its run): it spins inside the call, a core busy; the header wants a wait "
        f"that blocks: stop the library's watch of an fd at its report and at its disarm (GLib: "
        f"g_source_remove_unix_fd, not condition 0; libuv: uv_poll_stop), and set a ready time back "
        f"once it is due (g_source_set_ready_time(-1))"
    )


def _assert_blocked(r: dict, calls: Counter | None, what: str, spare: int) -> None:
    """The wait (a C backend's) made at most one tr_backend_wait call per SLICE_S of its run,
    plus the one the wake ends and ``spare`` (a loop run that returns once for a registration
    removed lazily); then (every backend's) it used little CPU (_spin_inside). Calls first: a
    spin across calls is named by its -EINTR returns, one inside a call by its CPU time."""
    elapsed_ns = r["elapsed_ns"]
    if calls is not None:
        allowed = 1 + spare + int(elapsed_ns / (SLICE_S * 1e9))
        made = sum(calls.values())
        assert made <= allowed, (
            f"{what} called tr_backend_wait {made} times in {elapsed_ns / 1e6:.0f} ms with no signal "
            f"(-EINTR {calls[-errno.EINTR]} times, 0 {calls[0]} times; accepted: at most {allowed}): it "
            f"spins, a core busy; the header wants a wait that blocks, returning -EINTR with no signal "
            f"at most once a slice (say 100 ms) or once for a registration the library removes lazily"
        )
    spin = _spin_inside(what, r["cpu_ns"], elapsed_ns)
    assert spin is None, spin


@pytest.mark.clause("B7")
def test_a_wait_without_a_limit_held_open_with_nothing_armed_blocks_until_the_wake(make_backend):
    """wait(None) with nothing armed, held open for NO_LIMIT_HOLD_S, then woken: it returned only after
    the wake, and (a C backend) made a call a slice at most. A backend that ends each slice
    with 0 returns unwoken; one whose library loop does not block with no watcher of its own
    active (libev's ev_async unref'd) returns -EINTR over and over, never early."""
    b = make_backend()
    r, calls = _held_wait(b, None, NO_LIMIT_HOLD_S)
    returned = "" if calls is None else f" (tr_backend_wait returned {_named(calls)})"
    assert not r["early"], (
        f"wait(None) with nothing ready returned {r['got']} after {r['elapsed_ns'] / 1e6:.0f} ms, "
        f"unwoken{returned}: the header wants a wait with no limit to return only when woken or "
        f"something is ready, and -EINTR, never 0, at a signal or the end of a slice"
    )
    assert r["got"] == [], r["got"]
    _assert_blocked(r, calls, "wait(None) with nothing armed", spare=1)


@pytest.mark.clause("B8")
def test_a_wait_beside_ready_fds_disarmed_or_reported_blocks_until_its_end(make_backend, pairs):
    """A finite wait held open for HOLD_S beside a ready fd whose READ was disarmed and one
    whose READ was reported and not re-armed (the reactor's backpressure: data left unread),
    then woken: nothing is reported, and (a C backend) it made a call a slice at most. A
    backend that leaves the library's watcher of those fds started, its callbacks ignored,
    wakes at every loop run and returns -EINTR over and over until the timeout."""
    b = make_backend()
    reported, disarmed, idle = pairs(3)
    b.arm(idle.fd, READ, "never ready")
    reported.make_readable()  # ready for good: never read
    b.arm(reported.fd, READ, "reported")
    assert collect(b, 1, extra_waits=0) == Counter({"reported": 1})
    disarmed.make_readable()
    b.arm(disarmed.fd, READ, "disarmed")
    b.flush()
    b.disarm(disarmed.fd, READ)
    assert b.wait(0) == []  # may reap what the disarm left (a completion, an unwanted report)
    r, calls = _held_wait(b, LIVENESS_S, HOLD_S)
    assert r["got"] == [], r["got"]
    what = f"wait({LIVENESS_S:g}) beside a disarmed and a reported, ready fd"
    _assert_blocked(r, calls, what, spare=3)


@pytest.mark.clause("B7")
def test_a_wait_without_a_limit_after_a_finite_one_beside_a_hung_up_and_a_closed_fd_blocks(
    make_backend, pairs
):
    """A wait(0.01) that returned a report before its deadline, then wait(None) held open for
    NO_LIMIT_HOLD_S beside an fd disarmed and then hung up and an armed fd closed without disarm,
    then woken: it returned only after the wake and used little CPU. A backend over GLib that
    keeps the ready time of the finite wait's deadline (never set back to -1), keeps a disarmed
    fd in its source with condition 0 (poll(2) still returns its POLLHUP), or keeps polling a
    closed fd (POLLNVAL at every run) re-runs its loop inside this one call until the wake."""
    b = make_backend()
    reported, hung_up, closed = pairs(3)
    hung_up_fd = hung_up.fd
    b.arm(hung_up_fd, READ, "disarmed")
    b.arm(closed.fd, READ, "closed")
    b.flush()
    assert b.wait(0) == []  # the library now watches both
    b.disarm(hung_up_fd, READ)
    reported.make_readable()
    b.arm(reported.fd, READ, "reported")
    got = b.wait(0.01)
    assert [tok for tok, _ in got] == ["reported"], got
    hung_up.peer.close()  # the unarmed fd hangs up: POLLHUP whatever it was asked for
    _close(closed)
    # A poll may reap what the hang-up left (an unwanted report that narrows a registration
    # lazily) and the closed fd's arming, once with ERR (the header allows it).
    reaped = b.wait(0)
    r, calls = _held_wait(b, None, NO_LIMIT_HOLD_S)
    if r["early"] and [(tok, bool(rev & ERR)) for tok, rev in r["got"]] == [("closed", True)]:
        r, calls = _held_wait(b, None, NO_LIMIT_HOLD_S)  # the closed fd's ERR came later: hold the next
    wrong = [
        (tok, revents_named(rev)) for tok, rev in [*reaped, *r["got"]] if tok != "closed" or not rev & ERR
    ]
    assert not r["early"] and not wrong, (
        f"wait(None) after a finite wait, beside a disarmed hung-up fd and an armed closed one, returned "
        f"{r['got']} after {r['elapsed_ns'] / 1e6:.0f} ms, unwoken: only the closed fd's arming, once with "
        f"ERR, may end a wait (then the next one is held)"
    )
    what = "wait(None) after a finite wait, beside a disarmed hung-up fd and an armed closed one,"
    _assert_blocked(r, calls, what, spare=3)


#: The idle gap before a finite wait: a library whose timer is set from a clock cached at its
#: last loop run finds that timer due this long before the wait's deadline.
IDLE_GAP_S = 0.3


@pytest.mark.clause("B8")
def test_a_finite_wait_after_an_idle_gap_blocks_until_its_end(make_backend, pairs):
    """wait(IDLE_GAP_S + HOLD_S) after an idle gap of IDLE_GAP_S since the last loop run: never
    early, and it used little CPU. A library that sets its timer from a clock cached at its last
    loop run (libev's ev_now, libuv's loop time, a GLib ready time from a cached time) has it due
    a gap early; a backend that keeps its own CLOCK_MONOTONIC deadline, as the header wants, is
    never early, but one that runs the loop again with that timer still due returns at once again
    and again until the deadline (a GLib reader's backend: 111 ms of CPU in five waits of 50 ms)."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "never ready")
    b.wait(0)  # a loop run: a cached clock is fresh now
    time.sleep(IDLE_GAP_S)  # the idle gap under test (callbacks running), not a synchronisation
    timeout_s = IDLE_GAP_S + HOLD_S
    before = _calls(b)
    t0, cpu0 = time.monotonic_ns(), time.thread_time_ns()
    got = b.wait(timeout_s)
    r = {"cpu_ns": time.thread_time_ns() - cpu0, "elapsed_ns": time.monotonic_ns() - t0}
    after = _calls(b)
    what = f"wait({timeout_s:g}) after an idle gap of {IDLE_GAP_S * 1e3:g} ms"
    assert got == [], f"{what} reported {got}, nothing armed being ready"
    assert r["elapsed_ns"] >= timeout_s * 1e9, (
        f"{what} returned after {r['elapsed_ns'] / 1e6:.3f} ms: is the deadline taken from a clock "
        "cached before the gap?"
    )
    # A re-run every slice (-EINTR) and one for the library's timer, due a gap early.
    _assert_blocked(r, None if before is None or after is None else after - before, what, spare=1)


@pytest.mark.clause("B8")
def test_a_wait_of_the_largest_timeout_blocks_until_the_wake(make_backend):
    """A wait of 2**63 ns (timeout_ns INT64_MAX in C, about 292 years: the header's largest,
    which the reactor passes for a timer that far off), held open for HOLD_S, then woken: it is
    accepted, returns only after the wake and uses little CPU. Converting it must not overflow:
    (ns + 999) / 1000 of INT64_MAX wraps negative, a timeval libevent fires at once, and a
    backend that runs the loop again for the time left spins; Python's select.epoll and poll
    raise OverflowError past INT_MAX ms (about 24.8 days): clamp to what the library takes."""
    b = make_backend()
    largest_s = 2**63 / 1e9
    r, calls = _held_wait(b, largest_s, HOLD_S)
    assert not r["early"], (
        f"wait({largest_s:g} s) with nothing armed returned {r['got']} after "
        f"{r['elapsed_ns'] / 1e6:.0f} ms, unwoken: does converting the largest timeout overflow (into "
        "a time already past, or one that blocks with no slices: B7 then sees signals held off)? The "
        "header takes any timeout_ns up to INT64_MAX: clamp it to what the library takes, and round up "
        "without overflow"
    )
    assert r["got"] == [], r["got"]
    _assert_blocked(r, calls, f"wait({largest_s:g} s) with nothing armed", spare=1)
