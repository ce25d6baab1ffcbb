"""Syscalls the backends save on the hot path (issue 9), counted, not timed.

The keep-alive cycle -- a READ report, the callback reads, answers and
re-arms READ -- should cost the backend no syscall of its own beyond the
shared wait: no ``epoll_ctl`` (epoll keeps the fd registered, level-triggered)
and no ``fcntl`` validity check (io_uring) for an fd the latest wait reported.
These tests count the backends' own counters (``ctl_calls``, ``fd_checks``)
and check that the savings keep the contract: nothing reported twice, no
report loop for a ready fd nobody armed, closed fds still rejected when the
backend cannot know they are alive.
"""

from __future__ import annotations

import errno
import socket

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.epoll import EpollBackend
from tailreactor.backends.io_uring import IoUringBackend


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _wait_for(backend, n=1, tries=50):
    got = []
    for _ in range(tries):
        got += backend.wait(0.01)
        if len(got) >= n:
            break
    return got


@pytest.fixture
def epoll():
    b = EpollBackend()
    yield b
    b.close()


@pytest.fixture
def uring():
    b = IoUringBackend()
    yield b
    b.close()


# -- epoll: no epoll_ctl for a re-arm of a just-reported fd --------------------------
def test_epoll_keep_alive_cycle_costs_one_epoll_ctl_in_all(epoll):
    a, b = _pair()
    with a, b:
        epoll.arm(a.fileno(), READ, "r")
        assert epoll.ctl_calls == 1
        for _ in range(20):
            b.send(b"ping")
            assert _wait_for(epoll) == [("r", select_in())]
            assert a.recv(64) == b"ping"
            epoll.rearm(a.fileno(), READ, "r")  # the reactor's re-arm from inside the callback
        assert epoll.ctl_calls == 1, "a re-arm of a just-reported fd made an epoll_ctl"


def select_in() -> int:
    import select

    return select.EPOLLIN


def test_epoll_ready_fd_nobody_armed_is_reported_once_then_quiet(epoll):
    a, b = _pair()
    with a, b:
        epoll.arm(a.fileno(), READ, "r")
        b.send(b"x")
        assert [t for t, _ in _wait_for(epoll)] == ["r"]
        # Not re-armed, still readable: the next wait narrows the registration ...
        assert epoll.wait(0) == []
        ctl = epoll.ctl_calls
        # ... and after that the fd is not reported again (no report loop).
        for _ in range(5):
            assert epoll.wait(0) == []
        assert epoll.ctl_calls == ctl
        epoll.arm(a.fileno(), READ, "again")  # still readable: reported at once (B2)
        assert [t for t, _ in _wait_for(epoll)] == ["again"]


def test_epoll_hang_up_on_a_registered_unarmed_fd_does_not_loop(epoll):
    a, b = _pair()
    with a:
        epoll.arm(a.fileno(), READ, "r")
        b.send(b"x")
        assert [t for t, _ in _wait_for(epoll)] == ["r"]
        b.close()  # HUP from now on; epoll reports HUP whatever the mask
        for _ in range(3):
            epoll.wait(0)
        ctl = epoll.ctl_calls
        for _ in range(5):
            assert epoll.wait(0) == []
        assert epoll.ctl_calls == ctl, "a hung-up fd nobody armed kept costing epoll_ctl"


def test_epoll_write_interest_is_dropped_after_it_is_no_longer_armed(epoll):
    a, b = _pair()
    with a, b:
        epoll.arm(a.fileno(), WRITE, "w")
        assert [t for t, _ in _wait_for(epoll)] == ["w"]
        # READ is not watched yet: one epoll_ctl, which also drops the OUT
        # interest nobody holds any more.
        ctl = epoll.ctl_calls
        epoll.arm(a.fileno(), READ, "r")
        assert epoll.ctl_calls == ctl + 1
        for _ in range(3):  # writable all along, but nobody wants it: never reported
            assert epoll.wait(0) == []
        assert epoll.ctl_calls == ctl + 1
        b.send(b"x")
        assert [t for t, _ in _wait_for(epoll)] == ["r"]


