"""Backend clause B5, fd-number reuse, checked on the backend object itself: a number closed
and reused, or a closed file alive in a dup, never gets a report meant for the other file.

The in-batch half of B5 is the reactor's, in ``test_backend_via_reactor.py``; an fd closed while
a change of its arming is still pending is in ``test_backend_reuse_pending.py``.
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import os
import socket
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import ERR
from tailreactor_conformance.harness import (
    collect,
    fill_send_buffer,
    reports,
    revents_named,
)
from tailreactor_conformance.tests._backend_helpers import (
    DIRECTIONS,
    REUSED_BY,
    _closed_armings_dropped,
    _collected_not_delivered,
    _old_and_new,
    _settle,
)

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
def test_a_report_held_for_an_fd_closed_without_disarm_is_dropped_once_its_number_is_armed_the_other_way(
    make_backend, pairs
):
    """Reports collected and not delivered, then each of those fds closed without disarm and its
    number reused by a writable socket armed for WRITE: the new arming is reported, the old READ
    token never. A held report belongs to the arming it was collected for; once its number is
    armed again, in either direction, it is dropped: the old callback would read the file that
    took the number (a GLib reader's backend handed it to its own, old, token)."""
    b = make_backend()
    ps, delivered = _collected_not_delivered(b, pairs)
    victims = [i for i in range(len(ps)) if i not in delivered]
    fresh = pairs(len(victims))
    reused = []
    try:
        for i, new in zip(victims, fresh):
            number = ps[i].ours.detach()
            os.dup2(
                new.ours.fileno(), number
            )  # closes the old socket, never disarmed; the number names `new`
            reused.append(socket.socket(fileno=number))
            b.arm(number, WRITE, f"new {i}")  # writable: a fresh socket has room
        got = collect(b, len(victims), extra_waits=3)
        old = sorted(t for t in got if t not in {f"new {i}" for i in victims})
        assert not old, (
            f"after READ armings with reports collected and not delivered were closed without disarm and "
            f"their numbers armed for WRITE on the files that took them, old tokens {old} were reported: a "
            "report held for an arming is dropped once its number is armed again, in either direction"
        )
        assert got == Counter({f"new {i}": 1 for i in victims}), got
        for s in reused:
            b.disarm(s.fileno(), WRITE)
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


# -- B5: an fd closed while armed, its number reused and armed the other way ---------
# From event-library backends' mistakes: backends on libevent and poll(2) (issue 41).
@pytest.mark.clause("B5")
@REUSED_BY
def test_an_arming_of_a_closed_fd_never_reports_the_readiness_of_the_file_that_took_its_number(
    make_backend, pairs, reused_by
):
    """READ armed, the fd closed without disarm (the caller's bug), its number reused by
    another socket and armed for WRITE: the old READ arming belongs to the closed file. It
    is dropped, or reported once with ERR (the header's rule), never with IN when the new
    file becomes readable (a backend that keeps one registration per fd number re-registers
    both directions, the old token with them)."""
    b = make_backend()
    old, new, control = _old_and_new(pairs, reused_by)
    b.arm(old.fd, READ, "old read")  # not readable: nothing is ever sent to it
    b.flush()
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old file, armed; its number now names `new`
    with socket.socket(fileno=number) as reused:
        b.arm(number, WRITE, "new write")  # writable at once
        new.make_readable()  # readable: a report of "old read" now would be for the new file
        control.make_readable()
        b.arm(control.fd, READ, "control")
        got = reports(b, 2, extra_waits=3)
        b.disarm(reused.fileno(), WRITE)
        b.disarm(reused.fileno(), READ)
    tokens = Counter(tok for tok, _ in got)
    _b5_reported(
        Counter({t: n for t, n in tokens.items() if t != "old read"}),
        {"new write": 1, "control": 1},
        "READ armed, the fd closed without disarm, its number taken by a writable and readable file "
        "armed for WRITE as 'new write'",
    )
    old_reports = [rev for tok, rev in got if tok == "old read"]
    reported_for_the_new_file = len(old_reports) > 1 or any(not rev & ERR for rev in old_reports)
    assert not reported_for_the_new_file, (
        f"the READ arming of a closed fd was reported with revents "
        f"{', '.join(revents_named(r) for r in old_reports)} once its number named another, readable, "
        f"file: drop it, or report it once with ERR"
    )


@pytest.mark.clause("B5")
@REUSED_BY
def test_a_write_arming_of_a_closed_fd_never_reports_the_file_that_took_its_number(
    make_backend, pairs, reused_by
):
    """The test above with the directions swapped: WRITE armed while the send buffer is full,
    the fd closed without disarm, its number reused by a writable socket and armed for READ.
    The old WRITE arming is dropped, or reported once with ERR, never with OUT for the new
    file (a backend that drops the closed file's armings but the one of READ, or by comparing
    directions with anything but equality, keeps it)."""
    b = make_backend()
    old, new, control = _old_and_new(pairs, reused_by)
    fill_send_buffer(old.ours)
    b.arm(old.fd, WRITE, "old write")  # not writable: its send buffer is full
    b.flush()
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old file, armed; its number now names `new`
    with socket.socket(fileno=number):
        b.arm(number, READ, "new read")
        new.make_readable()
        _closed_armings_dropped(b, {"old write"}, control, reused=True)
        b.disarm(number, READ)
        b.disarm(number, WRITE)


@pytest.mark.clause("B5")
def test_a_disarm_of_one_direction_of_a_closed_fd_whose_number_was_reused_arms_nothing(make_backend, pairs):
    """READ and WRITE armed (neither ready: the send buffer is full), flush, the fd closed
    without disarm and its number taken by a writable socket, READ disarmed: the WRITE arming
    left is the closed file's. A backend that narrows the registration to it registers the
    number afresh, now the new file's; it must not then report that arming with OUT."""
    b = make_backend()
    old, new, control = pairs(3)
    fill_send_buffer(old.ours)
    b.arm(old.fd, READ, "closed read")
    b.arm(old.fd, WRITE, "closed write")
    b.flush()
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old file, armed; its number now names `new`
    with socket.socket(fileno=number):
        b.disarm(number, READ)
        _closed_armings_dropped(b, {"closed read", "closed write"}, control, reused=True)
        b.disarm(number, WRITE)
