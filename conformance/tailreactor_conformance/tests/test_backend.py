"""Backend clauses B1-B17, checked on the backend object itself (tokens in,
``(token, revents)`` out), on real socketpairs and pipes.

Clauses that the reactor must uphold on top of a backend (B4, the in-batch
half of B5, the reactor half of B12) are in ``test_backend_via_reactor.py``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import ERR, IN, OUT, SATISFIES, capabilities
from tailreactor_conformance.harness import (
    LIVENESS_S,
    Watchdog,
    backend_label,
    collect,
    fill_send_buffer,
    open_fd_count,
    reports,
    reports_until,
    require_capability,
    revents_named,
    rule_broken,
    shown,
    signal_names,
    wait_until_blocked,
)

DIRECTIONS = pytest.mark.parametrize("direction", [READ, WRITE], ids=["read", "write"])


# -- B1 ------------------------------------------------------------------------
@pytest.mark.clause("B1")
@DIRECTIONS
def test_each_arming_is_reported_exactly_once(make_backend, pairs, direction):
    b = make_backend()
    ps = pairs(200)
    for i, p in enumerate(ps):
        p.make_readable()  # readable, and writable anyway: both stay ready throughout
        b.arm(p.fd, direction, ("first", i))
    # Extra waits while every fd is still ready: a one-shot token must not come back.
    _each_once(collect(b, 200, extra_waits=3), {("first", i) for i in range(200)}, "200 ready fds armed once")
    for i in range(0, 200, 20):
        b.arm(ps[i].fd, direction, ("again", i))
    _each_once(
        collect(b, 10, extra_waits=3), {("again", i) for i in range(0, 200, 20)}, "10 of them armed again"
    )


def _each_once(got, armed, what):
    """Each token of ``armed`` reported once in ``got``, and nothing else: else says which were
    reported twice or more, which never, and which were not armed (pytest's compare of two
    Counters of 200 shortens their repr)."""
    again = sorted((tok, n) for tok, n in got.items() if tok in armed and n > 1)
    never = sorted(armed - set(got))
    unknown = sorted(tok for tok in got if tok not in armed)
    assert not (again or never or unknown), (
        f"{what}, readable and writable throughout, with waits after: "
        + "; ".join(
            part
            for part in (
                again
                and f"reported more than once (token, times): {again[:10]}"
                + (f" and {len(again) - 10} more" if len(again) > 10 else ""),
                never
                and f"never reported: {never[:10]}"
                + (f" and {len(never) - 10} more" if len(never) > 10 else ""),
                unknown and f"reported, not armed now: {unknown[:10]}",
            )
            if part
        )
        + " (each arming is reported exactly once: one-shot)"
    )


@pytest.mark.clause("B1")
def test_both_directions_are_reported_independently(make_backend, pairs):
    # epoll's EPOLLONESHOT disables the whole fd after one report: a backend
    # must re-arm the direction that was not reported, or it is lost.  Each
    # token once over the whole run; *when* READ may be reported is B15's.
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write")  # writable now, readable later
    got = collect(b, 1, extra_waits=2)
    p.make_readable()
    got += collect(b, 2 - sum(got.values()), extra_waits=2)
    assert got == Counter({"write": 1, "read": 1}), (
        f"READ and WRITE armed, the fd writable at once and readable later: reported {dict(got)}, "
        "not each token once (a one-shot registration of the whole fd ends with its first report: "
        "arm the other direction again)"
    )


@pytest.mark.clause("B1")
def test_a_token_replaced_before_its_report_is_never_reported(make_backend, pairs):
    # Arming an armed direction replaces its token: the old one is not also reported.
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "old")
    b.flush()
    b.arm(p.fd, READ, "new")
    p.make_readable()
    assert collect(b, 1, extra_waits=3) == Counter({"new": 1})


def _eexist_named(test):
    """A test with two backends open: an arm that fails with EEXIST says what it likely means."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except FileExistsError as e:
            raise AssertionError(
                f"{e}: an arm failed with EEXIST while two backends were open: do the two share one "
                "loop (a library's default loop, e.g. uv_default_loop(), whose uv_poll_init of an fd "
                "number already watched returns UV_EEXIST)? Each backend needs a loop of its own"
            ) from None  # one failure, this line: the table quotes the first

    return run


@pytest.mark.clause("B1")
@_eexist_named
def test_two_backends_open_at_once_each_report_their_own_armings(make_backend, pairs):
    """Two backends open at once (a reactor per thread): each reports its own armings once, also
    of an fd armed on both, and closing one leaves the other working (a backend over a loop the
    process shares, libev's ev_default_loop, uv_default_loop, breaks this)."""
    first, second = make_backend(), make_backend()
    own, shared, later = pairs(3)
    own.make_readable()
    shared.make_readable()
    first.arm(own.fd, READ, "first's own")
    first.arm(shared.fd, READ, "first's shared")
    second.arm(shared.fd, READ, "second's shared")
    first.flush()
    second.flush()
    got = collect(first, 2), collect(second, 1)
    assert got == (Counter({"first's own": 1, "first's shared": 1}), Counter({"second's shared": 1})), (
        f"two backends open at once reported (first, second) {got}: each must report its own armings "
        "alone (a loop or an epoll set the process shares, as libev's ev_default_loop or "
        "uv_default_loop(), hands one backend's reports to the other's wait)"
    )
    first.close()
    later.make_readable()
    second.arm(later.fd, READ, "second's after the first closed")
    got_after = collect(second, 1)
    assert got_after == Counter({"second's after the first closed": 1}), (
        f"after the first of two open backends was closed, the second reported {got_after}"
    )


#: How many times the two waits at once are made: a backend on a loop the process shares
#: (GLib's default GMainContext) fails some of them, at a moment the scheduler picks.
BOTH_WAITING_ROUNDS = 30


@pytest.mark.clause("B1")
@_eexist_named
def test_two_backends_waiting_at_once_on_two_threads_each_report_their_own(make_backend, pairs):
    """Two backends waiting at the same time on two threads (a reactor per thread): one in
    wait(None) with nothing ready until it is woken, the other given a ready fd, which its own
    wait must report, however the first waits. A backend on a loop the process shares, owned by
    one waiting thread at a time (GLib's default GMainContext, which g_unix_fd_add_full,
    g_timeout_add and g_idle_add attach to; a lock the process shares around the loop run), has
    the second wait block behind the first, or the first run the second's callback: the second
    then returns nothing until the first is woken. Repeated, since which thread wins is the
    scheduler's; each round bounded by a watchdog that wakes both, and a fresh backend waits
    for the wake in each (a wake may also end the next wait, B7)."""
    idle = make_backend()
    (never,) = pairs(1)
    for round_no in range(BOTH_WAITING_ROUNDS):
        blocked = make_backend()
        blocked.arm(never.fd, READ, "never ready")
        (ready,) = pairs(1)
        ready.make_readable()
        got, rescued, early = _while_another_waits(
            blocked, idle, ready, ("ready", round_no), never.make_readable
        )
        blocked.disarm(never.fd, READ)
        blocked.close()
        ready.close()
        tokens = [tok for tok, _ in got]
        assert not rescued and tokens == [("ready", round_no)], (
            f"round {round_no + 1} of {BOTH_WAITING_ROUNDS}: while another backend waited on another "
            f"thread, this backend's wait(None) with a ready armed fd returned {tokens}"
            + (f" only once the watchdog woke both after {LIVENESS_S} s" if rescued else "")
            + ": its ready fd was not reported. Either the wait did not run alone, on state of its own "
            "(a loop the process shares, e.g. GLib's default GMainContext, makes one backend's wait wait "
            "for the other's), or the fd's registration was lost (each round's fd may take the number "
            "of the last round's, closed: a backend or library that keeps the closed file's record for "
            "the number, e.g. libev without ev_io_set, never registers the new file; B5)"
        )
        assert early is None, (
            f"round {round_no + 1}: wait(None) with nothing ready returned {early} while another "
            "backend reported its own ready fd, before any wake"
        )


