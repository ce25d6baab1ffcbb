"""The backends' non-blocking harvest (issue 24): ``harvest(max_events)``.

A harvest takes what is ready now, without blocking, for the reactor to merge
into the round in progress: it reports like ``wait`` (each armed token once,
then forgotten), at most ``max_events`` reports, leaves the rest and any
wake-up for the next ``wait``, and belongs to the round of the latest wait, so
a harvested fd's own callback may take the cheap re-arm.  On io_uring it
peeks the completion queue: no ``io_uring_enter`` unless re-arms are queued,
which it submits first.  Counted, not timed.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE, create_backend
from tailreactor.backends.base import IN
from tailreactor_conformance.harness import LIVENESS_S, Watchdog

BACKENDS = [
    "epoll",
    pytest.param("io_uring", marks=pytest.mark.io_uring),
    "selectors",
]  # as tests/conftest.py


@pytest.fixture(params=BACKENDS)
def backend(request):
    b = create_backend(request.param)
    yield b
    b.close()


def _settled(backend):
    """Every wait of a backend's own: nothing left to report."""
    return [tok for tok, _ in backend.wait(0) + backend.wait(0)]


def test_harvest_reports_an_armed_fd_ready_now_and_forgets_it(backend, socketpairs):
    ((a, b),) = socketpairs(1)
    backend.arm(a.fileno(), READ, "r")
    assert backend.wait(0) == []  # the round's wait: nothing ready yet (io_uring: submits the poll)
    b.send(b"x")
    got = backend.harvest(16)
    assert [tok for tok, _ in got] == ["r"]
    assert got[0][1] & IN
    assert _settled(backend) == [], "a harvested token must leave the next wait's batch"


def test_harvest_submits_queued_arms_first(backend, socketpairs):
    """A re-arm made during the round (queued on io_uring) is harvestable in that round."""
    ((a, b),) = socketpairs(1)
    b.send(b"x")
    backend.arm(a.fileno(), READ, "r")  # no flush, no wait: queued on io_uring
    assert [tok for tok, _ in backend.harvest(16)] == ["r"]
    assert _settled(backend) == []


def test_harvest_with_nothing_ready_returns_nothing_and_keeps_the_arming(backend, socketpairs):
    ((a, b),) = socketpairs(1)
    backend.arm(a.fileno(), READ, "r")
    backend.flush()
    assert backend.harvest(16) == []
    b.send(b"x")
    got = []
    for _ in range(50):
        got += backend.wait(0.01)
        if got:
            break
    assert [tok for tok, _ in got] == ["r"]


def test_harvest_takes_at_most_max_events_and_the_next_wait_the_rest(backend, socketpairs):
    ps = socketpairs(5)
    for i, (a, b) in enumerate(ps):
        b.send(b"x")
        backend.arm(a.fileno(), READ, i)
        backend.arm(a.fileno(), WRITE, f"w{i}")  # two reports per fd: the bound counts reports
    first = backend.harvest(3)
    assert len(first) == 3
    rest = []
    for _ in range(50):
        rest += backend.wait(0.01)
        if len(first) + len(rest) >= 10:
            break
    rest += backend.wait(0)
    counts = Counter(tok for tok, _ in first + rest)
    assert counts == Counter([*range(5), *(f"w{i}" for i in range(5))]), counts


def test_harvest_leaves_a_wake_for_the_next_wait(backend, socketpairs):
    ((a, b),) = socketpairs(1)

    def on_rescue():
        b.send(b"rescue")  # a wait the wake no longer ends returns for this instead

    backend.arm(a.fileno(), READ, "rescue")
    backend.flush()
    backend.wake()
    assert backend.harvest(16) == []
    with Watchdog(on_rescue, timeout_s=LIVENESS_S) as dog:
        got = backend.wait(None)
    assert not dog.fired, "the harvest consumed the wake: wait(None) blocked until the watchdog"
    assert got == []


# -- the round of the latest wait: a harvested fd's re-arm stays cheap -----------------
def test_epoll_harvested_fd_rearm_costs_no_epoll_ctl(socketpairs):
    from tailreactor.backends.epoll import EpollBackend

    b = EpollBackend()
    try:
        ((a, peer),) = socketpairs(1)
        b.arm(a.fileno(), READ, "r")
        assert b.wait(0) == []
        peer.send(b"x")
        assert [tok for tok, _ in b.harvest(8)] == ["r"]
        ctl = b.ctl_calls
        a.recv(16)
        b.rearm(a.fileno(), READ, "r2")  # from the harvested event's own callback
        assert b.ctl_calls == ctl
    finally:
        b.close()


def test_epoll_harvest_leaves_the_registration_of_a_batch_fd_alone(socketpairs):
    """An fd the round's wait reported, whose callback has not run yet, is still ready:
    the harvest sees it unwanted but must not narrow it (its callback re-arms it)."""
    from tailreactor.backends.epoll import EpollBackend

    b = EpollBackend()
    try:
        ((a, peer),) = socketpairs(1)
        peer.send(b"x")
        b.arm(a.fileno(), READ, "r")
        assert [tok for tok, _ in b.wait(0)] == ["r"]
        ctl = b.ctl_calls
        assert b.harvest(8) == []
        b.rearm(a.fileno(), READ, "r2")
        assert b.ctl_calls == ctl, "the harvest narrowed the registration of an fd still in the batch"
    finally:
        b.close()


@pytest.mark.io_uring
def test_io_uring_harvest_peeks_without_a_system_call_when_nothing_is_queued(socketpairs):
    """uring-api's ``Ring.wait(0)`` submits only when waitable SQEs are queued, then peeks
    the CQ (liburing ``io_uring_peek_cqe``, shared memory); its submit counter shows it."""
    from tailreactor.backends.io_uring import IoUringBackend

    b = IoUringBackend()
    try:
        ((a, peer),) = socketpairs(1)
        b.arm(a.fileno(), READ, "r")
        assert b.wait(0) == []
        submits = b.stats()["submit_main_events"]
        peer.send(b"x")
        assert [tok for tok, _ in b.harvest(8)] == ["r"]
        assert b.harvest(8) == []
        assert b.stats()["submit_main_events"] == submits, "a harvest with nothing queued submitted"
        checks = b.fd_checks
        b.arm(a.fileno(), READ, "r2")  # the harvested event's re-arm: no fcntl check
        assert b.fd_checks == checks
        b.harvest(8)
        assert b.stats()["submit_main_events"] == submits + 1, "the queued re-arm was not submitted"
    finally:
        b.close()
