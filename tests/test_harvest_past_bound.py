"""Harvesting to the round's end (dispatch.py, "Harvesting mid-round"): the bound counts the
harvested events that run, so a short event that becomes ready after the round has taken as
many harvested events as its wait returned still runs in it under ``shortest``, ahead of the
long ones harvested with it, which lead the next round and run there once.

Deterministic: a ManualClock, advanced by the callbacks, so "the round has run H" is exact;
the readiness is real (socketpairs written to by the callbacks).
"""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from tailreactor import READ
from tailreactor.clock import ManualClock

LONG, SHORT = 16, 1  # hints: requests served in the last callback (a pipelining client, an interactive one)


@pytest.fixture
def pairs():
    made = {name: socket.socketpair() for name in ("own1", "own2", "h1", "h2", "h3", "short")}
    for a, _ in made.values():
        a.setblocking(False)
    yield made
    for a, b in made.values():
        a.close()
        b.close()


def _round_of_two(make_reactor, pairs, policy: str):
    """Two long events ready at round start; the first callback makes h1..h3 ready (more than the
    bound, 2), the second makes ``short`` ready.  Returns (order of the first round, runs per name)."""
    clock = ManualClock()
    r = make_reactor(clock=clock, policy=policy, harvest_us=100, tail_us=0)
    log: list[str] = []
    runs: Counter = Counter()

    def cb(ev):
        name = ev.data
        pairs[name][0].recv(16)
        log.append(name)
        runs[name] += 1
        clock.advance_us(300)  # past HARVEST_US: a harvest is due before the next delivery
        if len(log) == 1:
            for n in ("h1", "h2", "h3"):
                pairs[n][1].send(b"x")
        elif len(log) == 2:
            pairs["short"][1].send(b"x")

    for name, (a, _) in pairs.items():
        r.arm(a.fileno(), READ, cb, name).hint = SHORT if name == "short" else LONG
    r.backend.flush()
    clock.advance_us(1000)
    for name in ("own1", "own2"):
        pairs[name][1].send(b"x")
    r.run_once(0)
    first = list(log)
    for _ in range(3):
        r.run_once(0)
    return first, runs, r


def test_a_short_event_ready_late_runs_in_the_round_ahead_of_long_ones_harvested_with_it(make_reactor, pairs):
    first, runs, r = _round_of_two(make_reactor, pairs, "shortest")
    assert first[:2] == ["own1", "own2"], f"precondition: the round's own events first, got {first}"
    assert "short" in first, (
        f"the short event, harvested past the taken count, waited for a later round: {first}"
    )
    assert first.index("short") == 2, f"the short event ran after long ones harvested before it: {first}"
    assert len(first) == 4, f"a round of 2 ran {len(first)} callbacks (at most 2 harvested): {first}"
    assert runs == Counter({n: 1 for n in pairs}), f"runs per event {dict(runs)}: every event runs once"


def test_in_backend_order_harvested_events_past_the_bound_lead_the_next_round(make_reactor, pairs):
    first, runs, r = _round_of_two(make_reactor, pairs, "backend")
    assert first == ["own1", "own2", "h1", "h2"], f"backend order runs the first two harvested: {first}"
    assert runs == Counter({n: 1 for n in pairs}), f"runs per event {dict(runs)}: every event runs once"
    assert r.counters.harvested >= 2
