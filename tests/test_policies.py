"""Dispatch policies in the reference (issue 40): choosing one, bad values, and the hint the
HTTP layer gives the size-aware one.  Each policy's order is the conformance suite's
(clauses R26, R27: conformance/tailreactor_conformance/tests/test_policies.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from http_helpers import Pump, connect, get, only_connection, read_responses
from tailreactor import READ, Reactor
from tailreactor.config import ConfigError, knob, load
from tailreactor.events import READY
from tailreactor.http import Listener
from tailreactor.policies import POLICIES, BackendOrder
from tailreactor.policies.age import DeliveryOrder


def test_the_knob_accepts_exactly_the_shipped_policies_and_defaults_to_age():
    assert knob("CWIST_REACTOR_POLICY").choices == tuple(POLICIES)
    assert load({}).policy == "age"
    for name in POLICIES:
        assert load({"CWIST_REACTOR_POLICY": name}).policy == name


def test_a_bad_policy_is_one_line_naming_the_value_and_what_is_accepted():
    with pytest.raises(ConfigError) as info:
        load({"CWIST_REACTOR_POLICY": "fifo"})
    assert str(info.value) == (
        "CWIST_REACTOR_POLICY='fifo' is invalid: accepted one of backend, age, oldest, lifo, shortest"
    )


def test_the_bench_server_refuses_a_bad_policy_with_one_line_and_exit_2():
    proc = subprocess.run(
        [sys.executable, "-m", "tailreactor.http.server", "--port", "0"],
        env={"CWIST_REACTOR_POLICY": "LIFO", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "CWIST_REACTOR_POLICY='LIFO'" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_each_policy_is_chosen_by_the_knob(backend_name, name):
    with Reactor(backend_name, config=load({"CWIST_REACTOR_POLICY": name})) as r:
        assert type(r._order) is POLICIES[name]


def test_the_default_is_cwists_age_order_and_tail_zero_reads_no_clock(backend_name):
    with Reactor(backend_name, config=load({})) as r:
        assert type(r._order) is DeliveryOrder and r._order.reads_clock
    with Reactor(backend_name, config=load({"CWIST_REACTOR_TAIL_US": "0"})) as r:
        assert not r._order.reads_clock


def test_policy_argument_takes_a_name_a_class_or_module_class(backend_name):
    with Reactor(backend_name, policy="lifo") as r:
        assert r._order.name == "lifo"
    with Reactor(backend_name, policy=BackendOrder) as r:
        assert type(r._order) is BackendOrder
    with Reactor(backend_name, policy="tailreactor.policies.shortest:ShortestFirst") as r:
        assert r._order.name == "shortest"
    with pytest.raises(
        ValueError, match=r"^policy 'fifo': accepted backend, age, oldest, lifo, shortest or module:Class$"
    ):
        Reactor(backend_name, policy="fifo")


def test_a_rearm_in_place_keeps_the_hint(make_reactor):
    import socket

    r = make_reactor()
    a, b = socket.socketpair()
    try:
        seen = []

        def callback(ev):
            seen.append(ev.hint)
            a.recv(16)
            if len(seen) == 1:
                assert r.arm(a.fileno(), READ, callback) is ev  # in place

        ev = r.arm(a.fileno(), READ, callback)
        ev.hint = 7
        for n in (1, 2):
            b.send(b"x")
            Pump(r).until(lambda n=n: len(seen) == n)
        assert seen == [7, 7]
    finally:
        r.disarm(a.fileno())
        a.close()
        b.close()


@pytest.mark.parametrize("pipelined", [1, 5])
def test_the_http_layer_hints_the_requests_its_last_pass_served(make_reactor, pipelined):
    """The read arming after a pass carries the requests that pass served: what
    CWIST_REACTOR_POLICY=shortest orders by (a pipelining client is a long job)."""
    reactor = make_reactor()
    srv = Listener(reactor, "127.0.0.1", 0)
    pump = Pump(reactor)
    with connect(srv.port) as c:
        pump.until(lambda: srv.connections)
        conn = only_connection(srv)
        c.sendall(get("/") * pipelined)
        pump.until(lambda: conn.stats.requests == pipelined)
        read_responses(c, pipelined)
        assert conn.stats.passes == 1, "precondition: one pass served them all"
        assert reactor.armed(conn.fd, READ).hint == pipelined
    srv.close()


class _AskNothing:
    """A policy in backend order all round (``in_backend_order``) whose methods must not be called."""

    name = "ask-nothing"
    in_backend_order = True
    reads_clock = True  # not read either: the reactor reads the clock only for its own knobs
    elevated = False

    def __init__(self, age_from="arm", threshold_ns=0):
        pass

    def start(self, batch):
        raise AssertionError("start() called on a policy in backend order all round")

    next = again = add = start


@pytest.mark.parametrize("harvest_us", [0, 1], ids=["plain", "harvesting"])
def test_a_policy_in_backend_order_all_round_is_asked_nothing_and_every_event_runs(backend_name, harvest_us):
    """The reactor walks the batch itself (policies/__init__.py): no method of the policy runs, every
    ready event runs once, in the order the backend reported it, those a harvest adds too."""
    import socket

    from tailreactor.clock import ManualClock

    clock = ManualClock()
    config = load({"CWIST_REACTOR_HARVEST_US": str(harvest_us), "CWIST_REACTOR_DRAIN_CHUNK": "1"})
    pairs = [socket.socketpair() for _ in range(4)]
    with Reactor(backend_name, config=config, clock=clock, policy=_AskNothing) as r:
        ran: list[int] = []

        def callback(ev):
            ran.append(ev.fd)
            clock.advance_us(10)
            r.post(lambda _: None)  # a drain after every callback (DRAIN_CHUNK=1)
            if len(ran) == 1:
                pairs[3][1].send(b"x")  # ready mid-round: a harvest takes it

        try:
            for a, _ in pairs:
                r.arm(a.fileno(), READ, callback)
            for _, b in pairs[:3]:
                b.send(b"x")
            r.flush()
            rounds = 0
            while len(ran) < 4 and rounds < 50:
                r.run_once(1.0)
                rounds += 1
            assert sorted(ran) == sorted(a.fileno() for a, _ in pairs), ran
            assert len(set(ran)) == 4
            if harvest_us:
                assert r.counters.harvested >= 1, "precondition: the fourth joined by a harvest"
        finally:
            for a, b in pairs:
                r.disarm(a.fileno())
                a.close()
                b.close()


@pytest.mark.parametrize("name", ["age", "lifo"])
def test_tail_zero_is_backend_order_all_round_and_the_shipped_backend_order_says_so(name):
    assert POLICIES[name]("arm", 0).in_backend_order
    assert not POLICIES[name]("arm", 1000).in_backend_order
    assert BackendOrder.in_backend_order
    assert not POLICIES["oldest"]("arm", 0).in_backend_order
    assert not POLICIES["shortest"]("arm", 0).in_backend_order


class _GivesFirstOnly:
    """A policy that gives the first event of each round's batch and then nothing."""

    name = "first-only"
    reads_clock = False
    elevated = False

    def __init__(self, age_from="arm", threshold_ns=0):
        self._batch: list = []

    def start(self, batch):
        self._batch = list(batch[:1])

    def next(self, now_ns):
        return self._batch.pop() if self._batch else None

    def again(self):
        pass

    def add(self, events):
        pass


