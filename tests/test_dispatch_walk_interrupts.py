"""Clause R21 over the walk: an interrupt at any bytecode of the order of delivery
(``policies.age.DeliveryOrder``) and of the work between deliveries (``Dispatch._between``)
loses no event.

``test_reactor_interrupts.py`` sweeps the round's own functions; this sweep adds the
walk's methods and ``_between`` to them, in a round that does everything between two
deliveries: age-ordered runs (or backend order), a post drain after every callback, a
harvest before every later delivery (the first callback makes two more fds ready, every
callback takes 10 us of a ManualClock) and, on io_uring, a round-budget submit.  The
windows left out are that module's: from marking an event DONE to its callback's call,
and from the backend's harvest returning to the round storing it.
"""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from tailreactor import READ, Reactor
from tailreactor import dispatch as dispatch_mod
from tailreactor import reactor as reactor_mod
from tailreactor.clock import ManualClock
from tailreactor.config import Config
from tailreactor.policies import age as age_mod
from test_reactor_interrupts import Interrupter, _finish, _harvest_window

WALK_TRACED = {
    "_dispatch",
    "_in_order",
    "_between",
    "_harvest",
    "_stamp",
    "next",
    "_take_run",
    "_walk_batch",
    "again",
    "add",
    "take_aged",
    "joins",
    "<listcomp>",
    "<setcomp>",
}


def _walk_trial(backend: str, k: int, tail_us: int) -> tuple[bool, Counter, int, int, int]:
    """Raise at the k-th traced bytecode after the wait returned; (raised, deliveries, fds, harvested, drains)."""
    clock = ManualClock()
    # uring_entries=8: the sweep opens a reactor per bytecode, and the kernel frees a ring's locked
    # memory late; small rings keep it within a normal user's 8 MiB memlock limit.
    cfg = Config.default().replace(
        tail_us=tail_us, harvest_us=1, drain_chunk=1, round_budget_us=5, uring_entries=8
    )
    r = Reactor(backend, config=cfg, clock=clock)
    got: Counter = Counter()
    state = {"after": False}
    pairs = [socket.socketpair() for _ in range(4)]

    def cb(ev):
        got[ev.fd] += 1
        clock.advance_us(10)
        r.post(lambda _: None)
        r.arm(ev.fd, READ, lambda e: None)  # a re-arm in place: the round-budget submit has work
        if sum(got.values()) == 1:
            for _, b in pairs[2:]:
                b.send(b"x")

    for i, (a, b) in enumerate(pairs):
        a.setblocking(False)
        r.arm(a.fileno(), READ, cb)
        if i < 2:
            b.send(b"x")
    r.backend.flush()
    clock.advance_us(5000)  # all aged with tail_us=1000
    wait = r.backend.wait

    def traced_wait(timeout):
        out = wait(timeout)
        if out:
            state["after"] = True
        return out

    r.backend.wait = traced_wait
    window = _harvest_window()
    interrupter = Interrupter(
        k,
        WALK_TRACED,
        {reactor_mod.__file__, dispatch_mod.__file__, age_mod.__file__},
        skip=lambda frame: (frame.f_code.co_name, frame.f_lineno) in window,
        active=lambda: state["after"],
    )
    raised = interrupter.run(lambda: r.run_once(1.0))
    state["after"] = False
    harvested, drains = r.counters.harvested, r.counters.drain_chunk_drains
    assert not r.dispatch_late(), f"interrupt at traced bytecode {k}: dispatch_late() still true"
    # Not asserted here: _running is None.  A tracer (no signal handler: nothing calls out
    # there) can raise between the two stores of _dispatch's own finally, when the last drain
    # point found no posts (which also clear it); main has the same window.
    _finish(r, pairs, 5)
    return raised, got, len(pairs), harvested, drains


@pytest.mark.parametrize("tail_us", [0, 1000], ids=["backend-order", "aged"])
def test_an_interrupt_at_any_bytecode_of_the_walk_and_between_deliveries_loses_nothing(backend_name, tail_us):
    k = 0
    while True:
        raised, got, n, harvested, drains = _walk_trial(backend_name, k, tail_us)
        assert len(got) == n and set(got.values()) == {1}, (
            f"interrupt at traced bytecode {k}: deliveries {dict(got)}"
        )
        if not raised:
            break
        k += 1
    assert harvested >= 2 and drains >= 3, (
        f"precondition: the uninterrupted round harvested {harvested}, drained {drains}"
    )
    assert k > 300, f"precondition: the round executed only {k} traced bytecodes"