def _while_another_waits(blocked, idle, ready, token, unstick):
    """``idle.wait(None)`` for ``ready`` (armed with ``token``) on this thread while ``blocked``
    waits with no limit on another, until this thread wakes it (if that wake does not end it
    within the liveness bound, ``unstick`` makes its armed fd ready, and the test fails naming
    the wake). Returns (idle's reports, whether the watchdog had to wake both, what ``blocked``
    returned before its wake or None)."""
    result: dict = {}
    started = threading.Event()

    def wait_for_the_wake():
        result["tid"] = threading.get_native_id()
        started.set()
        result["got"] = blocked.wait(None)

    def wake_both():
        blocked.wake()
        idle.wake()

    t = threading.Thread(target=wait_for_the_wake)
    t.start()
    started.wait()
    wait_until_blocked(result["tid"])
    try:
        with Watchdog(wake_both) as dog:
            idle.arm(ready.fd, READ, token)
            got = idle.wait(None)
            dog.done()
        early = result.get("got")
    finally:
        blocked.wake()
        t.join(LIVENESS_S)
        if t.is_alive():
            unstick()
            t.join(LIVENESS_S)
            pytest.fail(
                f"the other backend's wait(None), nothing ready, did not return within {LIVENESS_S} s of "
                "its wake() (its armed fd, made readable then, ended it): this test ends that wait with "
                "wake(), so a wake that does not end a wait fails it too; see B7's failures",
                pytrace=False,
            )
        idle.disarm(ready.fd, READ)
    return got, dog.fired, early


# -- B2 ------------------------------------------------------------------------
@pytest.mark.clause("B2")
def test_readiness_present_when_armed_is_reported(make_backend, pairs):
    b = make_backend()
    r, w = pairs(2)
    r.make_readable()
    b.arm(r.fd, READ, "already readable")
    b.arm(w.fd, WRITE, "already writable")  # a fresh socket has room in its send buffer
    assert collect(b, 2) == Counter({"already readable": 1, "already writable": 1})


@pytest.mark.clause("B2")
def test_rearm_after_a_partial_read_sees_the_rest(make_backend, pairs):
    b = make_backend()
    (p,) = pairs(1)
    p.make_readable(b"0123456789")
    b.arm(p.fd, READ, "first")
    assert collect(b, 1) == Counter({"first": 1})
    assert p.ours.recv(4) == b"0123"  # six bytes are still buffered
    b.arm(p.fd, READ, "rest")
    assert collect(b, 1) == Counter({"rest": 1})


# -- B3 ------------------------------------------------------------------------
@pytest.mark.clause("B3")
def test_disarmed_token_is_never_reported(make_backend, pairs):
    b = make_backend()
    p, control = pairs(2)
    b.arm(p.fd, READ, "disarmed")
    b.flush()  # the arming has reached the kernel...
    p.make_readable()  # ...and the fd became ready before the disarm
    b.disarm(p.fd, READ)
    control.make_readable()
    b.arm(control.fd, READ, "control")  # proves the waits below do report
    _only_control_reported(collect(b, 1, extra_waits=3), "armed, flushed, made ready, then disarmed")


def _only_control_reported(got: Counter, what: str) -> None:
    """B3's check that a disarmed token never came back, said in a sentence: which token
    came, and what its disarm left (the library's watch, or a report it had collected)."""
    if got == Counter({"control": 1}):
        return
    extra = {tok: n for tok, n in got.items() if tok != "control"}
    assert not extra and got["control"] == 1, (
        f"a token {what} was reported after its disarm ({extra} beside the control's "
        f"{got['control']}): disarm must stop the library's watch of that direction (an event, "
        "a source, a registration left attached keeps firing) and drop any report collected for it"
        if extra
        else f"the control token, ready and armed, was reported {got['control']} time(s), not once"
    )


@pytest.mark.clause("B3")
def test_disarm_of_one_direction_keeps_the_other(make_backend, pairs):
    b = make_backend()
    (p,) = pairs(1)
    p.make_readable()
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write")
    b.disarm(p.fd, READ)
    b.disarm(p.fd, READ)  # disarming what is not armed does nothing
    got = collect(b, 1, extra_waits=3)
    assert got == Counter({"write": 1}), (
        f"READ and WRITE armed on a readable, writable fd, READ disarmed: reported {dict(got)}, not the "
        "WRITE token once: disarm stops the watch of its own direction alone, and all of it"
    )


@pytest.mark.clause("B3")
def test_disarm_of_write_keeps_read(make_backend, pairs):
    """The same the other way round: WRITE disarmed, the READ armed beside it is reported."""
    b = make_backend()
    (p,) = pairs(1)
    p.make_readable()
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write")
    b.disarm(p.fd, WRITE)
    got = collect(b, 1, extra_waits=3)
    assert got == Counter({"read": 1}), (
        f"READ and WRITE armed on a readable, writable fd, WRITE disarmed: reported {dict(got)}, not the "
        "READ token once: disarm stops the watch of its own direction alone, and all of it"
    )


def _read_from(pairs) -> list[tuple[int, bytes]]:
    """(fd, bytes) for every non-blocking socket of ``pairs`` that has something to read."""
    written = []
    for pair in pairs:
        for s in pair:
            try:
                written.append((s.fileno(), s.recv(64)))
            except BlockingIOError:
                pass
    return written


def _collected_not_delivered(b, pairs, direction=READ, other_armed=False):
    """Arm more ready fds than one wait returns and take one wait's reports.

    A backend on an event library (libuv, libev) collects every report of a loop run
    and hands out at most its batch: the rest are *collected but not delivered*, the
    state B3 and B5 must hold in.  With the C ABI the caller chooses the capacity, so
    it is 1 here; a Python backend's batch is what it declares (``max_batch``), else 8
    fds.  Each fd is armed for ``direction``, ready: READ made readable first, WRITE
    writable as a fresh socket is; with ``other_armed`` (WRITE only) each is armed for
    READ too, token ``("other", i)``, never ready: nothing is sent to it, so the fd
    stays armed after its WRITE is disarmed.  Returns ``(pairs, delivered tokens)``; the
    tokens are the pair indexes.
    """
    assert not (other_armed and direction == READ), "a WRITE that is never ready needs a full send buffer"
    if hasattr(b, "wait_capacity"):
        b.wait_capacity = 1
        n = 2
    else:
        cap = capabilities(b).max_batch
        n = cap + 1 if cap and cap < 1024 else 1025 if cap else 8
    _raise_nofile(4 * n + 64)
    ps = pairs(n)
    for i, p in enumerate(ps):
        if direction == READ:
            p.make_readable()
        elif other_armed:
            b.arm(p.fd, READ, ("other", i))  # never ready: nothing is sent to it
        b.arm(p.fd, direction, i)
    first = reports_until(b, lambda got: got)
    if not first:
        rule_broken("B1, B2", f"{n} ready armed fds, nothing reported within {LIVENESS_S} s")
    return ps, {tok for tok, _ in first}


@pytest.mark.clause("B3")
def test_disarm_drops_a_report_collected_but_not_delivered(make_backend, pairs):
    b = make_backend()
    ps, delivered = _collected_not_delivered(b, pairs)
    undelivered = [i for i in range(len(ps)) if i not in delivered]
    for i in undelivered:
        b.disarm(ps[i].fd, READ)
    (control,) = pairs(1)
    control.make_readable()
    b.arm(control.fd, READ, "control")  # proves the waits below do report
    late = collect(b, 1, extra_waits=3)
    assert late == Counter({"control": 1}), (
        f"tokens {sorted(t for t in late if t != 'control')} reported after their disarm (a wait returned "
        f"{sorted(delivered)} of {len(ps)} ready fds; the rest were disarmed)"
    )


@pytest.mark.clause("B3")
def test_disarm_after_flush_drops_what_the_flush_collected(make_backend, pairs):
    """arm -> flush -> disarm on an fd ready before the arm: a backend that queues arms
    until its loop runs may run it in flush, which collects the report."""
    b = make_backend()
    if hasattr(b, "wait_capacity"):
        b.wait_capacity = 1
    p, control = pairs(2)
    p.make_readable()
    b.arm(p.fd, READ, "disarmed")
    b.flush()
    b.disarm(p.fd, READ)
    control.make_readable()
    b.arm(control.fd, READ, "control")
    _only_control_reported(collect(b, 1, extra_waits=3), "ready when armed, flushed, then disarmed")


# -- B5 ------------------------------------------------------------------------
# What B5's tokens stand for, named in their failure messages.
_B5_TOKENS = {
    "new": "the arming of the file that took the closed fd's number",
    "new read": "the READ arming of the file that took the closed fd's number",
    "new write": "the WRITE arming of the file that took the closed fd's number",
    "control": "another socket, readable and armed: it shows that the waits report at all",
}


