"""Shared fixtures: every reactor-level test runs on each real backend.

What cannot run here is skipped with a one-line reason, never failed:

* a test marked ``io_uring`` (``IO_URING``, the io_uring entry of
  ``BACKENDS``, carries the mark) when the kernel refuses a ring -- the
  reason names the errno.  ``TAILREACTOR_REQUIRE_IO_URING=1`` (CWIST's
  ``CWIST_TEST_REQUIRE_IO_URING``) makes that a failure instead: ``.ci/run``
  sets it where io_uring works.
* a test marked ``wrk`` when wrk is not on PATH;
* a test marked ``bench_extras`` without the bench extras (uvloop, py-spy);
* an io_uring test whose ring setup fails with ENOMEM: the locked-memory
  limit (``ulimit -l``) is too low for the rings it needs -- the reason names
  the limit (a failure under ``TAILREACTOR_REQUIRE_IO_URING=1`` too);
* a test that needs more open files than ``RLIMIT_NOFILE`` allows
  (:func:`require_fds`) -- the reason names the limit and the ``ulimit -n``
  that would run it.

Limits: the session raises the soft ``RLIMIT_NOFILE`` to the hard limit (what
a user would do by hand with ``ulimit -n``), so only a test that needs more
than the hard limit skips.  A test gets the raised limit by asking for it
(``require_fds(n)``); any other runs under a stock soft limit of 1024, and one
that runs out there fails naming ``require_fds``: as root too, so a test that
passes only where the limit is high cannot land.

Leaks: after every test the process must hold the file descriptors it held
before the test (same numbers, same files), io_uring rings included; a test
that leaves one open fails at teardown, naming each leaked descriptor.

pytest groups skips by reason and place, so each reason is one line of the
summary however many tests it skipped.
"""

from __future__ import annotations

import errno
import functools
import gc
import importlib.util
import os
import shutil
import socket
import sys
import traceback
from pathlib import Path

import pytest

from limits import (
    STOCK_NOFILE,
    fd_table,
    memlock_limit_text,
    raise_nofile_limit,
    socketpair_list,
    stock_nofile_limit,
)
from tailreactor import Config, Reactor
from tailreactor.backends import IoUringUnavailable, io_uring_refused
from tailreactor.clock import ManualClock

REQUIRE_IO_URING = "TAILREACTOR_REQUIRE_IO_URING"
#: The io_uring parameter of a backend-parametrized test: skipped when the kernel refuses io_uring.
IO_URING = pytest.param("io_uring", marks=pytest.mark.io_uring)
BACKENDS = ["epoll", IO_URING]

WRK_MISSING = (
    "wrk not found on PATH; install it: scripts/bootstrap.sh --wrk "
    "(as root or with sudo: apt-get install wrk)"
)
BENCH_EXTRAS_MISSING = "needs the bench extras ({}); install them: pip install -e '.[bench]'"


#: None if this process can set up an io_uring ring, else why not (asked once per session).
io_uring_unavailable = functools.cache(io_uring_refused)


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
    raise_nofile_limit()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """An io_uring test whose ring setup fails with ENOMEM mid-test skips naming the memlock limit;
    one that runs out of descriptors under the stock limit fails naming the way to ask for more."""
    try:
        return (yield)
    except IoUringUnavailable as exc:
        if exc.errno != errno.ENOMEM or item.get_closest_marker("io_uring") is None:
            raise
        reason = (
            f"io_uring ring setup failed with ENOMEM: the locked-memory limit (ulimit -l: "
            f"{memlock_limit_text()}, shared by every process of this user) is too low for "
            f"the rings this test holds; raise it (ulimit -l, memlock in "
            f"/etc/security/limits.conf) or lower CWIST_URING_ENTRIES"
        )
        if require_io_uring():
            pytest.fail(f"{REQUIRE_IO_URING}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        at = next((f for f in reversed(frames) if f.filename == str(item.path)), frames[-1])
        pytest.fail(
            f"{item.nodeid}: EMFILE (too many open files) at {at.filename}:{at.lineno} under the "
            f"stock soft RLIMIT_NOFILE of "
            f"{STOCK_NOFILE} every test runs under: a test that needs more descriptors says so "
            f"first with require_fds(n) (tests/limits.py), which lifts its limit or skips it "
            f"naming the ulimit -n that would run it ({exc})",
            pytrace=False,
        )


#: Files a library keeps open on purpose, for the life of the process, from its first use on:
#: matplotlib's font cache (``font_manager._get_font``, an lru_cache of FT2Font objects, each
#: holding its font file open).
KEPT_OPEN_BY_LIBRARIES = (".ttf", ".otf", ".ttc", ".afm", ".pfb")


def _kept_open_by_multiprocessing() -> set[int]:
    """The pipe to multiprocessing's resource tracker: started by the first spawned process (the sim
    tier's worker pool) and kept open for the life of this process, by design."""
    from multiprocessing import resource_tracker

    fd = getattr(resource_tracker._resource_tracker, "_fd", None)
    return set() if fd is None else {fd}


def _leaked(before: dict[int, str]) -> dict[int, str]:
    kept = _kept_open_by_multiprocessing()
    return {
        fd: what
        for fd, what in fd_table().items()
        if before.get(fd) != what and fd not in kept and not what.endswith(KEPT_OPEN_BY_LIBRARIES)
    }


@pytest.fixture(autouse=True)
def stock_nofile():
    """Every test under a stock soft ``RLIMIT_NOFILE`` unless it asks for more (``require_fds``)."""
    with stock_nofile_limit():
        yield


@pytest.fixture(autouse=True)
def no_leaked_fds(request):
    """Fail the test that leaves a descriptor (a socket, a pipe, an io_uring ring ...) open.

    Autouse, so set up before the test's other function-scoped fixtures and
    torn down after them: what they close at teardown is not a leak.  Fixtures
    of a wider scope are set up before the snapshot and torn down after the
    check.  A descriptor only an unreachable object still holds is a leak the
    garbage collector would fix late; it is collected once before judging.
    """
    before = fd_table()
    yield
    leaked = _leaked(before)
    if leaked:
        gc.collect()
        leaked = _leaked(before)
    if leaked:
        rings = sum(what == "anon_inode:[io_uring]" for what in leaked.values())
        listed = ", ".join(f"fd {fd} -> {what}" for fd, what in sorted(leaked.items()))
        pytest.fail(
            f"{request.node.nodeid} left {len(leaked)} descriptor(s) open "
            f"({rings} io_uring ring(s)): {listed}",
            pytrace=False,
        )


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
    yield lambda n=1: socketpair_list(n, made)
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


@pytest.fixture(scope="module")
def example_lib(tmp_path_factory) -> Path:
    """The example C backend (examples/c-backend/tr_epoll.c) built once per module that asks for it,
    for the ``cabi:`` test modules; skips without a C compiler."""
    from cabi_helpers import HAVE_CC, build

    if not HAVE_CC:
        pytest.skip("no C compiler: `cc` or `make` is not on PATH")
    return build(tmp_path_factory.mktemp("c-backend"), "tr_epoll")
