"""One simulated run: the real reactor and bench connections, socketpairs, a virtual clock.

:func:`simulate` runs one :class:`SimRun` and returns the load client's document
(:func:`tailjob.loadspec.report`, the keys of a live run) plus ``server``: requests served, virtual
busy time, the reactor's counters (what is real and what is virtual: docs/en/sim-tier.md).  Hooks
into the bench code, and only these: :class:`SimListener` adopts the socketpairs (no TCP accept);
:class:`SimConnection` charges ``callback_us`` per callback; the server's socket charges
``request_us`` per request in ``send``; the backend's waits charge the dispatch policy's cost
(:meth:`~tailjob.sim.costs.CostModel.policy_us`); ``busy_wait_ns`` advances the virtual clock.  When the
reactor would block, the clock jumps to the next client send or the reactor's earliest timer.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import math
import random
import resource
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from tailreactor import Reactor, policies
from tailreactor import config as _config
from tailreactor.backends import create_backend
from tailreactor.clock import ManualClock
from tailreactor.http import connection as _connection
from tailreactor.http import listener as _listener

from .. import loadgen
from ..loadspec import ClassStats, LoadSpec, report, set_offered, set_offered_due
from .costs import CostModel

START_NS = 1_000_000_000
"""The virtual clock's reading when a run's server starts (1 s: as ManualClock)."""
TURNAROUND = 0
"""The count of a scheduled client event that ends a closed-loop turnaround (no request is due)."""
TURNAROUND_COST = {"loadgen": "client_us", "wrk": "wrk_us"}
"""The cost model's constant for each client's closed-loop turnaround (:attr:`SimRun.client`)."""
LEAD_NS = 1_000_000
"""Virtual time between the server's start and the run's start (connections made, reads armed)."""


@dataclass(frozen=True)
class SimRun:
    """One simulated run (see the module docstring).  ``env``: the server's whole environment."""

    backend: str
    env: Mapping[str, str]
    spec: LoadSpec
    costs: CostModel
    client: str = "loadgen"
    """Whose closed loop the clients are: ``loadgen`` (turnaround ``client_us``) or ``wrk`` (``wrk_us``:
    closed-loop ``uniform``, which the live job drives with wrk)."""


class _Clock(ManualClock):
    """The run's virtual clock, which also counts what the server was charged (``busy_ns``)."""

    def __init__(self):
        super().__init__(START_NS)
        self.busy_ns = 0

    def charge(self, ns: int) -> None:
        self.now_ns += ns
        self.busy_ns += ns


class SimSocket(socket.socket):
    """The server's end of a socketpair: ``send`` charges the requests answered since the last
    one (``request_us`` each), then the client reads the answers at that virtual time."""

    sim: _Sim
    conn: SimConnection
    client: _Client
    charged = 0

    def send(self, data, flags=0):
        sim = self.sim
        served = self.conn.stats.requests
        if served > self.charged:
            sim.clock.charge((served - self.charged) * sim.request_ns)
            self.charged = served
        n = super().send(data, flags)
        self.client.readable()
        return n


def _charged(sim: _Sim, callback):
    def charged(event):
        sim.enter_callback()
        callback(event)

    return charged


class SimConnection(_connection.Connection):
    """The bench connection, its callbacks charged ``callback_us`` each and preceded by the client
    writes due by then (the only change: the callbacks it arms are these wrappers)."""

    def __init__(self, listener, sock, peer):
        super().__init__(listener, sock, peer)
        self._sim = listener.sim
        self._read_cb, self._recv_cb = (_charged(self._sim, cb) for cb in (self._read_cb, self._recv_cb))

    def _on_writable(self, event) -> None:
        self._sim.enter_callback()
        super()._on_writable(event)

    def _continue(self, data) -> None:
        self._sim.enter_callback()
        super()._continue(data)


class SimListener(_listener.Listener):
    """The bench listener (knobs, stall timer, connection table); connections arrive by
    :meth:`adopt` instead of ``accept``.  Its listening socket is bound to a free loopback port
    and never connected to."""

    def __init__(self, reactor, sim: _Sim):
        self.sim = sim
        super().__init__(reactor, "127.0.0.1", 0)

    def adopt(self, sock: SimSocket) -> SimConnection:
        sock.setblocking(False)
        conn = SimConnection(self, sock, ("sim", sock.fileno()))
        sock.conn = conn
        self.connections[conn.fd] = conn
        self.stats.accepts += 1
        conn.start()
        return conn