def _b5_reported(got: Counter, expected: dict[str, int], what: str) -> None:
    """``got`` (tokens counted over the waits) is ``expected``, else one line: what was reported,
    what was expected, what each token missed stands for and what a backend does wrong there."""
    if got == Counter(expected):
        return
    said = [f"{what}: reported {dict(got) or 'nothing'}, expected {expected}"]
    for tok in sorted(t for t in expected if got[t] < expected[t]):
        said.append(f"{tok!r} ({_B5_TOKENS.get(tok, 'an arming')}) reported {got[tok]} time(s)")
    if any(tok.startswith("new") and got[tok] < n for tok, n in expected.items()):
        said.append(
            "the arm of the reused number must register the file the number names now: the new "
            "file's arming was lost (is the closed file's registration, or its identity, kept and "
            "the new arming dropped with it?)"
        )
    if got["control"] < expected.get("control", 0):
        said.append("the waits reported no ready fd at all: see the other clauses this backend fails")
    extra = sorted(t for t in got if got[t] > expected.get(t, 0))
    if extra:
        said.append(
            f"{extra} reported more often than expected (a token not ready since its arming, or twice)"
        )
    raise AssertionError("; ".join(said))


@pytest.mark.clause("B5")
def test_reused_fd_number_never_gets_a_report_collected_for_the_old_one(make_backend, pairs):
    """Reports collected and not delivered (as in B3's test), then each of those fds
    disarmed, closed and its number reused by a socket that is not readable: none of
    the new armings is reported, by the old token or the new."""
    b = make_backend()
    ps, delivered = _collected_not_delivered(b, pairs)
    victims = [i for i in range(len(ps)) if i not in delivered]
    fresh = pairs(len(victims))
    reused = []
    try:
        for i, new in zip(victims, fresh):
            b.disarm(ps[i].fd, READ)
            number = ps[i].ours.detach()
            os.dup2(new.ours.fileno(), number)  # closes the old socket; its number now names `new`
            reused.append(socket.socket(fileno=number))
            b.arm(number, READ, f"new {i}")  # not readable
        (control,) = pairs(1)
        control.make_readable()
        b.arm(control.fd, READ, "control")
        late = collect(b, 1, extra_waits=3)
        assert late == Counter({"control": 1}), (
            f"reported on reused fd numbers: {sorted(t for t in late if t != 'control')}"
        )
        for s in reused:
            b.disarm(s.fileno(), READ)
    finally:
        for s in reused:
            s.close()


@pytest.mark.clause("B5")
def test_reused_fd_number_never_gets_the_old_report(make_backend, pairs):
    b = make_backend()
    old, new, control = pairs(3)
    old.make_readable()
    b.arm(old.fd, READ, "old")
    b.flush()  # the old registration is ready in the kernel
    b.disarm(old.fd, READ)
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old socket; its number now names `new`
    with socket.socket(fileno=number) as reused:
        b.arm(number, READ, "new")  # not readable yet
        control.make_readable()
        b.arm(control.fd, READ, "control")
        _b5_reported(
            collect(b, 1, extra_waits=3), {"control": 1}, "'new' armed on the reused number, not readable"
        )
        new.make_readable()
        _b5_reported(collect(b, 1, extra_waits=2), {"new": 1}, "the new file made readable")
        b.disarm(reused.fileno(), READ)


@pytest.mark.clause("B5")
def test_an_fd_closed_without_disarm_then_disarmed_and_its_number_reused(make_backend, pairs):
    """An armed fd closed without disarm (the caller's bug, which the backend survives: the C
    header says so): disarming its directions afterwards raises nothing, and the reused number
    gets the new file's reports only."""
    b = make_backend()
    old, new, control = pairs(3)
    b.arm(old.fd, READ, "old read")
    b.arm(old.fd, WRITE, "old write")
    b.flush()
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old file, armed; its number now names `new`
    with socket.socket(fileno=number) as reused:
        b.disarm(number, READ)  # one direction still armed: a backend narrows the registration
        b.disarm(number, WRITE)
        b.arm(number, READ, "new")  # not readable yet
        control.make_readable()
        b.arm(control.fd, READ, "control")
        _b5_reported(
            collect(b, 1, extra_waits=3),
            {"control": 1},
            "the closed fd's armings disarmed, 'new' not readable",
        )
        new.make_readable()
        _b5_reported(collect(b, 1, extra_waits=2), {"new": 1}, "the new file made readable")
        b.disarm(reused.fileno(), READ)


@pytest.mark.clause("B5")
def test_an_fd_closed_without_disarm_then_its_reused_number_armed_registers_the_new_file(make_backend, pairs):
    """The header's rule for an armed fd closed without disarm: a later arm of the reused number
    (no disarm in between) registers the new file, which the kernel no longer watches."""
    b = make_backend()
    old, new = pairs(2)
    b.arm(old.fd, READ, "old")  # not readable
    b.flush()
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old file, armed; its number now names `new`
    with socket.socket(fileno=number) as reused:
        b.arm(number, READ, "new")
        new.make_readable()
        _b5_reported(
            collect(b, 1, extra_waits=2),
            {"new": 1},
            "an fd closed without disarm, its number taken by another file, armed as 'new' and made readable",
        )
        b.disarm(reused.fileno(), READ)


def _settle(b, settle: str, what: str) -> None:
    """Settle the armings made so far: by a flush (``settle`` "flush"), or by a wait(0), which must
    report nothing (``what`` says why nothing is ready) -- a library that registers a watcher only
    at its next loop run has registered it after either."""
    if settle == "flush":
        b.flush()
    else:
        assert b.wait(0) == [], f"wait(0) reported an arming of {what}"


@pytest.mark.clause("B5")
@pytest.mark.parametrize("late_disarm", [False, True], ids=["rearmed", "disarmed-then-armed"])
@pytest.mark.parametrize("new_first", [False, True], ids=["old-file-first", "new-file-first"])
@pytest.mark.parametrize("settle", ["flush", "wait"], ids=["flushed", "after-a-wait"])
def test_a_closed_file_alive_in_a_dup_never_reports_to_the_new_arming_of_its_number(
    make_backend, pairs, late_disarm, new_first, settle
):
    """An armed fd closed without disarm while its file lives on in another descriptor (a dup,
    a forked child, SCM_RIGHTS): epoll keeps that file's registration (epoll(7) Q6), which goes
    on firing under the closed number.  The number reused and armed again for the new file
    (directly, or after a late disarm the kernel answers with ENOENT): the old file's readiness
    reaches neither the new token nor the replaced one.  Either file opened first: a backend that
    tells files apart by (st_dev, st_ino) must compare them for equality, not order.  The first
    arm is settled by a flush, or by a wait(0): a backend over a library that registers a watcher
    only when its loop runs (libuv's uv_poll_start, a flush that does nothing) has registered the
    old file only after a wait, and only then keeps the stale registration this test makes fire."""
    b = make_backend()
    old, new, control = pairs(3)
    if new_first:
        old, new = new, old
    b.arm(old.fd, READ, "old")  # not readable
    _settle(b, settle, "a socket nothing was written to")
    alive = os.dup(old.fd)  # the old file lives on here
    try:
        number = old.ours.detach()
        os.dup2(new.ours.fileno(), number)  # closes the number, not the file; it now names `new`
        with socket.socket(fileno=number) as reused:
            if late_disarm:
                b.disarm(number, READ)  # the caller's late disarm: the number names `new` now
            b.arm(number, READ, "new")  # replaces "old"; the new file is not readable
            b.flush()
            old.make_readable()  # the old file, which the kernel may still watch under the number
            control.make_readable()
            b.arm(control.fd, READ, "control")
            late = collect(b, 1, extra_waits=3)
            assert late == Counter({"control": 1}), (
                f"reported {sorted(t for t in late if t != 'control')} when only the closed file, alive in "
                "a dup, became readable: its registration names the closed number, which now names "
                "another file (over epoll: a generation beside the fd in epoll_data, a new one at each "
                "EPOLL_CTL_ADD, and a report of an older one dropped; where epoll_data holds the number "
                "alone, a poll of the number's file at each report under a number found reused"
                + (
                    "; a library that registers at its loop run, as libuv does, has registered the closed "
                    "file by the wait(0) before the close, and a disarm after the close removes nothing)"
                    if settle == "wait"
                    else ")"
                )
            )
            new.make_readable()
            _b5_reported(
                collect(b, 1, extra_waits=2),
                {"new": 1},
                "the closed file alive in a dup, its number's new file (armed as 'new') then made readable",
            )
            b.disarm(reused.fileno(), READ)
    finally:
        os.close(alive)


