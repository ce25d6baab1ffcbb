"""Shared fixtures: every reactor-level test runs on each real backend."""

from __future__ import annotations

import socket

import pytest

from tailreactor import Config, Reactor
from tailreactor.clock import ManualClock

BACKENDS = ["epoll", "io_uring"]


@pytest.fixture(params=BACKENDS)
def backend_name(request) -> str:
    return request.param


@pytest.fixture
def make_reactor(backend_name):
    """``make_reactor(clock=None, **config_attrs)`` -> Reactor on the parametrized backend.

    Closed at teardown.  Config attributes override ``Config.default()``.
    """
    made: list[Reactor] = []

    def make(clock=None, **attrs):
        cfg = Config.default().replace(**attrs)
        kw = {"clock": clock} if clock is not None else {}
        r = Reactor(backend_name, config=cfg, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def socketpairs():
    """``socketpairs(n)`` -> list of (a, b) non-blocking connected pairs, closed at teardown."""
    made: list[socket.socket] = []

    def make(n: int = 1):
        pairs = []
        for _ in range(n):
            a, b = socket.socketpair()
            a.setblocking(False)
            b.setblocking(False)
            made.extend((a, b))
            pairs.append((a, b))
        return pairs

    yield make
    for s in made:
        s.close()


@pytest.fixture
def pumped(make_reactor, clock):
    """(reactor, listener, pump): a bench listener on a ManualClock reactor; checks callback_errors at the end."""
    from http_helpers import Pump
    from tailreactor.http import Listener

    reactor = make_reactor(clock=clock)
    srv = Listener(reactor, "127.0.0.1", 0)
    yield reactor, srv, Pump(reactor)
    srv.close()
    assert reactor.counters.callback_errors == 0
