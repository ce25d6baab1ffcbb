"""Fixtures of the conformance tests: the backend and reactor under test, sockets, a clock.

``conformance_backend`` (a backend name) is parametrized by the plugin from
``--backend``; everything here builds on it.  Each fixture closes what it made.
"""

from __future__ import annotations

import os

import pytest

from tailreactor import Config
from tailreactor.backends import IoUringUnavailable
from tailreactor.clock import ManualClock
from tailreactor_conformance.cabi import create_backend  # cabi:PATH too
from tailreactor_conformance.harness import Pair
from tailreactor_conformance.plugin import reactor_spec, resolve


@pytest.fixture
def make_backend(conformance_backend, request):
    """``make_backend()`` -> a fresh backend of the kind under test (closed at teardown).

    io_uring that the kernel refuses is skipped when it was not asked for
    explicitly, and an error when it was (never silently another backend) or
    when ``TAILREACTOR_REQUIRE_IO_URING=1`` says this machine must have it.
    """
    made = []
    explicit = (
        bool(request.config.getoption("conformance_backends"))
        or os.environ.get("TAILREACTOR_REQUIRE_IO_URING") == "1"
    )

    def make():
        try:
            b = create_backend(conformance_backend)
        except IoUringUnavailable as exc:
            if explicit:
                raise
            pytest.skip(f"io_uring unavailable here: {exc}")
        made.append(b)
        return b

    yield make
    for b in made:
        try:
            b.close()
        except Exception:  # noqa: BLE001 - a test may have closed it, or a mutant may misbehave
            pass


@pytest.fixture
def reactor_factory(request):
    """The reactor class/factory under test (``--reactor``), called as
    ``factory(backend, config=..., clock=...)``."""
    return resolve(reactor_spec(request.config))


@pytest.fixture
def make_reactor(make_backend, reactor_factory):
    """``make_reactor(clock=None, backend=None, probe=None, policy=None, **config_attrs)`` -> a
    reactor on the backend under test (``policy``: given as ``policy=``, a dispatch policy).  ``backend`` may wrap a backend from ``make_backend``
    (e.g. a RecordingBackend).  Config starts from the defaults, never from the
    environment.  Closed at teardown.
    """
    made = []

    def make(clock=None, backend=None, probe=None, policy=None, **attrs):
        cfg = Config.default().replace(**attrs)
        kw = {"clock": clock} if clock is not None else {}
        if probe is not None:
            kw["probe"] = probe
        if policy is not None:
            kw["policy"] = policy
        r = reactor_factory(backend if backend is not None else make_backend(), config=cfg, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        try:
            r.close()
        except Exception:  # noqa: BLE001
            pass


@pytest.fixture
def fresh_reactor(make_backend, reactor_factory, conformance_backend):
    """``fresh_reactor(clock=None, backend=None, **config_attrs)`` -> a reactor the caller closes.

    For property tests that build one reactor per example: nothing is kept
    until the end of the test (a ring per example would pile up).
    """
    make_backend().close()  # skips here, once, if the backend is unavailable

    def make(clock=None, backend=None, policy=None, **attrs):
        kw = {"clock": clock} if clock is not None else {}
        if policy is not None:
            kw["policy"] = policy
        backend = backend if backend is not None else create_backend(conformance_backend)
        return reactor_factory(backend, config=Config.default().replace(**attrs), **kw)

    return make


@pytest.fixture
def pairs():
    """``pairs(n)`` -> n connected non-blocking socketpairs (closed at teardown)."""
    made: list[Pair] = []

    def make(n: int = 1) -> list[Pair]:
        new = [Pair() for _ in range(n)]
        made.extend(new)
        return new

    yield make
    for p in made:
        p.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