@pytest.mark.clause("B5")
def test_a_closed_file_alive_in_a_dup_with_both_directions_armed_is_survived(make_backend, pairs):
    """Case (a) of the header with both directions armed: the number closed without disarm (not
    reused), its file alive in a dup becomes readable while WRITE stays armed.  A backend that
    reports it and then narrows the registration to WRITE meets a closed fd (EBADF); the wait
    must survive that (report each arming of the closed number at most once, or drop it) and go
    on serving."""
    b = make_backend()
    old, control = pairs(2)
    fill_send_buffer(old.ours)  # WRITE stays armed, not ready
    b.arm(old.fd, READ, "old read")
    b.arm(old.fd, WRITE, "old write")
    b.flush()
    alive = os.dup(old.fd)  # the old file lives on here
    try:
        old.ours.close()  # closed without disarm: the caller's bug, which the backend survives
        old.make_readable()
        control.make_readable()
        b.arm(control.fd, READ, "control")
        got = collect(b, 1, extra_waits=3)
        assert got["control"] == 1 and max(got.values()) == 1, (
            f"reported {dict(got)}: each arming of the closed number at most once, besides control"
        )
        control.drain()
        control.make_readable()
        b.arm(control.fd, READ, "again")
        assert collect(b, 1, extra_waits=2) == Counter({"again": 1})
        b.disarm(control.fd, READ)
    finally:
        os.close(alive)


def _drain_peer(p) -> None:
    """Read everything ``p.peer`` holds: ``p.ours``'s send buffer empties, it is writable again."""
    while True:
        try:
            if not p.peer.recv(65536):
                return
        except BlockingIOError:
            return


@pytest.mark.clause("B5")
@DIRECTIONS
def test_a_closed_file_alive_in_a_dup_never_reports_to_a_new_file_not_ready_for_the_direction(
    make_backend, pairs, direction
):
    """As above, with the new file ready for neither direction (armed for READ) or for the other
    direction only (armed for WRITE, readable): a backend that checks a report under a reused
    number against the number's file now (a poll of it) keeps only the directions that file is
    ready for.  The old file, alive in a dup, becomes ready for the armed direction; only when the
    new file does is the new token reported."""
    b = make_backend()
    old, new, control = pairs(3)
    if direction == WRITE:
        fill_send_buffer(old.ours)  # not writable
    b.arm(old.fd, direction, "old")
    b.flush()
    alive = os.dup(old.fd)  # the old file lives on here
    try:
        fill_send_buffer(new.ours)  # the new file: not writable
        if direction == WRITE:
            new.make_readable()  # readable only: ready for the other direction
        number = old.ours.detach()
        os.dup2(new.ours.fileno(), number)  # closes the number, not the file; it now names `new`
        with socket.socket(fileno=number) as reused:
            b.arm(number, direction, "new")  # replaces "old"; the new file is not ready for it
            b.flush()
            if direction == READ:
                old.make_readable()  # the old file, which the kernel may still watch under the number
            else:
                _drain_peer(old)
            control.make_readable()
            b.arm(control.fd, READ, "control")
            late = collect(b, 1, extra_waits=3)
            assert late == Counter({"control": 1}), (
                f"reported {sorted(t for t in late if t != 'control')} when only the closed file, alive in "
                f"a dup, became ready for {'READ' if direction == READ else 'WRITE'}: the number's file "
                "now is ready for neither direction or for the other one only"
            )
            if direction == READ:
                new.make_readable()
            else:
                _drain_peer(new)
            _b5_reported(
                collect(b, 1, extra_waits=2),
                {"new": 1},
                "the closed file alive in a dup, its number's new file (armed as 'new') then made ready",
            )
            b.disarm(reused.fileno(), direction)

    finally:
        os.close(alive)


# -- B5: the closed file, alive in a dup, given its own number back (issue 41) --
@pytest.mark.clause("B5")
@pytest.mark.parametrize("settle", ["flush", "wait"], ids=["flushed", "after-a-wait"])
def test_a_closed_file_dup2d_back_to_its_number_after_a_late_disarm_is_armed_and_reported(
    make_backend, pairs, settle
):
    """Armed, the number closed without disarm while a dup keeps its file, then disarmed (the
    header: disarmed all the same, 0; over epoll the kernel's delete fails and the registration
    stays with the file), and the same file dup2'd back to its number: the number names an open
    file, so arming it succeeds and the file's readiness reaches the new token.  Over epoll the
    add finds the registration left there (EEXIST), which names this very file: modify it."""
    b = make_backend()
    old, control = pairs(2)
    b.arm(old.fd, READ, "old")  # not readable
    _settle(b, settle, "a socket nothing was written to")
    alive = os.dup(old.fd)  # the file lives on here
    try:
        number = old.ours.detach()
        os.close(number)  # closed without disarm: the caller's bug
        b.disarm(number, READ)  # the caller's late disarm of a closed number
        os.dup2(alive, number)  # the same file takes its number back
        with socket.socket(fileno=number) as back:
            try:
                b.arm(number, READ, "back")
            except OSError as exc:
                raise AssertionError(
                    f"arming fd {number} raised {exc!r}, but it names an open file: the one closed "
                    "under the backend, dup2'd back to its number (over epoll: EPOLL_CTL_ADD meets the "
                    "registration the failed delete left, EEXIST; modify it instead)"
                ) from None
            control.make_readable()
            b.arm(control.fd, READ, "control")
            assert collect(b, 1, extra_waits=3) == Counter({"control": 1})
            old.make_readable()
            assert collect(b, 1, extra_waits=2) == Counter({"back": 1}), (
                "the file the number names, armed and made readable, was not reported once to its token"
            )
            b.disarm(back.fileno(), READ)
    finally:
        os.close(alive)


# -- B6 ------------------------------------------------------------------------
def _reported_once(b, token, direction):
    got = []
    deadline = time.monotonic() + LIVENESS_S
    while not got and time.monotonic() < deadline:
        got = b.wait(0.01)
    got += b.wait(0)
    name = "READ" if direction == READ else "WRITE"
    assert [tok for tok, _ in got] == [token], (
        f"reported {shown(got)}: expected {token!r} once, the {name} arming of an fd whose HUP or ERR "
        "came with no IN or OUT (a hang-up or an error satisfies whichever direction is armed)"
    )
    revents = got[0][1]
    assert revents & SATISFIES[direction], f"revents {revents_named(revents)} do not satisfy {name}"


@pytest.mark.clause("B6")
def test_peer_close_reaches_the_read_token(make_backend, pairs):
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "eof")
    b.flush()
    p.peer.close()
    _reported_once(b, "eof", READ)
    assert p.ours.recv(1) == b""


@pytest.mark.clause("B6")
def test_pipe_hangup_without_data_reaches_the_read_token(make_backend):
    b = make_backend()
    r, w = os.pipe()
    try:
        b.arm(r, READ, "hup")
        b.flush()
        os.close(w)  # POLLHUP alone: no POLLIN on a pipe whose writers are gone
        w = -1
        _reported_once(b, "hup", READ)
        b.disarm(r, READ)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


@pytest.mark.clause("B6")
def test_error_without_room_reaches_the_write_token(make_backend):
    b = make_backend()
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:  # fill the pipe: POLLOUT is gone
            try:
                os.write(w, b"\0" * 65536)
            except BlockingIOError:
                break
        os.close(r)  # no reader left: POLLERR alone
        r = -1
        b.arm(w, WRITE, "err")
        _reported_once(b, "err", WRITE)
        b.disarm(w, WRITE)
    finally:
        os.close(w)
        if r >= 0:
            os.close(r)


@pytest.mark.clause("B6")
def test_reset_by_peer_reaches_the_read_token(make_backend):
    b = make_backend()
    with socket.create_server(("127.0.0.1", 0)) as srv:
        cli = socket.create_connection(srv.getsockname(), timeout=LIVENESS_S)
        acc, _ = srv.accept()
        with cli:
            cli.setblocking(False)
            b.arm(cli.fileno(), READ, "reset")
            b.flush()
            acc.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            acc.close()  # linger 0: RST, the client socket gets ECONNRESET
            _reported_once(b, "reset", READ)
            b.disarm(cli.fileno(), READ)


# -- B7 ------------------------------------------------------------------------
def _blocking_wait(b, rescue_pair):
    """``b.wait(None)`` guarded by a watchdog that makes the rescue fd readable."""
    b.arm(rescue_pair.fd, READ, "rescue")
    with Watchdog(rescue_pair.make_readable) as dog:
        got = b.wait(None)
        dog.done()
    assert not dog.fired, "wait(None) did not return after wake(); the watchdog had to end it"
    assert "rescue" not in [tok for tok, _ in got]