class _Backend:
    """The real backend, whose waits never block: when nothing is ready, the virtual clock jumps
    to the next client send (delivered, then the kernel asked again) or to the wait's timeout."""

    def __init__(self, real, sim: _Sim, *, policy_us: tuple[float, float, float]):
        self._real = real
        self._sim = sim
        self._wait_ns = sim.costs_ns("wait_us")
        # The policy's cost: a round of one event; per round and per event of a larger one
        # (costs.CostModel.policy_us).
        self._one_ns, self._round_ns, self._event_ns = (round(us * 1000) for us in policy_us)
        if callable(getattr(real, "harvest", None)):
            self._harvest_ns = sim.costs_ns("harvest_us")
            self.harvest = self._harvest

    def __getattr__(self, name):  # arm, rearm, arm_recv, disarm, flush, wake, close, name, capabilities
        return getattr(self._real, name)

    def wait(self, timeout_s):
        got = self._wait(timeout_s)
        if got:
            n = len(got)
            self._sim.clock.charge(max(0, self._one_ns if n == 1 else self._round_ns + n * self._event_ns))
        return got

    def _wait(self, timeout_s):
        sim, real, clock = self._sim, self._real, self._sim.clock
        clock.charge(self._wait_ns)
        sim.deliver()
        got = real.wait(0)
        if got or timeout_s == 0:
            return got
        now = clock.now_ns
        deadline = (
            sim.hard_end_ns if timeout_s is None else min(sim.hard_end_ns, now + math.ceil(timeout_s * 1e9))
        )
        heap = sim.sends
        while True:
            if not heap or heap[0][0] > deadline:
                if deadline > clock.now_ns:
                    clock.set_ns(deadline)
                if deadline >= sim.hard_end_ns:
                    sim.out_of_time = True
                return real.wait(0)
            if heap[0][0] > clock.now_ns:
                clock.set_ns(heap[0][0])
            sim.deliver()
            got = real.wait(0)
            if got:
                return got

    def _harvest(self, max_events):
        self._sim.clock.charge(self._harvest_ns)
        self._sim.deliver()
        got = self._real.harvest(max_events)
        if got:
            self._sim.clock.charge(len(got) * self._event_ns)
        return got


class _Client(loadgen.ClientConnection):
    """One keep-alive client connection in virtual time: the live client's
    :class:`~tailjob.loadgen.ClientConnection` on a socketpair, writing at its send times (the
    run's heap, delivered between the reactor's steps) instead of on an event loop's timers."""

    def __init__(self, sim: _Sim, stats, index: int, sock: socket.socket):
        super().__init__(sim, stats, index)
        self.sim, self.sock = sim, sock
        self.done = False
        # Its own generator: the schedules' (self.rng, as the load client draws them) stay as they are.
        self.turnaround = random.Random(f"{sim.spec.seed}/{self.cls.name}/{index}/turnaround")
        self.latencies: collections.Counter[int] = collections.Counter()  # us -> answers

    # answers
    def readable(self) -> None:
        while True:
            try:
                data = self.sock.recv(262144)
            except BlockingIOError:
                return
            if not data:
                return
            self.parser.feed_data(data)

    def record(self, us: int) -> None:
        self.latencies[us] += 1  # into the class's histogram at the end (_record)

    # the transport and the clock
    def now_ns(self) -> int:
        return self.sim.clock.now_ns

    def write(self, wire: bytes) -> None:
        if self.sock.send(wire) != len(wire):
            raise RuntimeError("a client's request did not fit in its socketpair")

    def at(self, intended_ns: int, count: int, now: int) -> None:
        if intended_ns <= now:
            self.fire(intended_ns, count)
        else:
            self.sim.schedule(intended_ns, self, count)

    # the closed loop's turnaround (``client_us``, or ``wrk_us`` for wrk's)
    def _next_batch(self, now: int) -> None:
        mean_ns = self.sim.client_ns
        delay = round(self.turnaround.expovariate(1.0) * mean_ns) if mean_ns else 0
        if delay:
            self.sim.schedule(now + delay, self, TURNAROUND)
        else:
            super()._next_batch(now)

    def fire(self, intended_ns: int, count: int) -> None:
        if count == TURNAROUND:  # the turnaround is over: the next batch, as if the answer came now
            super()._next_batch(intended_ns)
        else:
            super().fire(intended_ns, count)

    def finish(self) -> None:
        if not self.done:
            self.done = True
            self.sim.unfinished -= 1


@dataclass
class _Sim:
    """The state of one run shared by the hooks: clock, client sends pending, bounds."""

    spec: LoadSpec
    model: CostModel
    turnaround: str  # the cost model's constant for a closed loop's turnaround
    clock: _Clock = field(default_factory=_Clock)
    sends: list = field(default_factory=list)  # heap of (time ns, order, client, count)
    start_ns: int = 0
    end_ns: int = 0
    hard_end_ns: int = 0
    unfinished: int = 0
    out_of_time: bool = False
    _order: int = 0
    _seq: int = 0

    def costs_ns(self, name: str) -> int:
        return round(getattr(self.model, name) * 1000)

    def __post_init__(self):
        self.request_ns = self.costs_ns("request_us")
        self.callback_ns = self.costs_ns("callback_us")
        self.client_ns = self.costs_ns(self.turnaround)

    def next_seq(self) -> bytes:
        self._seq += 1
        return b"%d" % self._seq

    def schedule(self, at_ns: int, client: _Client, count: int) -> None:
        self._order += 1
        heapq.heappush(self.sends, (at_ns, self._order, client, count))

    def deliver(self) -> None:
        """Write every client request due by now, in send-time order (ties: scheduling order)."""
        heap, now = self.sends, self.clock.now_ns
        while heap and heap[0][0] <= now:
            at_ns, _, client, count = heapq.heappop(heap)
            client.fire(at_ns, count)

    def enter_callback(self) -> None:
        self.clock.charge(self.callback_ns)
        if self.sends and self.sends[0][0] <= self.clock.now_ns:
            self.deliver()


