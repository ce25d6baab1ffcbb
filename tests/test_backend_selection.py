"""Backend selection: auto falls back with a reason, explicit io_uring fails clearly."""

from __future__ import annotations

import errno
import logging

import pytest
import uring_api

from tailreactor import Config, IoUringUnavailable, Reactor, UnknownBackend, create_backend
from tailreactor.backends import EpollBackend


@pytest.fixture
def io_uring_setup_fails(monkeypatch):
    """Make io_uring_setup fail the way seccomp or io_uring_disabled=2 does (EPERM)."""

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(uring_api, "Ring", refuse)


@pytest.mark.parametrize("name", ["epoll", pytest.param("io_uring", marks=pytest.mark.io_uring), "selectors"])
def test_shipped_backends_report_their_name(name):
    b = create_backend(name)
    try:
        assert b.name == name
    finally:
        b.close()


@pytest.mark.io_uring
def test_auto_prefers_io_uring_here():
    b = create_backend("auto")
    try:
        assert b.name == "io_uring"
    finally:
        b.close()


def test_explicit_io_uring_unavailable_is_a_clear_error(io_uring_setup_fails):
    with pytest.raises(IoUringUnavailable) as info:
        create_backend("io_uring")
    msg = str(info.value)
    assert info.value.errno == errno.EPERM
    assert "EPERM" in msg and "io_uring_disabled=" in msg and "seccomp" in msg
    with pytest.raises(IoUringUnavailable):
        Reactor(config=Config.default().replace(backend="io_uring"))


def test_auto_falls_back_to_epoll_and_logs_one_line(io_uring_setup_fails, caplog):
    with caplog.at_level(logging.WARNING, logger="tailreactor"):
        r = Reactor(config=Config.default())
    try:
        assert r.backend_name == "epoll"
        assert isinstance(r.backend, EpollBackend)
    finally:
        r.close()
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 1 and "falling back to epoll" in lines[0] and "EPERM" in lines[0]


def test_unknown_backend_lists_accepted_names():
    with pytest.raises(UnknownBackend) as info:
        create_backend("bogus")
    assert "'bogus'" in str(info.value) and "epoll" in str(info.value) and "io_uring" in str(info.value)


def test_module_factory_backend():
    b = create_backend("tailreactor.backends.epoll:EpollBackend")
    try:
        assert isinstance(b, EpollBackend)
    finally:
        b.close()
    with pytest.raises(UnknownBackend, match="cannot be loaded"):
        create_backend("no_such_module:Factory")


@pytest.mark.parametrize("name", ["epoll", pytest.param("io_uring", marks=pytest.mark.io_uring), "selectors"])
def test_closed_backend_raises_on_use_but_wake_and_close_are_harmless(name):
    b = create_backend(name)
    b.close()
    for call in (lambda: b.wait(0), lambda: b.arm(0, 1, None), lambda: b.disarm(0, 1), b.flush):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    b.wake()  # another thread may race a close: ignored
    b.close()  # idempotent


_ODD_BACKENDS = """
def returns_none():
    return None


class NoWake:
    name = "nowake"
    closed = False

    def arm(self, fd, direction, token): pass
    def disarm(self, fd, direction): pass
    def wait(self, timeout_s): return []
    def flush(self): return 0
    def close(self): NoWake.closed = True
"""


def test_a_factory_that_returns_no_backend_is_named_with_what_is_missing(tmp_path, monkeypatch):
    (tmp_path / "oddbe.py").write_text(_ODD_BACKENDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        UnknownBackend,
        match=r"'oddbe:returns_none'.* returned None, not a backend: "
        r"no arm\(\), disarm\(\), wait\(\), flush\(\), wake\(\), close\(\)",
    ):
        create_backend("oddbe:returns_none")
    with pytest.raises(UnknownBackend, match=r"returned a NoWake, not a backend: no wake\(\)"):
        create_backend("oddbe:NoWake")
    import oddbe

    assert oddbe.NoWake.closed  # what it opened is released


@pytest.mark.parametrize(
    "spec", ["./oddbe.py:backend", "/tmp/oddbe.py:backend", "oddbe.py:backend", ".oddbe:backend"]
)
def test_a_file_path_instead_of_a_module_name_gets_a_hint(spec):
    with pytest.raises(UnknownBackend, match=r"a module name, not a file path"):
        create_backend(spec)