@pytest.mark.clause("B7")
def test_wake_from_another_thread_ends_a_blocked_wait(make_backend, pairs):
    b = make_backend()
    (rescue,) = pairs(1)
    waiter = threading.get_native_id()

    def wake_when_blocked():
        wait_until_blocked(waiter)
        b.wake()

    t = threading.Thread(target=wake_when_blocked)
    t.start()
    try:
        _blocking_wait(b, rescue)
    finally:
        t.join()


@pytest.mark.clause("B7")
def test_wake_before_the_wait_is_not_lost(make_backend, pairs):
    b = make_backend()
    (rescue,) = pairs(1)
    t = threading.Thread(target=b.wake)
    t.start()
    t.join()  # the wake is done; nobody was waiting
    _blocking_wait(b, rescue)


@pytest.mark.clause("B7")
def test_wake_from_the_creating_thread_ends_a_wait_on_another(make_backend, pairs):
    # A reactor built on one thread and run on another (a server started in a
    # thread, stopped from main): wake() comes from the thread that created it.
    b = make_backend()
    (rescue,) = pairs(1)
    b.arm(rescue.fd, READ, "rescue")
    result: dict = {}

    def waiter():
        result["tid"] = threading.get_native_id()
        started.set()
        result["got"] = b.wait(None)

    started = threading.Event()
    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    wait_until_blocked(result["tid"])
    b.wake()
    t.join(LIVENESS_S)
    rescued = t.is_alive()
    if rescued:
        rescue.make_readable()
        t.join()
    assert not rescued, "wake() from the creating thread did not end a wait on another thread"
    assert "rescue" not in [tok for tok, _ in result["got"]]


@pytest.mark.clause("B7")
def test_wait_without_a_limit_returns_only_after_the_wake(make_backend, pairs):
    # wait(None) with nothing ready has no timeout to end it: only the wake may.
    # The waker records that it sends the wake before it does, so a wait that
    # returned with the record unset returned before any wake (a backend that
    # treats "no limit" as a poll: a reactor on it spins).
    b = make_backend()
    rescue, idle = pairs(2)
    b.arm(idle.fd, READ, "never ready")
    waiter = threading.get_native_id()
    sent, stop = threading.Event(), threading.Event()

    def wake_when_blocked():
        wait_until_blocked(waiter, stop)
        if not stop.is_set():
            sent.set()
            b.wake()

    t = threading.Thread(target=wake_when_blocked)
    t.start()
    try:
        _blocking_wait(b, rescue)
        early = not sent.is_set()
    finally:
        stop.set()
        t.join()
    assert not early, "wait(None) with nothing ready returned before wake() was called"


@pytest.mark.clause("B7")
def test_wake_never_blocks(make_backend):
    """A wake made while one is pending returns at once (a full wake channel means a wake is
    pending anyway): 10,000 wakes with no wait between them all return, and the next wait
    returns for them."""
    b = make_backend()
    done = threading.Event()

    def wakes():
        for _ in range(10_000):
            b.wake()
        done.set()

    t = threading.Thread(target=wakes, daemon=True)
    t.start()
    finished = done.wait(LIVENESS_S)
    while t.is_alive():
        b.wait(0)  # a blocked wake: empty the channel so that the thread ends
    assert finished, (
        f"10,000 wakes with no wait between them did not return within {LIVENESS_S} s: wake() blocks"
    )
    assert b.wait(LIVENESS_S) == []  # ended by the pending wake