@contextlib.contextmanager
def _virtual_busy_wait(sim: _Sim):
    """The bench code's ``busy_wait_ns`` (the injected service time and stalls) advances the virtual
    clock while a run lasts."""
    saved = _connection.busy_wait_ns, _listener.busy_wait_ns
    _connection.busy_wait_ns = _listener.busy_wait_ns = sim.clock.charge
    try:
        yield
    finally:
        _connection.busy_wait_ns, _listener.busy_wait_ns = saved


def _connect(sim: _Sim, listener: SimListener, st, i: int, pairs: list[socket.socket]) -> _Client:
    """Connection ``i`` of a class: a socket pair, the server's end adopted by the listener."""
    server_end, client_end = socket.socketpair()
    client_end.setblocking(False)
    pairs.append(client_end)
    sock = SimSocket(fileno=server_end.detach())
    sock.sim = sim
    client = _Client(sim, st, i, client_end)
    sock.client = client
    listener.adopt(sock)
    return client


def _tally(sim: _Sim, clients: list[_Client], stats) -> None:
    """After the run: the latencies into the classes' histograms, the load due, what is still owed."""
    for c in clients:  # a count per microsecond value
        for us, n in sorted(c.latencies.items()):
            c.stats.record(us, n)
        c.latencies.clear()
    set_offered_due(sim.spec, stats, sim.start_ns, sim.end_ns)
    for c in clients:
        owed = c.owed()
        if owed:
            c.stats.errors["timeout"] += owed


def _open_files(connections: int) -> None:
    """A run holds a socketpair per connection (two open files): raise this process's soft limit to
    what it needs, up to the hard limit (a shell's soft limit, often 1024, would stop a run of the
    ``high`` profile's 1024 connections); RuntimeError (a run failed, exit 3) if the hard one is lower."""
    need = 2 * connections + 64  # and the reactor's, the listener's, the interpreter's own
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise RuntimeError(
            f"{connections} connections need {need} open files (a socketpair each), and this process "
            f"may open at most {hard} (ulimit -Hn): raise that limit, or use fewer connections"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def simulate(run: SimRun) -> dict:
    """Run ``run`` and return its document (see the module docstring).

    Raises :class:`tailreactor.config.ConfigError` for a bad knob and what
    :func:`tailreactor.backends.create_backend` raises for a backend this
    machine cannot start.
    """
    spec = run.spec
    spec.check()
    _open_files(sum(c.connections for c in spec.classes))
    env = {k: v for k, v in run.env.items() if k not in ("CWIST_LATENCY_PROBE", "CWIST_LATENCY_PROBE_FILE")}
    env["CWIST_REACTOR_BACKEND"] = run.backend
    cfg = _config.load(env)
    sim = _Sim(spec, run.costs, turnaround=TURNAROUND_COST[run.client])
    stats = [ClassStats(c) for c in spec.classes]
    pairs: list[socket.socket] = []
    # A policy in backend order all round (age, lifo with TAIL_US=0) is asked nothing: it costs nothing extra.
    order = policies.create(cfg.policy, cfg.age_from, cfg.tail_us * 1000)
    policy_us = (
        (0.0, 0.0, 0.0) if getattr(order, "in_backend_order", False) else run.costs.policy_us(cfg.policy)
    )
    with _virtual_busy_wait(sim):
        reactor = Reactor(
            _Backend(create_backend(run.backend), sim, policy_us=policy_us), config=cfg, clock=sim.clock
        )
        try:
            listener = SimListener(reactor, sim)
            clients = [
                _connect(sim, listener, st, i, pairs) for st in stats for i in range(st.cls.connections)
            ]
            sim.start_ns = sim.clock.now_ns + LEAD_NS
            sim.end_ns = sim.start_ns + round(spec.duration_s * 1e9)
            sim.hard_end_ns = sim.end_ns + round(spec.drain_s * 1e9)
            set_offered(spec, stats, sim.start_ns, sim.end_ns)
            sim.unfinished = len(clients)
            sim.clock.set_ns(sim.start_ns)
            busy_before = sim.clock.busy_ns
            for c in clients:
                c.start()
            while sim.unfinished and not sim.out_of_time:
                reactor.run_once(None)
            busy_ns = sim.clock.busy_ns - busy_before
            _tally(sim, clients, stats)
            counters = reactor.counters.as_dict()
            requests = sum(conn.stats.requests for conn in listener.connections.values())
            stalls = listener.stats.stalls
            listener.close()
        finally:
            reactor.close()
            for s in pairs:
                s.close()
    doc = report(stats, spec.duration_s)
    doc["server"] = {
        "requests": requests,
        "busy_us": busy_ns / 1000,
        "stalls": stalls,
        "counters": counters,
        "virtual_end_us": (sim.clock.now_ns - sim.start_ns) / 1000,
    }
    return doc
