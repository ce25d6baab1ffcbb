"""Backend clause B5 for an fd closed while the backend still holds a change of its
arming: a library's watcher change that waits for its next loop run (libev), or a kernel request
that keeps the file alive (io_uring's poll).  The first found by a backend over libev (issue 41),
the second by mutation testing, as each section says.

Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import os
import socket

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor_conformance.harness import (
    fill_send_buffer,
    reports_until,
)
from tailreactor_conformance.tests._backend_helpers import (
    REUSED_BY,
    _close,
    _closed_armings_dropped,
    _make_room,
    _old_and_new,
    _waits,
)

# -- B5: an fd closed while a change of its watchers waits for the next loop run -------
# libev applies watcher changes at its next loop run (fd_reify): an arm, a disarm of one of
# two directions, the one-shot stop of a reported direction.  It then hands the fd to
# epoll_ctl, and aborts on EBADF when the fd was closed since; or registers the file that
# took the number with the old arming.  Found by a fresh reader writing a backend over
# libev from the header (issue 41): each sequence below aborted their first version.


@pytest.mark.clause("B5")
def test_an_fd_armed_and_closed_before_any_loop_run_is_dropped(make_backend, pairs):
    """arm, close, wait, no flush between: the arm reaches the library's loop after the
    close.  The backend neither fails nor reports the closed file wrongly."""
    b = make_backend()
    old, control = pairs(2)
    b.arm(old.fd, READ, "closed read")
    _close(old)
    _closed_armings_dropped(b, {"closed read"}, control)


@pytest.mark.clause("B5")
def test_a_disarm_of_one_direction_of_a_closed_fd_keeps_the_backend_alive(make_backend, pairs):
    """READ and WRITE armed (neither ready: the send buffer is full), flush, close, READ
    disarmed, wait: the disarm narrows the fd's interest to WRITE at the next loop run
    (EPOLL_CTL_MOD on the closed fd)."""
    b = make_backend()
    old, control = pairs(2)
    fill_send_buffer(old.ours)
    b.arm(old.fd, READ, "closed read")
    b.arm(old.fd, WRITE, "closed write")
    b.flush()
    number = _close(old)
    b.disarm(number, READ)
    _closed_armings_dropped(b, {"closed read", "closed write"}, control)


@pytest.mark.clause("B5")
def test_a_closed_fd_with_one_direction_reported_keeps_the_backend_alive(make_backend, pairs):
    """READ and WRITE armed, WRITE reported (writable, not readable), the fd closed without
    disarm, wait: the one-shot stop of WRITE narrows the interest to READ at the next loop
    run (EPOLL_CTL_MOD on the closed fd)."""
    b = make_backend()
    old, control = pairs(2)
    b.arm(old.fd, READ, "closed read")
    b.arm(old.fd, WRITE, "write")
    got = reports_until(b, lambda got: got)
    assert [tok for tok, _ in got] == ["write"], got
    _close(old)
    _closed_armings_dropped(b, {"closed read"}, control)


@pytest.mark.clause("B5")
@REUSED_BY
def test_an_arming_of_a_reused_number_never_re_armed_is_not_reported_for_the_new_file(
    make_backend, pairs, reused_by
):
    """READ armed, the fd closed and its number taken by another socket before any loop run,
    data arriving there, wait: no re-arm of the number warns the backend.  A registration
    deferred to the loop run (or a poll(2) set kept by number) meets the new file; the old
    arming is never reported for it."""
    b = make_backend()
    old, new, control = _old_and_new(pairs, reused_by)
    b.arm(old.fd, READ, "old read")
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old file, armed; its number now names `new`
    with socket.socket(fileno=number):
        new.make_readable()
        _closed_armings_dropped(b, {"old read"}, control, reused=True)
        b.disarm(number, READ)


# -- B5: a closed fd whose file a pending kernel request keeps alive -------------------
# io_uring's pending poll holds its own reference to the file: closing the fd number closes
# nothing, and the file can still become ready (the peer writes, or shuts its writing side)
# and complete the poll.  The backend learns of it at a report, when the number names
# nothing or another file.  Found by mutation testing (conformance/mutation-report.md).
def _send_to_closed(p, data: bytes = b"x") -> None:
    """The peer writes to ``p``'s closed end: accepted where a kernel request still holds the
    file, refused (EPIPE, ECONNRESET) where closing the number closed it."""
    try:
        p.peer.send(data)
    except OSError:
        pass  # the file is gone: nothing of it can become ready


@pytest.mark.clause("B5")
def test_an_fd_closed_without_disarm_whose_file_then_becomes_readable_is_dropped_or_reported_as_err(
    make_backend, pairs
):
    """READ armed (not readable) and submitted, the fd closed without disarm, its number left
    closed, then the peer writes: where a pending kernel request keeps the file alive (io_uring's
    poll) that file becomes readable.  The arming is the closed fd's: dropped, or reported once
    with ERR, never with IN (its callback would read a number that names nothing)."""
    b = make_backend()
    old, control = pairs(2)
    b.arm(old.fd, READ, "closed read")
    b.flush()  # the poll holds the file from here
    _close(old)  # this test opens no fd after it: the number stays closed
    _send_to_closed(old)
    _closed_armings_dropped(b, {"closed read"}, control)


@pytest.mark.clause("B5")
def test_an_fd_closed_without_disarm_after_the_peers_half_close_ended_its_write_poll_is_dropped_or_reported_as_err(
    make_backend, pairs
):
    """WRITE armed on a full socket and submitted, the peer shuts its writing side (RDHUP alone:
    no room; io_uring's WRITE poll completes with it), then the fd is closed without disarm
    before the next wait: the arming is dropped or reported once with ERR, and the waits raise
    nothing.  io_uring learns of the half-close only in that wait, and checks the number before
    it waits on for room (module docstring of its backend): the check must take a closed number
    as a file that changed, not raise out of the wait."""
    b = make_backend()
    old, control = pairs(2)
    fill_send_buffer(old.ours)
    b.arm(old.fd, WRITE, "closed write")
    b.flush()
    old.peer.shutdown(socket.SHUT_WR)
    _close(old)  # the number stays closed
    _closed_armings_dropped(b, {"closed write"}, control)


@pytest.mark.clause("B5")
@REUSED_BY
def test_a_write_arming_whose_number_a_full_half_closed_socket_took_before_any_loop_run_never_reports_its_room(
    make_backend, pairs, reused_by
):
    """WRITE armed, then, before any wait or flush, the fd closed without disarm and its number
    taken by another socket whose send buffer is full and whose peer shut its writing side;
    later that peer reads (room).  The arming is the closed file's: dropped, or reported once
    with ERR, never with OUT for the new file.  io_uring submits the poll at the next wait, on
    the file the number names then: it completes with that file's half-close (RDHUP alone), and
    the backend, about to wait on for room, compares the file its arm found with the one there
    now -- by equality: the new file's identity sorts after the closed one's, or before."""
    b = make_backend()
    old, new, control = _old_and_new(pairs, reused_by)
    b.arm(old.fd, WRITE, "old write")  # writable, but nothing reaches the kernel before the wait
    fill_send_buffer(new.ours)
    new.peer.shutdown(socket.SHUT_WR)
    number = old.ours.detach()
    os.dup2(new.ours.fileno(), number)  # closes the old file, armed; its number now names `new`
    with socket.socket(fileno=number):
        before_room = _waits(b)  # the new file has no room: only ERR may come
        _make_room(new)
        _closed_armings_dropped(b, {"old write"}, control, reused=True, earlier=before_room)
        b.disarm(number, WRITE)
