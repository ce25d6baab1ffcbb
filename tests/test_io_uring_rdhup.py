"""WRITE after the peer's half-close, send buffer full (issue 41's B15 finding on io_uring).

The peer's ``shutdown(SHUT_WR)`` makes our socket RDHUP, which is READ's
readiness, not WRITE's: with the send buffer full, an armed WRITE must not be
reported, and re-armed it must not spin.  io_uring's POLL_ADD always watches
RDHUP (the kernel adds it to every poll's mask), so a one-shot WRITE poll
completes at once with RDHUP alone, and again at once when re-armed; the
backend must take such a completion as no report and go on waiting for room
(module docstring of ``tailreactor.backends.io_uring``, "A WRITE poll and the
peer's half-close").  Counted, not timed: the waits have a timeout so that a
backend that spins shows it as reports and completions, not as time.
"""

from __future__ import annotations

import socket

import pytest

from tailreactor.backends import WRITE, create_backend
from tailreactor.backends.base import OUT
from tailreactor_conformance.harness import fill_send_buffer

BACKENDS = [
    "epoll",
    pytest.param("io_uring", marks=pytest.mark.io_uring),
    "selectors",
]  # as tests/conftest.py

#: Waits a spinning backend would turn into as many reports.
WAITS = 6


@pytest.fixture(params=BACKENDS)
def backend(request):
    b = create_backend(request.param)
    yield b
    b.close()


def _half_closed_and_full(socketpairs):
    """(ours, peer): our send buffer full, the peer's writing side shut (RDHUP for us)."""
    ((ours, peer),) = socketpairs(1)
    fill_send_buffer(ours)
    peer.shutdown(socket.SHUT_WR)
    return ours, peer


def _drain(sock: socket.socket) -> None:
    while True:
        try:
            if not sock.recv(1 << 20):
                return
        except BlockingIOError:
            return


def _completions(b) -> int:
    """Completions io_uring took off its ring so far; 0 for the other backends (no ring)."""
    return b.stats().get("cqe", 0) if b.name == "io_uring" else 0


def _rounds(b, fd: int, token: str) -> list[tuple[str, int]]:
    """WAITS waits of 10 ms, each report re-armed as the reactor does: what was reported."""
    got = []
    for _ in range(WAITS):
        for tok, rev in b.wait(0.01):
            got.append((tok, rev))
            b.arm(fd, WRITE, tok)
    return got


def test_write_after_the_peers_half_close_is_not_reported_until_room_and_does_not_spin(backend, socketpairs):
    b = backend
    ours, peer = _half_closed_and_full(socketpairs)
    fd = ours.fileno()
    b.arm(fd, WRITE, "write")
    got = _rounds(b, fd, "write")
    assert got == [], (
        f"{b.name}: reported {', '.join(f'{t} (revents {r:#x})' for t, r in got)} over {WAITS} "
        f"waits: the peer's shutdown (RDHUP alone) made no room in a full send buffer"
    )
    # io_uring: the one-shot poll's RDHUP completion and the multishot's first leg, no more.
    assert _completions(b) <= 2, f"{_completions(b)} completions over {WAITS} waits: the WRITE poll spins"

    b.arm(fd, WRITE, "write 2")  # re-armed while armed: replaces the wait for room
    before = _completions(b)
    assert _rounds(b, fd, "write 2") == []
    # io_uring: the replaced poll's -ECANCELED, the new one-shot's RDHUP, the new multishot's first leg.
    assert _completions(b) - before <= 3, "the re-armed WRITE poll spins"

    _drain(peer)  # room again
    got = b.wait(1.0)
    assert [t for t, _ in got] == ["write 2"] and got[0][1] & OUT, got
    assert b.wait(0.01) == [] and b.wait(0.01) == []  # reported once; a one-shot arming is over

    # The arming's wait for room ended with its report (io_uring: its multishot cancelled):
    # more room made and taken gives no completion and no report.
    settled = _completions(b)
    for _ in range(3):
        ours.send(b"x" * 4096)
        _drain(peer)
        assert b.wait(0.01) == []
    assert _completions(b) == settled, "the reported arming's poll still completes: not cancelled"


def test_a_disarmed_write_waiting_for_room_after_the_peers_half_close_stays_quiet(backend, socketpairs):
    b = backend
    ours, peer = _half_closed_and_full(socketpairs)
    fd = ours.fileno()
    b.arm(fd, WRITE, "write")
    assert _rounds(b, fd, "write") == []
    b.disarm(fd, WRITE)
    assert b.wait(0.01) == []  # io_uring: the cancel and its -ECANCELED
    settled = _completions(b)
    _drain(peer)  # room: nothing armed to report it
    assert b.wait(0.01) == [] and b.wait(0.01) == []
    assert _completions(b) == settled, "the disarmed WRITE's poll still completes: not cancelled"
    b.arm(fd, WRITE, "again")  # armed anew with room: reported once
    assert [t for t, _ in b.wait(1.0)] == ["again"]
    assert b.wait(0.01) == []
