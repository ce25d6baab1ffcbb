"""Backend clause B16, closed fd rejected, checked on the backend object itself: an arm of a
number that is not open raises EBADF and leaves the armings as they were.
"""

from __future__ import annotations

import errno
import os
import resource
import socket
import time
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import ERR
from tailreactor_conformance.harness import (
    LIVENESS_S,
    collect,
    fill_send_buffer,
    reports,
    revents_named,
    shown,
)
from tailreactor_conformance.tests._backend_helpers import (
    DIRECTIONS,
    _settle,
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
