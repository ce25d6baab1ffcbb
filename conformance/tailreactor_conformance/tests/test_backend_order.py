"""Backend clauses B9-B11, checked on the backend object itself: reports in readiness order
(B9), bounded batches without starvation (B10), at least 1024 fds armed at once (B11).
Sections marked as from an event-library backend's mistake build a situation a backend on
libev, libuv, libevent or poll(2) got wrong: such a backend runs the library's loop in ``wait``, and
often in ``flush`` too, so it holds reports and wakes it has collected and not handed out yet; and
a C backend is handed a capacity by its caller, which may be smaller than what is ready.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import capabilities
from tailreactor_conformance.harness import (
    LIVENESS_S,
    backend_label,
    collect,
    require_capability,
    rule_broken,
)
from tailreactor_conformance.tests._backend_helpers import (
    _raise_nofile,
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


# -- B10: no starvation when the ready set is larger than the batch ------------------
# From an event-library backend's mistake: a fresh reader's C backends on poll(2) and libev (issue 32).
#: The capacity a C backend's waits get here: smaller than the ready set.
SMALL_CAPACITY = 4


@pytest.mark.clause("B10")
def test_no_ready_token_starves_when_more_are_ready_than_one_wait_returns(make_backend, pairs):
    """More fds ready for good than one wait may return (a C backend gets a capacity of 4, a
    Python backend's declared max_batch is exceeded), each re-armed as soon as it is
    reported: every one is reported within a bounded number of waits.  A backend that
    serves the lowest fd numbers first reports the same few, wait after wait."""
    b = make_backend()
    if hasattr(b, "wait_capacity"):
        b.wait_capacity = SMALL_CAPACITY
        cap = SMALL_CAPACITY
    else:
        cap = capabilities(b).max_batch
        if cap is None:
            pytest.skip(
                f"{getattr(b, 'name', type(b).__name__)} declares no max_batch: no batch to exceed "
                f"(the B10 test above covers it)"
            )
    n = max(64, cap + 16)
    _raise_nofile(2 * n + 64)
    ps = pairs(n)
    for i, p in enumerate(ps):
        p.make_readable()  # ready for good: every re-arm is ready at once
        b.arm(p.fd, READ, i)
    counts: Counter = Counter()
    waits = 3 * (-(-n // cap)) + 3  # three times what a fair backend with that batch needs
    for _ in range(waits):
        got = b.wait(0.01)
        for i, _rev in got:
            counts[i] += 1
            b.arm(ps[i].fd, READ, i)
    if not counts:
        rule_broken("B1, B2", f"{n} ready armed fds, nothing reported in {waits} waits")
    starved = [i for i in range(n) if counts[i] == 0]
    assert not starved, (
        f"{len(starved)} of {n} ready tokens never reported in {waits} waits of at most {cap} "
        f"reports while others were re-armed: {starved[:16]}"
    )