@pytest.mark.parametrize("how", ["disarm", "replace"])
def test_the_sweep_counts_the_entries_a_callback_dropped_once_and_runs_what_is_left(backend_name, how):
    """The reactor walks the batch again only when an entry can still be READY (callbacks run +
    entries dropped < entries): here the first callback drops the second event (disarmed, or replaced
    by a new arm of its fd, which is not in the batch), and the third, left READY by the policy, must
    still run in the same round -- an entry counted twice would end the round without it."""
    import socket

    pairs = [socket.socketpair() for _ in range(3)]
    fds = [a.fileno() for a, _ in pairs]
    with Reactor(backend_name, config=load({}), policy=_GivesFirstOnly) as r:
        ran: list[int] = []

        def callback(ev):
            ran.append(ev.fd)
            if len(ran) == 1:
                other = next(fd for fd in fds if fd not in ran and r.armed(fd, READ).state == READY)
                if how == "disarm":
                    r.disarm(other, READ)
                else:
                    r.arm(other, READ, callback)  # a new arming: the batch's entry is cancelled

        try:
            for fd in fds:
                r.arm(fd, READ, callback)
            for _, b in pairs:
                b.send(b"x")
            r.flush()
            rounds = 0
            while len(ran) < 2 and rounds < 3:
                r.run_once(1.0)
                rounds += 1
            assert len(ran) == 2 and rounds == 1, (
                f"{rounds} rounds ran {ran}: the sweep must run what is left"
            )
        finally:
            for a, b in pairs:
                r.disarm(a.fileno())
                a.close()
                b.close()