@pytest.mark.clause("B7")
def test_a_pending_wake_costs_no_report(make_backend, pairs):
    """A wake pending beside ready armed fds: each of them is still reported, in the wait the
    wake ends or in the next (a backend that stops reading the kernel's reports at the wake
    loses the rest: one-shot, the kernel does not report them again)."""
    b = make_backend()
    ps = pairs(4)
    b.wake()  # ready first: ahead of the fds in the kernel's ready list
    for i, p in enumerate(ps):
        p.make_readable()
        b.arm(p.fd, READ, f"r{i}")
    assert collect(b, 4, extra_waits=2) == Counter({f"r{i}": 1 for i in range(4)})


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
    rounded = f"is timeout_ns rounded down (to {unit}, or coarser)? Round up: (timeout_ns + {unit_ns - 1}) / {unit_ns}"
    cached = (
        "is the deadline taken from a clock read before the call (an event library's cached loop "
        "time, e.g. libev's ev_now or libuv's uv_now, not updated first)? Keep a CLOCK_MONOTONIC "
        "deadline of the backend's own"
    )
    if 2 * times.early >= times.waits:
        return f"{rounded}; else, {cached}"
    return (
        "only some were early (a timeout rounded down makes nearly every wait early, a deadline on "
        f"a stale clock some): {cached}; else, {rounded}"
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
def test_a_signal_whose_handler_raises_ends_a_wait_without_a_limit(make_backend, pairs):
    """wait(None) with nothing ready, a signal sent to the waiting thread again and again until
    the wait ends, its handler raising (Ctrl-C's KeyboardInterrupt): the wait ends by that
    exception. A signal's EINTR is returned (-EINTR), so the caller runs its handlers; a
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
                got = b.wait(None)
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
    assert raised and not dog.fired, _unraised(sent[0], got, dog.fired)


def _unraised(sent, got, fired):
    """Why a wait sent ``sent`` signals, whose handler raises, did not end by that exception:
    one that returned before any signal came returned with nothing, no signal and no wake, and
    EINTR has nothing to do with it."""
    if not sent and not fired:
        return (
            f"wait(None) returned {got} before any signal was sent (0 signals), with nothing ready, "
            "no signal and no wake: a wait without a limit returns only with reports, at a wake, or "
            "with -EINTR (a library's empty loop run, its own wakeup, is not a wake: run it again)"
        )
    return (
        f"wait(None) was sent a signal {sent} time(s), its handler raising, and "
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


# -- B9 ------------------------------------------------------------------------
def _ordered_reports(b, n):
    order = []
    deadline = time.monotonic() + LIVENESS_S
    while len(order) < n and time.monotonic() < deadline:
        order += [tok for tok, _ in b.wait(0.01)]
    return order


@pytest.mark.clause("B9")
def test_already_ready_fds_are_reported_in_arm_order(make_backend, pairs):
    b = make_backend()
    require_capability(b, "ordered", "B9")
    ps = pairs(32)
    order = list(range(32))
    random.Random(9).shuffle(order)  # not fd order
    for i in order:
        ps[i].make_readable()
        b.arm(ps[i].fd, READ, i)
    got = _ordered_reports(b, 32)
    assert got == order, (
        f"32 fds, each readable before its arm, armed in the order {order}; reported in the order {got}: "
        "TR_CAP_ORDERED reports them in arm order (a library that queues its changes until the loop runs, "
        "e.g. libevent's changelist, reorders them unless flush runs the loop; else do not claim it)"
    )


@pytest.mark.clause("B9")
def test_fds_are_reported_in_the_order_they_became_ready(make_backend, pairs):
    b = make_backend()
    require_capability(b, "ordered", "B9")
    ps = pairs(32)
    for i, p in enumerate(ps):
        b.arm(p.fd, READ, i)
    b.flush()
    order = list(range(32))
    random.Random(10).shuffle(order)
    for i in order:
        ps[i].make_readable()
    got = _ordered_reports(b, 32)
    assert got == order, (
        f"32 fds armed in the order 0 to 31, then made readable in the order {order}; reported in the "
        f"order {got}: TR_CAP_ORDERED reports them in the order they became ready (a library that runs "
        "its callbacks in its own order, or a changelist flushed only by the loop, does not; else do not "
        "claim it)"
    )


# -- B10 -----------------------------------------------------------------------
@pytest.mark.clause("B10")
def test_no_ready_token_starves_while_others_are_rearmed(make_backend, pairs):
    b = make_backend()
    ps = pairs(64)
    for i, p in enumerate(ps):
        p.make_readable()  # ready for good: every re-arm is ready at once
        b.arm(p.fd, READ, i)
    counts: Counter = Counter()
    for _ in range(3 * len(ps)):  # enough waits for a fair backend with a batch of 1
        for i, _rev in b.wait(0.01):
            counts[i] += 1
            b.arm(ps[i].fd, READ, i)
    starved = [i for i in range(64) if counts[i] == 0]
    assert not starved, f"tokens never reported while others were: {starved}"


@pytest.mark.clause("B10")
def test_a_declared_batch_cap_is_kept(make_backend, pairs):
    b = make_backend()
    cap = capabilities(b).max_batch
    if cap is None:
        pytest.skip(f"{backend_label(b)} declares no max_batch: no cap to check")
    _raise_nofile(2 * (cap + 1) + 64)
    ps = pairs(cap + 1)
    for i, p in enumerate(ps):
        p.make_readable()
        b.arm(p.fd, READ, i)
    sizes, seen = [], 0
    deadline = time.monotonic() + LIVENESS_S
    while seen < len(ps) and time.monotonic() < deadline:
        got = b.wait(0.01)
        if got:
            sizes.append(len(got))
            seen += len(got)
    if seen < len(ps):
        rule_broken(
            "B1, B11",
            f"{len(ps)} ready armed fds, {seen} reported within {LIVENESS_S} s; every "
            f"ready armed fd must be reported",
        )
    assert max(sizes) <= cap, f"declared max_batch={cap}, a wait returned {max(sizes)} (batches {sizes})"


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"platform limit: RLIMIT_NOFILE hard limit {hard} < the {need} fds this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


@pytest.mark.clause("B10")
def test_a_wait_returns_at_most_its_capacity_when_one_fd_is_ready_both_ways(make_backend, pairs):
    """One kernel event can carry two reports (READ and WRITE of one fd): a wait still returns at
    most its capacity (the C ABI's capacity, here 1; a Python backend's declared max_batch) and the
    other report comes with the next wait."""
    b = make_backend()
    if hasattr(b, "wait_capacity"):
        b.wait_capacity = 1
    cap = 1 if hasattr(b, "wait_capacity") else capabilities(b).max_batch
    (p,) = pairs(1)
    p.make_readable()
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write")
    got, sizes = [], []
    deadline = time.monotonic() + LIVENESS_S
    while len(got) < 2 and time.monotonic() < deadline:
        batch = b.wait(0.01)
        sizes.append(len(batch))
        got += [tok for tok, _ in batch]
    assert sorted(got) == ["read", "write"], got
    assert cap is None or max(sizes) <= cap, f"a wait returned {max(sizes)} reports, capacity {cap}"


# -- B11 -----------------------------------------------------------------------
@pytest.mark.clause("B11")
def test_1024_fds_armed_at_once(make_backend, pairs):
    _raise_nofile(2 * 1024 + 64)
    b = make_backend()
    ps = pairs(1024)
    for i, p in enumerate(ps[:512]):
        p.make_readable()  # half ready when armed
        b.arm(p.fd, READ, i)
    for i, p in enumerate(ps[512:], 512):
        b.arm(p.fd, READ, i)
    b.flush()
    for p in ps[512:]:
        p.make_readable()  # half ready after
    assert collect(b, 1024, extra_waits=3) == Counter({i: 1 for i in range(1024)})


def _fd_free(number: int) -> bool:
    try:
        os.fstat(number)
    except OSError:
        return True
    return False


@pytest.mark.clause("B11")
def test_fds_numbered_at_powers_of_two_are_armed_both_ways_and_reported(make_backend, pairs):
    """A backend that keeps a table indexed by fd number and doubles it meets its edges at
    these numbers: a socket given the number 64, 128, ..., 1024 (each free one), the first fd
    a new backend sees, armed for READ and WRITE (readable and writable): both are reported
    once. (A table grown to hold only the numbers below the one armed writes past its end.)"""
    _raise_nofile(1024 + 64)
    numbers = [n for n in (64, 128, 256, 512, 1024) if _fd_free(n)]
    assert numbers, "precondition: one of the fd numbers 64, 128, ..., 1024 is free"
    for number in numbers:
        b = make_backend()
        (p,) = pairs(1)
        os.dup2(p.fd, number)
        try:
            p.make_readable()
            b.arm(number, READ, "read")
            b.arm(number, WRITE, "write")
            got = collect(b, 2, extra_waits=1)
            assert got == Counter({"read": 1, "write": 1}), f"fd {number}: {dict(got)}"
            b.disarm(number, READ)
            b.disarm(number, WRITE)
        finally:
            os.close(number)
        b.close()


# -- B12 -----------------------------------------------------------------------
@pytest.mark.clause("B12")
def test_rearm_right_after_a_report_is_honoured(make_backend, pairs):
    b = make_backend()
    (p,) = pairs(1)
    p.make_readable()  # stays readable
    b.arm(p.fd, READ, 0)
    for n in range(1, 6):
        assert collect(b, 1, extra_waits=1) == Counter({n - 1: 1})
        b.arm(p.fd, READ, n)  # re-armed between the report and the next wait
    assert collect(b, 1, extra_waits=1) == Counter({5: 1})


@pytest.mark.clause("B12")
def test_rearm_of_one_direction_keeps_the_other_armed(make_backend, pairs):
    # Both directions on one fd; WRITE is reported and re-armed from dispatch
    # while READ stays armed: the re-arm must not drop or replace READ's arming.
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write 0")  # writable at once, readable later
    seen = collect(b, 1, extra_waits=1)
    for n in range(1, 4):
        b.arm(p.fd, WRITE, f"write {n}")  # re-armed after its report, before the next wait
        seen += collect(b, 1, extra_waits=0)
    p.make_readable()
    seen += collect(b, 1, extra_waits=2)
    assert seen == Counter({"write 0": 1, "write 1": 1, "write 2": 1, "write 3": 1, "read": 1}), seen


def _one_report(b) -> list:
    """The reports of the first wait that reports anything (bounded by LIVENESS_S); no wait after it,
    so that what the caller arms next is armed from that report's callback (``rearm``)."""
    got: list = []
    deadline = time.monotonic() + LIVENESS_S
    while not got and time.monotonic() < deadline:
        got = b.wait(0.01)
    return got


@pytest.mark.clause("B12")
@DIRECTIONS
def test_a_rearm_from_the_callback_of_the_report_is_reported_again(make_backend, pairs, direction):
    """The reactor's re-arm from inside the callback of the event just reported goes through
    ``rearm`` where the backend has one (base.py): the fd stays ready (readable and never read,
    or writable), so each re-arm of the same direction is reported by the next wait, in that
    direction. A backend that files a WRITE re-arm under READ never reports it."""
    b = make_backend()
    (p,) = pairs(1)
    if direction == READ:
        p.make_readable()  # stays readable: never read
    rearm = getattr(b, "rearm", b.arm)
    b.arm(p.fd, direction, 0)
    for n in range(1, 4):
        got = _one_report(b)
        assert [tok for tok, _ in got] == [n - 1], f"re-arm {n - 1} of direction {direction}: {got}"
        assert got[0][1] & SATISFIES[direction], got
        rearm(p.fd, direction, n)  # from the callback of report n - 1: no wait in between
    assert collect(b, 1, extra_waits=1) == Counter({3: 1})


@pytest.mark.clause("B12")
def test_a_rearm_of_the_other_direction_from_the_callback_of_the_report_is_reported(make_backend, pairs):
    """READ is reported; its callback reads everything, then arms WRITE on the same fd (the
    reactor's ``rearm``: from the callback of the fd's report). The fd is writable and not
    readable: WRITE must be reported. A backend that takes its cheap re-arm (store the token, no
    system call) for a direction the kernel does not watch never reports it."""
    b = make_backend()
    (p,) = pairs(1)
    rearm = getattr(b, "rearm", b.arm)
    p.make_readable()
    b.arm(p.fd, READ, "read")
    got = _one_report(b)
    assert [tok for tok, _ in got] == ["read"], got
    p.drain()  # the read callback reads what was there ...
    rearm(p.fd, WRITE, "write")  # ... and arms WRITE for its answer
    seen = collect(b, 1, extra_waits=1)
    assert seen == Counter({"write": 1}), f"WRITE armed from READ's callback, writable: reported {dict(seen)}"
    b.disarm(p.fd, READ)


# -- B13 -----------------------------------------------------------------------
@pytest.mark.clause("B13")
def test_backend_use_after_close_raises(make_backend, pairs):
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "armed at close")
    b.close()
    with pytest.raises(RuntimeError):
        b.arm(p.fd, READ, "late")
    with pytest.raises(RuntimeError):
        b.disarm(p.fd, READ)
    with pytest.raises(RuntimeError):
        b.wait(0)
    b.close()  # idempotent
    b.wake()  # a late post from another thread: does nothing (its wake fd is gone)


