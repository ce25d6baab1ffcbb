"""Shared fixtures: every reactor-level test runs on each real backend.

What cannot run here is skipped with a one-line reason, never failed:

* a test marked ``io_uring`` (``IO_URING``, the io_uring entry of
  ``BACKENDS``, carries the mark) when the kernel refuses a ring -- the
  reason names the errno.  ``TAILREACTOR_REQUIRE_IO_URING=1`` (CWIST's
  ``CWIST_TEST_REQUIRE_IO_URING``) makes that a failure instead: ``.ci/run``
  sets it where io_uring works.
* a test marked ``wrk`` when wrk is not on PATH;
* a test marked ``bench_extras`` without the bench extras (uvloop, py-spy).

pytest groups skips by reason and place, so each reason is one line of the
summary however many tests it skipped.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tailreactor import Config, Reactor
from tailreactor.backends import IoUringBackend, IoUringUnavailable
from tailreactor.clock import ManualClock

REQUIRE_IO_URING = "TAILREACTOR_REQUIRE_IO_URING"
#: The io_uring parameter of a backend-parametrized test: skipped when the kernel refuses io_uring.
IO_URING = pytest.param("io_uring", marks=pytest.mark.io_uring)
BACKENDS = ["epoll", IO_URING]

WRK_MISSING = ("wrk not found on PATH; install it: scripts/bootstrap.sh --wrk "
               "(as root or with sudo: apt-get install wrk)")
BENCH_EXTRAS_MISSING = "needs the bench extras ({}); install them: pip install -e '.[bench]'"


@functools.cache
def io_uring_unavailable() -> str | None:
    """None if this process can set up an io_uring ring, else why not (one line naming the errno)."""
    try:
        IoUringBackend().close()
    except IoUringUnavailable as exc:
        return str(exc)
    return None


def require_io_uring() -> bool:
    """``TAILREACTOR_REQUIRE_IO_URING``: ``1`` true, ``0`` or unset false; anything else a usage error."""
    value = os.environ.get(REQUIRE_IO_URING, "0")
    if value not in ("0", "1"):
        raise pytest.UsageError(f"{REQUIRE_IO_URING}={value!r}: accepted: 0, 1 or unset")
    return value == "1"


def missing_bench_extras() -> list[str]:
    """The bench extras not installed: uvloop (importable) and py-spy (next to python or on PATH)."""
    missing = []
    if importlib.util.find_spec("uvloop") is None:
        missing.append("uvloop")
    if not (Path(sys.executable).parent / "py-spy").exists() and shutil.which("py-spy") is None:
        missing.append("py-spy")
    return missing


def pytest_configure(config):
    require_io_uring()  # a bad value stops the run before any test


def pytest_runtest_setup(item):
    if item.get_closest_marker("io_uring") is not None:
        reason = io_uring_unavailable()
        if reason is not None:
            if require_io_uring():
                pytest.fail(f"{REQUIRE_IO_URING}=1 but {reason}", pytrace=False)
            pytest.skip(reason)
    if item.get_closest_marker("wrk") is not None and shutil.which("wrk") is None:
        pytest.skip(WRK_MISSING)
    if item.get_closest_marker("bench_extras") is not None:
        missing = missing_bench_extras()
        if missing:
            pytest.skip(BENCH_EXTRAS_MISSING.format(", ".join(missing)))


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
