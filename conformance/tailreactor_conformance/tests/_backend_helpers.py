"""Helpers the backend clause modules (``test_backend_*.py``) share: the direction
parametrisation, the situations several clauses build (a report collected but not delivered, an
arming settled by a flush or a wait, a full socket whose peer shut its writing side, an fd closed
while armed, its number reused) and the raise of the open-file limit their many fds need.  Not
collected: it holds no test."""

from __future__ import annotations

import os
import resource
import socket
from collections import Counter

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import ERR, capabilities
from tailreactor_conformance.harness import (
    LIVENESS_S,
    fill_send_buffer,
    reports,
    reports_until,
    revents_named,
    rule_broken,
)

DIRECTIONS = pytest.mark.parametrize("direction", [READ, WRITE], ids=["read", "write"])


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


def _settle(b, settle: str, what: str) -> None:
    """Settle the armings made so far: by a flush (``settle`` "flush"), or by a wait(0), which must
    report nothing (``what`` says why nothing is ready) -- a library that registers a watcher only
    at its next loop run has registered it after either."""
    if settle == "flush":
        b.flush()
    else:
        assert b.wait(0) == [], f"wait(0) reported an arming of {what}"


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"platform limit: RLIMIT_NOFILE hard limit {hard} < the {need} fds this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _has_more(sock) -> bool:
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


def _waits(b, n: int = 3) -> list:
    """``n`` waits of 10 ms: what they reported (a check that nothing is, not a wait for something)."""
    return [r for _ in range(n) for r in b.wait(0.01)]


def _full_and_half_closed_with_write_armed(b, p) -> list:
    """Our send buffer full, the peer's writing side shut (RDHUP: READ's readiness), WRITE
    armed as "write": what the waits before any room reported (nothing, B15)."""
    fill_send_buffer(p.ours)
    p.peer.shutdown(socket.SHUT_WR)
    b.arm(p.fd, WRITE, "write")
    return _waits(b)


def _make_room(p) -> None:
    while _has_more(p.peer):  # the peer reads everything: room again
        p.peer.recv(1 << 20)


def _old_and_new(pairs, reused_by):
    """Three pairs: the one armed and closed, the one whose file takes its number, a control.
    ``reused_by`` "a later file" or "an earlier file": the new file's (st_dev, st_ino) sorts
    after or before the closed one's, so a backend that tells files apart by comparing
    their identities with anything but equality meets both orders."""
    a, b, control = pairs(3)
    lo, hi = sorted((a, b), key=lambda p: (os.fstat(p.fd).st_dev, os.fstat(p.fd).st_ino))
    return (lo, hi, control) if reused_by == "a later file" else (hi, lo, control)


REUSED_BY = pytest.mark.parametrize(
    "reused_by",
    ["a later file", "an earlier file"],
    ids=["reused-by-a-later-file", "reused-by-an-earlier-file"],
)


def _closed_armings_dropped(
    b, closed: set[str], control, *, reused: bool = False, earlier: tuple | list = ()
) -> None:
    """Waits until ``control`` (made readable, armed) is reported; every token of ``closed``
    (armings of a closed file) is dropped or reported once with ERR (the header's rule): any other
    bit is no readiness of the closed file, and where another file took the number (``reused``)
    it would be that file's.  ``earlier``: what the test's own waits reported before, counted too."""
    control.make_readable()
    b.arm(control.fd, READ, "control")
    got = [*earlier, *reports(b, 1, extra_waits=3)]
    tokens = Counter(tok for tok, _ in got)
    assert tokens["control"] == 1, f"the other fd's arming was not reported once: {got}"
    wrong = [
        (tok, revents_named(rev)) for tok, rev in got if tok in closed and (tokens[tok] > 1 or not rev & ERR)
    ]
    assert not wrong, f"armings of a closed fd reported {wrong}: drop them, or report each once with ERR" + (
        " (another file has the number now)" if reused else ""
    )


def _close(p) -> int:
    """Close ``p``'s socket without disarm (the caller's bug); returns its fd number."""
    number = p.ours.detach()
    os.close(number)
    return number