@pytest.mark.clause("B13")
def test_flush_after_close_raises(make_backend, pairs):
    """flush is refused after close as arm, disarm and wait are (the C header: -ESHUTDOWN),
    also when arms were made before the close."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "armed at close")
    b.close()
    with pytest.raises(RuntimeError):
        b.flush()


@pytest.mark.clause("B13")
def test_wake_after_close_writes_to_no_fd(make_backend):
    """close() released the backend's fds, and the next files opened take their numbers: a
    late wake() (a post from another thread) must not write to them."""
    b = make_backend()
    b.close()
    taken = [socket.socketpair() for _ in range(4)]  # the lowest free numbers: close() freed some
    try:
        for pair in taken:
            for s in pair:
                s.setblocking(False)
        b.wake()
        written = _read_from(taken)
        assert not written, f"wake() after close() wrote to fds that now name other files: {written}"
    finally:
        for pair in taken:
            for s in pair:
                s.close()


# -- B14 -----------------------------------------------------------------------
@pytest.mark.clause("B14")
def test_arming_costs_no_fd_and_close_releases_them(make_backend, pairs):
    a, c = pairs(2)
    # fds a library opens once per process and keeps (libuv's signal pipe, the Go runtime's
    # poller) are open before the count: one backend created and closed first.
    make_backend().close()
    before = open_fd_count()
    b = make_backend()
    a.make_readable()
    b.arm(a.fd, READ, "warm-up")  # let lazily created resources appear
    collect(b, 1, extra_waits=0)
    with_backend = open_fd_count()
    for n in range(100):
        b.arm(a.fd, READ, n)  # reported
        b.arm(c.fd, WRITE, n)  # reported
        b.arm(c.fd, READ, n)  # never ready: disarmed below
        if sum(collect(b, 2, extra_waits=0).values()) < 2:
            rule_broken("B1", f"round {n}: two ready armed tokens, not both reported within {LIVENESS_S} s")
        b.disarm(c.fd, READ)
        # A wait between rounds (nothing is armed and ready): the arms above are not made from
        # the callback of a report, whose re-arms are B12's (test_backend_library.py).
        b.wait(0)
    assert open_fd_count() == with_backend, "arming leaked file descriptors"
    b.close()
    assert open_fd_count() == before, "close() left file descriptors open"


# -- B15 -----------------------------------------------------------------------
@pytest.mark.clause("B15")
def test_no_report_without_readiness(make_backend, pairs):
    b = make_backend()
    empty, full, control = pairs(3)
    fill_send_buffer(full.ours)
    b.arm(empty.fd, READ, "empty")
    b.arm(full.fd, WRITE, "full")
    control.make_readable()
    b.arm(control.fd, READ, "control")
    assert collect(b, 1, extra_waits=3) == Counter({"control": 1})
    empty.make_readable()
    while _has_more(full.peer):  # the peer reads everything: room again
        full.peer.recv(1 << 20)
    assert collect(b, 2) == Counter({"empty": 1, "full": 1})


@pytest.mark.clause("B15")
def test_read_is_not_reported_on_a_writable_socket_with_no_data(make_backend, pairs):
    # Both directions armed on one fd that is writable and has no data: only
    # WRITE is ready, so READ must wait for data (a backend that reports every
    # armed direction on any event reports READ here).
    b = make_backend()
    p, control = pairs(2)
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write")
    assert collect(b, 1, extra_waits=3) == Counter({"write": 1})
    control.make_readable()
    b.arm(control.fd, READ, "control")  # proves the waits below do report
    assert collect(b, 1, extra_waits=3) == Counter({"control": 1})
    p.make_readable()
    assert collect(b, 1, extra_waits=2) == Counter({"read": 1})


@pytest.mark.clause("B15")
def test_write_is_not_reported_while_the_send_buffer_is_full_and_data_arrives(make_backend, pairs):
    # The other way round: READ becomes ready on an fd whose send buffer is full.
    b = make_backend()
    (p,) = pairs(1)
    fill_send_buffer(p.ours)
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write")
    p.make_readable()
    assert collect(b, 1, extra_waits=3) == Counter({"read": 1})


def _has_more(sock) -> bool:
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


@pytest.mark.clause("B15")
def test_a_report_says_what_was_ready(make_backend, pairs):
    """A READ report of a socket that has data and no error carries IN, a WRITE report of one
    with room carries OUT: the revents say what was ready, not only that something was (a
    backend that reports every readiness as ERR sends each callback down its error path)."""
    b = make_backend()
    r, w = pairs(2)
    r.make_readable()
    b.arm(r.fd, READ, "read")
    b.arm(w.fd, WRITE, "write")
    got = dict(reports(b, 2))
    assert set(got) == {"read", "write"}, got
    assert got["read"] & IN and not got["read"] & ERR, (
        f"READ of a readable socket reported revents {revents_named(got['read'])}"
    )
    assert got["write"] & OUT and not got["write"] & ERR, (
        f"WRITE of a writable socket reported revents {revents_named(got['write'])}"
    )


# -- B16 -----------------------------------------------------------------------
@pytest.mark.clause("B16")
@DIRECTIONS
def test_arming_a_closed_fd_raises_ebadf(make_backend, pairs, direction):
    b = make_backend()
    (other,) = pairs(1)
    b.arm(other.fd, READ, "armed before")  # a backend with a table by fd number has grown it
    s = socket.socket()
    number = s.fileno()
    s.close()
    with pytest.raises(OSError) as info:
        b.arm(number, direction, "closed")
    assert info.value.errno == errno.EBADF


#: Headroom over what the process maps while a number near INT_MAX is armed (RLIMIT_AS): room for
#: the other threads' allocations, far below the gigabytes a table indexed by that number takes.
ADDRESS_SPACE_HEADROOM = 512 << 20


def _mapped_bytes() -> int | None:
    """The address space this process maps now (VmSize), or None where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@pytest.mark.clause("B16")
def test_arming_a_number_far_above_every_open_fd_raises_ebadf(make_backend, pairs):
    """An arm of INT_MAX, a number far above every open fd, raises EBADF, and the fd armed before
    it is still reported.  A backend that keeps a table indexed by fd number must ask whether
    the number is open before it grows the table: one that does not allocates gigabytes for it
    (or fails with ENOMEM).  The arm runs under an address-space limit (RLIMIT_AS) a little above
    what the process maps, so such a backend fails here with ENOMEM and never takes the memory."""
    mapped = _mapped_bytes()
    if mapped is None or not hasattr(resource, "RLIMIT_AS"):
        pytest.skip(
            "platform limit: no VmSize in /proc/self/status or no RLIMIT_AS to bound the arm's memory"
        )
    b = make_backend()
    (other,) = pairs(1)
    other.make_readable()
    b.arm(other.fd, READ, "armed before")  # a backend with a table by fd number has grown it
    number = 2**31 - 1  # INT_MAX: RLIMIT_NOFILE is far below it, so it names no open file
    with pytest.raises(OSError) as closed:
        os.fstat(number)
    assert closed.value.errno == errno.EBADF
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    bound = mapped + ADDRESS_SPACE_HEADROOM
    if hard != resource.RLIM_INFINITY:
        bound = min(bound, hard)
    resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
    try:
        with pytest.raises(OSError) as info:
            b.arm(number, WRITE, "far above")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert info.value.errno == errno.EBADF, (
        f"arming fd {number} (INT_MAX, not open) raised {errno.errorcode.get(info.value.errno, info.value.errno)} "
        f"under an address-space limit of {bound >> 20} MiB, not EBADF: is a table indexed by fd number "
        f"grown before the number is checked open?"
    )
    assert collect(b, 1, extra_waits=1) == Counter({"armed before": 1})


@pytest.mark.clause("B16")
def test_an_arm_that_raised_ebadf_leaves_the_fds_armings_as_they_were(make_backend, pairs):
    """READ armed, the fd closed without disarm, WRITE armed on it: EBADF, and the refused arm
    leaves nothing behind. READ disarmed and the number reused by a writable socket, armed for
    READ: nothing is reported (a backend that kept a token for WRITE reports it)."""
    b = make_backend()
    old, new, control = pairs(3)
    b.arm(old.fd, READ, "old read")  # not readable
    b.flush()
    number = old.ours.detach()
    os.close(number)  # closed without disarm
    with pytest.raises(OSError) as info:
        b.arm(number, WRITE, "refused")
    assert info.value.errno == errno.EBADF
    os.dup2(new.ours.fileno(), number)  # the number now names `new`: writable, not readable
    with socket.socket(fileno=number) as reused:
        b.disarm(number, READ)  # the owner's late clean-up of the old arming
        b.arm(number, READ, "new")
        control.make_readable()
        b.arm(control.fd, READ, "control")
        assert collect(b, 1, extra_waits=3) == Counter({"control": 1})
        b.disarm(reused.fileno(), READ)


