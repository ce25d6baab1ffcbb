"""Backend clauses B1-B3, checked on the backend object itself (tokens in, ``(token, revents)``
out), on real socketpairs and pipes: each arming reported exactly once (B1), readiness present
when armed (B2), disarm (B3).

Clause B4 (disarm inside a batch) is the reactor's, in ``test_backend_via_reactor.py``.
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor_conformance.harness import (
    LIVENESS_S,
    Watchdog,
    collect,
    shown,
    wait_until_blocked,
)
from tailreactor_conformance.tests._backend_helpers import (
    DIRECTIONS,
    _collected_not_delivered,
    _full_and_half_closed_with_write_armed,
    _make_room,
    _waits,
)


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
    returned before its wake or None); what ``blocked``'s wait raised, it raises."""
    result: dict = {}
    started, ended = threading.Event(), threading.Event()

    def wait_for_the_wake():
        result["tid"] = threading.get_native_id()
        started.set()
        try:
            result["got"] = blocked.wait(None)
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            result["raised"] = exc
        finally:
            ended.set()

    def wake_both():
        blocked.wake()
        idle.wake()

    t = threading.Thread(target=wait_for_the_wake)
    t.start()
    started.wait()
    wait_until_blocked(result["tid"], ended)
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
    if "raised" in result:  # the other backend's wait failed: that is this test's failure
        raise result["raised"]
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


# -- B1: a re-arm drops the replaced token's report ---------------------------------
# From an event-library backend's mistake: a fresh reader's C backends on poll(2) and libev (issue 32).
@pytest.mark.clause("B1")
def test_a_rearm_after_a_flush_that_collected_the_report_reports_only_the_new_token(make_backend, pairs):
    """arm "old", the fd ready, flush (a loop run: it may collect the report), arm "new" on
    the same direction (a re-arm replaces): only "new" is ever reported."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "old")
    p.make_readable()
    b.flush()
    b.arm(p.fd, READ, "new")
    got = collect(b, 1, extra_waits=3)
    assert got == Counter({"new": 1}), (
        f"reported {dict(got)}: the re-arm kept the report its flush had collected for the replaced token"
    )


@pytest.mark.clause("B1")
def test_a_rearm_of_a_report_collected_but_not_delivered_reports_only_the_new_token(make_backend, pairs):
    """More ready fds than one wait returns (capacity 1 for a C backend): one wait's reports
    taken, every other fd re-armed with a new token: only the new tokens are reported."""
    b = make_backend()
    ps, delivered = _collected_not_delivered(b, pairs)
    undelivered = [i for i in range(len(ps)) if i not in delivered]
    for i in undelivered:
        b.arm(ps[i].fd, READ, f"new {i}")
    got = collect(b, len(undelivered), extra_waits=3)
    assert got == Counter({f"new {i}": 1 for i in undelivered}), (
        f"reported {dict(got)}: a re-arm kept the replaced token's report, collected before the re-arm"
    )


# -- B3: a write disarmed while it waits for room after the peer's half-close --------
# From an event-library backend's mistake: a backend on libuv took a peer's shutdown of its
# writing side (UV_DISCONNECT) as a hang-up (issue 41).
@pytest.mark.clause("B3")
def test_a_write_disarmed_while_it_waits_for_room_after_the_peers_half_close_is_never_reported(
    make_backend, pairs
):
    """WRITE armed on a full socket whose peer shut its writing side, disarmed while it waits
    for room: the waits after the disarm report nothing and raise nothing, also when the peer
    reads (room); armed again, it is reported once.  A backend's own wait for room (io_uring's
    multishot poll) must end with the disarm, and what it still delivers be dropped."""
    b = make_backend()
    (p,) = pairs(1)
    got = _full_and_half_closed_with_write_armed(b, p)
    b.disarm(p.fd, WRITE)
    got += _waits(b)
    _make_room(p)
    got += _waits(b)
    assert [tok for tok, _ in got] == [], (
        f"reported {shown(got)}: expected nothing, WRITE was disarmed before the peer read (and the "
        "peer's shutdown of its writing side, RDHUP, is no hang-up: it never satisfies WRITE)"
    )
    b.arm(p.fd, WRITE, "again")
    assert collect(b, 1, extra_waits=2) == Counter({"again": 1})


# -- B3: a report held over from a full batch, disarmed while the fd stays armed -----
# From event-library backends' mistakes: backends on libevent and poll(2) (issue 41).
@pytest.mark.clause("B3")
def test_disarm_drops_a_report_held_over_from_a_full_batch_while_the_fd_stays_armed(make_backend, pairs):
    """More writable fds armed for WRITE than one wait returns, each also armed for READ (never
    ready): one wait's reports taken, the WRITE of every other fd disarmed. The fds stay
    armed (READ), so a backend that drops held reports only with the fd's last arming (a
    poll(2) backend's "is the fd still in the set") keeps them: none may be reported."""
    b = make_backend()
    ps, delivered = _collected_not_delivered(b, pairs, direction=WRITE, other_armed=True)
    undelivered = [i for i in range(len(ps)) if i not in delivered]
    for i in undelivered:
        b.disarm(ps[i].fd, WRITE)
    (control,) = pairs(1)
    control.make_readable()
    b.arm(control.fd, READ, "control")
    late = collect(b, 1, extra_waits=3)
    for p in ps:
        b.disarm(p.fd, READ)
    assert late == Counter({"control": 1}), (
        f"WRITE tokens {sorted(t for t in late if t != 'control')} reported after their disarm (a wait "
        f"returned {sorted(delivered)} of {len(ps)} writable fds; the rest were disarmed, still armed for READ)"
    )