def test_epoll_arm_in_a_later_round_still_rejects_a_closed_fd(epoll):
    a, b = _pair()
    number = a.fileno()
    epoll.arm(number, READ, "r")
    b.send(b"x")
    assert [t for t, _ in _wait_for(epoll)] == ["r"]
    a.close()  # the caller's bug: closed without disarm
    epoll.wait(0)  # a later round: the fd is no longer "just reported"
    with pytest.raises(OSError) as info:
        epoll.arm(number, READ, "closed")
    assert info.value.errno == errno.EBADF
    b.close()


def test_epoll_disarm_of_a_reported_fd_drops_its_registration(epoll):
    """Reactor.disarm before close reaches the backend even with nothing armed."""
    a, b = _pair()
    with a, b:
        epoll.arm(a.fileno(), READ, "r")
        b.send(b"x")
        assert [t for t, _ in _wait_for(epoll)] == ["r"]
        ctl = epoll.ctl_calls
        epoll.disarm(a.fileno(), READ)  # nothing armed: the registration goes (EPOLL_CTL_DEL)
        assert epoll.ctl_calls == ctl + 1
        assert a.fileno() not in epoll._fds


# -- io_uring: no fcntl check for a re-arm of a just-reported fd ------------------------
@pytest.mark.io_uring
def test_io_uring_rearm_of_a_reported_fd_skips_the_fd_check(uring):
    a, b = _pair()
    with a, b:
        uring.arm(a.fileno(), READ, "r")
        assert uring.fd_checks == 1
        for _ in range(20):
            b.send(b"ping")
            assert [t for t, _ in _wait_for(uring)] == ["r"]
            assert a.recv(64) == b"ping"
            uring.arm(a.fileno(), READ, "r")
        assert uring.fd_checks == 1, "a re-arm of a just-reported fd made an fcntl"


@pytest.mark.io_uring
def test_io_uring_arm_in_a_later_round_still_rejects_a_closed_fd(uring):
    a, b = _pair()
    number = a.fileno()
    uring.arm(number, READ, "r")
    b.send(b"x")
    assert [t for t, _ in _wait_for(uring)] == ["r"]
    a.close()
    uring.wait(0)
    with pytest.raises(OSError) as info:
        uring.arm(number, READ, "closed")
    assert info.value.errno == errno.EBADF
    b.close()


# -- through the reactor: the saving applies to a re-arm from the fd's own callback only -----
def _reactor(backend_name):
    from tailreactor import Config, Reactor

    return Reactor(backend_name, config=Config.default())


@pytest.mark.parametrize(
    "backend_name", ["epoll", pytest.param("io_uring", marks=pytest.mark.io_uring), "selectors"]
)
def test_a_reused_number_armed_outside_the_old_callback_is_reported(backend_name):
    """Found by a fresh-eyes user test: READ reported (so nothing is armed), the
    owner closes the socket without disarm, a new socket gets the same number
    and is armed before the next wait.  On epoll that arm must reach the kernel."""
    hits = []
    with _reactor(backend_name) as r:
        a, b = _pair()
        r.arm(a.fileno(), READ, lambda ev: hits.append("old"))
        b.send(b"x")
        for _ in range(50):
            if hits:
                break
            r.run_once(0.01)
        number = a.fileno()
        a.close()  # the caller's slip: no disarm, since nothing is armed
        c, d = _pair()
        try:
            assert c.fileno() == number
            r.arm(number, READ, lambda ev: hits.append("new"))
            d.send(b"y")
            for _ in range(50):
                if len(hits) > 1:
                    break
                r.run_once(0.01)
            assert hits == ["old", "new"]
        finally:
            r.disarm(number)
            for s in (b, c, d):
                s.close()


def test_epoll_rearm_from_the_fds_own_callback_costs_no_epoll_ctl():
    with _reactor("epoll") as r:
        a, b = _pair()
        with a, b:
            served = []

            def on_read(ev):
                a.recv(64)
                served.append(1)
                if len(served) < 20:
                    r.arm(a.fileno(), READ, on_read)  # inside its own callback: the hot re-arm

            r.arm(a.fileno(), READ, on_read)
            ctl = r.backend.ctl_calls
            for _ in range(20):
                b.send(b"ping")
                before = len(served)
                for _ in range(50):
                    if len(served) > before:
                        break
                    r.run_once(0.01)
            assert len(served) == 20
            assert r.backend.ctl_calls == ctl, "a re-arm from the fd's own callback made an epoll_ctl"
            r.disarm(a.fileno())