@pytest.mark.clause("B16")
def test_an_arm_that_raised_ebadf_on_a_number_never_armed_leaves_nothing_armed(make_backend, pairs):
    """The test above with no arming of the number before: an fd armed first (the backend has
    seen fds), a closed socket's number armed for WRITE: EBADF. The number reused by a
    writable socket and armed for READ: nothing of that number is reported (a backend that
    keeps the token of an arm that failed registers it with the next arm of the number)."""
    b = make_backend()
    old, new, control = pairs(3)
    control.make_readable()
    b.arm(control.fd, READ, "control")
    number = old.ours.detach()
    os.close(number)  # a number no arm has named
    with pytest.raises(OSError) as info:
        b.arm(number, WRITE, "refused")
    assert info.value.errno == errno.EBADF
    os.dup2(new.ours.fileno(), number)  # the number now names `new`: writable, not readable
    with socket.socket(fileno=number) as reused:
        b.arm(number, READ, "new")
        assert collect(b, 1, extra_waits=3) == Counter({"control": 1})
        b.disarm(reused.fileno(), READ)


@pytest.mark.clause("B16")
def test_a_rearm_of_a_closed_fd_raises_ebadf_or_reports_err(make_backend, pairs):
    """Where a backend skips the check (the re-arm of a direction its latest wait reported), a
    closed fd still fails: the arm raises EBADF, or a later wait reports the token with ERR."""
    b = make_backend()
    (p,) = pairs(1)
    p.make_readable()
    b.arm(p.fd, READ, "first")
    got = []
    deadline = time.monotonic() + LIVENESS_S
    while not got and time.monotonic() < deadline:
        got = b.wait(0.01)  # no wait after the one that reports it: the re-arm below is its callback's
    assert [tok for tok, _ in got] == ["first"], got
    number = p.ours.detach()
    os.close(number)  # closed by the callback of the report, then re-armed from it
    try:
        b.arm(number, READ, "closed")
    except OSError as exc:
        assert exc.errno == errno.EBADF, exc
        return
    got = reports(b, 1)
    b.disarm(number, READ)
    assert [tok for tok, _ in got] == ["closed"], got
    assert got[0][1] & ERR, (
        f"the re-arm of a closed fd was reported with revents {revents_named(got[0][1])}, not ERR"
    )


# -- B16: a refused arm on a closed number whose file lives on (issue 41) ------
@pytest.mark.clause("B16")
@pytest.mark.parametrize("settle", ["flush", "wait"], ids=["flushed", "after-a-wait"])
def test_an_arm_refused_on_a_closed_number_whose_file_lives_in_a_dup_is_never_reported(
    make_backend, pairs, settle
):
    """READ and WRITE armed (neither ready), the number closed without disarm while a dup keeps
    its file (over epoll the registration stays, keyed by the closed number), WRITE armed again
    there with a new token: EBADF, and the fd's armings stay as they were (or, as B16 allows, the
    arm returns and the closed fd fails later: the new token reported with ERR, as io_uring's
    POLL_ADD of a closed fd completes).  The file's peer then hangs up (HUP satisfies both
    directions): a refused token is never reported.  The armings
    made for the closed file, its number not armed again, may each be reported once or dropped
    (the header's case (a)), so only "at most once" is checked for them.  Both directions stay
    armed: with one, a library that re-adds the fds of its active watchers when the kernel's
    report carries a direction nobody watches (libev) meets the closed number, which the header
    does not ask a backend to survive."""
    b = make_backend()
    old, control = pairs(2)
    fill_send_buffer(old.ours)  # WRITE armed, not ready
    b.arm(old.fd, READ, "old read")  # not readable
    b.arm(old.fd, WRITE, "old write")
    _settle(b, settle, "a socket that was ready for neither direction")
    alive = os.dup(old.fd)  # the file lives on here
    try:
        number = old.ours.detach()
        os.close(number)  # closed without disarm, and not reused
        try:
            b.arm(number, WRITE, "refused")
            raised = None
        except OSError as exc:
            raised = exc
        assert raised is None or raised.errno == errno.EBADF, f"arming a closed fd raised {raised!r}"
        old.peer.close()  # the file, alive in the dup, hangs up
        control.make_readable()
        b.arm(control.fd, READ, "control")
        got = reports(b, 1, extra_waits=3)
        tokens = Counter(token for token, _ in got)
        # Over the C ABI the token of an arm that failed is unknown to the adapter: any token
        # besides these is the refused one.
        allowed = {"old read", "old write", "control"} | ({"refused"} if raised is None else set())
        assert set(tokens) <= allowed, (
            f"reported {shown(got)}: the token of an arm that raised EBADF was reported (a refused arm "
            "leaves the fd's armings as they were; the closed file's registration, alive in a dup, "
            "still fires under the number)"
        )
        assert raised is not None or all(revents & ERR for token, revents in got if token == "refused"), (
            f"reported {shown(got)}: the arm of a closed fd returned, and its token came without ERR"
        )
        assert tokens["control"] == 1 and max(tokens.values()) == 1, (
            f"reported {shown(got)}: each arming of the closed number at most once, besides control"
        )
        b.disarm(number, READ)
        b.disarm(number, WRITE)
    finally:
        os.close(alive)


# -- B17 (optional: backends with a receive operation) -------------------------
def _recv_backend(make_backend):
    b = make_backend()
    if not hasattr(b, "arm_recv"):
        pytest.skip(f"{getattr(b, 'name', type(b).__name__)} has no arm_recv (optional, RX-uring)")
    return b


@pytest.mark.clause("B17")
def test_receive_reports_its_byte_count_once_with_the_data_in_the_buffer(make_backend, pairs):
    b = _recv_backend(make_backend)
    ps = pairs(8)
    bufs = [bytearray(32) for _ in ps]
    for i, (p, buf) in enumerate(zip(ps, bufs)):
        b.arm_recv(p.fd, buf, i)
    for i, p in enumerate(ps):
        p.make_readable(b"m%d" % i)
    got = reports(b, len(ps))
    assert sorted(got) == [(i, len(b"m%d" % i)) for i in range(len(ps))]
    for i, buf in enumerate(bufs):
        assert bytes(buf[: len(b"m%d" % i)]) == b"m%d" % i
    assert all(p.drain() == b"" for p in ps), "the kernel's receive must take the bytes it reports"


@pytest.mark.clause("B17")
def test_receive_reports_zero_at_eof(make_backend, pairs):
    b = _recv_backend(make_backend)
    (p,) = pairs(1)
    b.arm_recv(p.fd, bytearray(8), "eof")
    p.peer.shutdown(socket.SHUT_WR)
    assert reports(b, 1) == [("eof", 0)]


@pytest.mark.clause("B17")
def test_disarmed_receive_is_never_reported_and_takes_nothing(make_backend, pairs):
    b = _recv_backend(make_backend)
    (p,) = pairs(1)
    b.arm_recv(p.fd, bytearray(8), "cancelled")
    b.flush()
    b.disarm(p.fd, READ)
    b.flush()
    b.wait(0)
    p.make_readable(b"later")
    assert reports(b, 0) == []
    assert p.drain() == b"later"


@pytest.mark.clause("B17")
def test_arming_read_replaces_a_pending_receive(make_backend, pairs):
    b = _recv_backend(make_backend)
    (p,) = pairs(1)
    b.arm_recv(p.fd, bytearray(8), "recv")
    b.flush()
    b.wait(0)  # the receive is pending in the kernel
    b.arm(p.fd, READ, "poll")
    b.flush()
    b.wait(0)  # its cancel is processed before any byte arrives
    p.make_readable(b"x")
    got = reports(b, 1)
    assert [t for t, _ in got] == ["poll"]
    assert p.drain() == b"x"


@pytest.mark.clause("B17")
def test_a_receive_that_fails_reports_minus_errno(make_backend):
    """A receive the kernel fails reports ``-errno`` (B17), never ERR: a receive's result is a
    byte count, so a positive ERR bit would read as bytes received. A TCP reset (linger 0)
    fails the pending receive with ECONNRESET."""
    b = _recv_backend(make_backend)
    with socket.create_server(("127.0.0.1", 0)) as srv:
        cli = socket.create_connection(srv.getsockname(), timeout=LIVENESS_S)
        acc, _ = srv.accept()
        with cli:
            cli.setblocking(False)
            b.arm_recv(cli.fileno(), bytearray(8), "reset")
            b.flush()
            acc.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            acc.close()  # linger 0: RST, the receive fails with ECONNRESET
            got = reports(b, 1)
            b.disarm(cli.fileno(), READ)
    assert got == [("reset", -errno.ECONNRESET)], got
