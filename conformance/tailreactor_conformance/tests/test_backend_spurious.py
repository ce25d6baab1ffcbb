"""Backend clause B15, no spurious reports, checked on the backend object itself: a token is
reported only for readiness its fd had since it was armed, and a report says what was ready.
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import ERR, IN, OUT, RDHUP
from tailreactor_conformance.harness import (
    collect,
    fill_send_buffer,
    reports,
    revents_named,
    shown,
)
from tailreactor_conformance.tests._backend_helpers import (
    _collected_not_delivered,
    _full_and_half_closed_with_write_armed,
    _has_more,
    _make_room,
    _waits,
)


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


# -- B15: a re-arm reports only readiness it could see ------------------------------
# From event-library backends' mistakes (issue 41): backends on libevent and poll(2) handed a report
# already caught to the new token; one on libuv took a peer's shutdown of its writing side
# (UV_DISCONNECT) as a hang-up, which reports a WRITE token with no room.
def _after_a_rearm(got, is_new) -> str:
    """What a re-arm did wrong, from the tokens reported after it (``is_new(token)``: armed by the
    re-arm, else the token it replaced; ``control`` aside)."""
    new = sorted(str(t) for t in got if t != "control" and is_new(t))
    old = sorted(str(t) for t in got if t != "control" and not is_new(t))
    said = []
    if new:
        said.append(
            f"new tokens {new} reported: a report caught for the replaced token was handed to the new one"
        )
    if old:
        said.append(
            f"replaced tokens {old} reported: the re-arm kept the replaced token's caught report (B1's rule too)"
        )
    return "; ".join(said)


@pytest.mark.clause("B15")
def test_a_rearm_after_a_flush_that_caught_the_report_reports_only_later_readiness(make_backend, pairs):
    """arm "old", the fd ready, flush (a loop run: it may catch the report), the data read
    (by another callback of the round), arm "new" on the same direction: "new" may report
    only readiness that arises after it was armed, so nothing until data comes again. An
    event library cannot tell a waiting event from one caught and not handed over yet; a
    backend that swaps the token of a caught event hands that report to "new"."""
    b = make_backend()
    p, control = pairs(2)
    b.arm(p.fd, READ, "old")
    p.make_readable()
    b.flush()
    p.drain()
    b.arm(p.fd, READ, "new")
    control.make_readable()
    b.arm(control.fd, READ, "control")  # proves the waits below do report
    got = collect(b, 1, extra_waits=3)
    assert got == Counter({"control": 1}), (
        f"reported {dict(got)}: the fd had no data since the re-arm (it was read before), so no token "
        f"had anything to report; {_after_a_rearm(got, lambda t: t == 'new')}"
    )
    p.make_readable()
    got = collect(b, 1, extra_waits=2)
    assert got == Counter({"new": 1}), (
        f"the fd made readable again after the re-arm: reported {dict(got) or 'nothing'}, expected 'new' "
        "(the token that replaced 'old') once"
    )


@pytest.mark.clause("B15")
def test_a_rearm_of_a_report_collected_but_not_delivered_reports_only_later_readiness(make_backend, pairs):
    """More ready fds than one wait returns (capacity 1 for a C backend): one wait's reports
    taken, every other fd read empty and re-armed with a new token: no new token is
    reported until its fd has data again."""
    b = make_backend()
    ps, delivered = _collected_not_delivered(b, pairs)
    undelivered = [i for i in range(len(ps)) if i not in delivered]
    for i in undelivered:
        ps[i].drain()
        b.arm(ps[i].fd, READ, f"new {i}")
    (control,) = pairs(1)
    control.make_readable()
    b.arm(control.fd, READ, "control")
    got = collect(b, 1, extra_waits=3)
    assert got == Counter({"control": 1}), (
        f"re-armed after their fds were read empty, with no data since: "
        f"{_after_a_rearm(got, lambda t: str(t).startswith('new'))}"
    )
    for i in undelivered:
        ps[i].make_readable()
    assert collect(b, len(undelivered), extra_waits=2) == Counter({f"new {i}": 1 for i in undelivered})


@pytest.mark.clause("B15")
def test_a_peer_that_shuts_its_writing_side_makes_read_ready_not_write(make_backend, pairs):
    """Our send buffer full, READ and WRITE armed, the peer shuts its writing side
    (shutdown(SHUT_WR): EOF for us, EPOLLRDHUP, libuv's UV_DISCONNECT): READ is reported, WRITE
    is not -- the fd has no room (poll shows no POLLOUT) -- until the peer reads.  A backend
    that maps the peer's shutdown to TR_HUP, which satisfies both directions, reports WRITE."""
    b = make_backend()
    (p,) = pairs(1)
    fill_send_buffer(p.ours)
    b.arm(p.fd, READ, "read")
    b.arm(p.fd, WRITE, "write")
    p.peer.shutdown(socket.SHUT_WR)
    got = reports(b, 1, extra_waits=3)
    assert [tok for tok, _ in got] == ["read"], (
        f"reported {shown(got)}: the peer shut its "
        f"writing side (EOF, RDHUP: READ's readiness) and our send buffer is full, so WRITE had nothing "
        f"to report (RDHUP alone satisfies no WRITE; a peer's shutdown is not a hang-up, HUP)"
    )
    assert got[0][1] & (IN | RDHUP), (
        f"READ at the peer's shutdown reported revents {revents_named(got[0][1])}: no IN, no RDHUP"
    )
    while _has_more(p.peer):  # the peer reads everything: room again
        p.peer.recv(1 << 20)
    assert collect(b, 1, extra_waits=2) == Counter({"write": 1})


@pytest.mark.clause("B15")
def test_a_write_reported_after_the_peers_half_close_is_not_reported_again_when_room_comes_again(
    make_backend, pairs
):
    """WRITE armed on a full socket whose peer shut its writing side is reported once, when the
    peer reads; the arming ends with that report.  Room taken and made again three times, with
    nothing re-armed, reports nothing.  A backend that waits for room after the peer's half-close
    with a watch of its own (io_uring's multishot poll) and does not end it at the report hands
    the old token each new room."""
    b = make_backend()
    (p,) = pairs(1)
    early = _full_and_half_closed_with_write_armed(b, p)
    assert [tok for tok, _ in early] == [], (  # revents in the message, in hex with names
        f"reported {shown(early)}: expected nothing while our send buffer is full, though the peer "
        "shut its writing side (RDHUP is READ's readiness, not a hang-up: no room, no WRITE)"
    )
    _make_room(p)
    assert collect(b, 1, extra_waits=2) == Counter({"write": 1})
    again = []
    for _ in range(3):
        p.ours.send(b"x" * 4096)
        _make_room(p)
        again += _waits(b, 1)
    assert again == [], (
        f"reported {again} after WRITE's one report, with nothing re-armed: room made again "
        f"after the peer's half-close reported the ended arming again"
    )


@pytest.mark.clause("B15")
def test_a_write_rearmed_in_the_round_of_its_report_waits_for_room_after_the_peers_half_close(
    make_backend, pairs
):
    """WRITE reported and armed again before the next wait (the reactor's re-arm in the round of
    the report), then our send buffer filled and the peer's writing side shut: nothing is
    reported until the peer reads, then the new arming once.  io_uring checks no file on this
    hot re-arm, so its wait for room after the half-close has no file to compare either: a
    backend that takes "nothing to compare" as "the file changed" drops the arming and its
    report is lost."""
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, WRITE, "first")
    assert collect(b, 1, extra_waits=0) == Counter({"first": 1})
    b.arm(p.fd, WRITE, "write")  # no wait since the report
    fill_send_buffer(p.ours)
    p.peer.shutdown(socket.SHUT_WR)
    early = _waits(b)
    assert [tok for tok, _ in early] == [], (  # revents in the message, in hex with names
        f"reported {shown(early)}: expected nothing while our send buffer is full, though the peer "
        "shut its writing side (RDHUP is READ's readiness, not a hang-up: no room, no WRITE)"
    )
    _make_room(p)
    assert collect(b, 1, extra_waits=2) == Counter({"write": 1}), (
        "WRITE re-armed in the round of its report, then the send buffer full and the peer's "
        "writing side shut: not reported once when the peer read"
    )
