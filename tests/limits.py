"""The suite's limits and descriptors: ``RLIMIT_NOFILE``, ``RLIMIT_MEMLOCK``, what is open.

A module of its own, not ``conftest``: ``from conftest import ...`` names
whichever conftest was imported last (``tests/ci`` has one too).
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket

import pytest

#: The soft ``RLIMIT_NOFILE`` a stock login gives (systemd's and pam_limits' default): every test runs
#: under it unless it asks for more with :func:`require_fds`, so a test that opens more without
#: saying so fails wherever it runs, as root too, instead of only on the machines of normal users.
STOCK_NOFILE = 1024

_session_nofile: int | None = None  # the soft limit the session raised to (raise_nofile_limit)


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the (soft, hard) now in force."""
    global _session_nofile
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # a hard limit past the kernel's nr_open: keep what we have
            pass
    _session_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return resource.getrlimit(resource.RLIMIT_NOFILE)


@contextlib.contextmanager
def stock_nofile_limit():
    """Run the block under a soft ``RLIMIT_NOFILE`` of at most :data:`STOCK_NOFILE`; restore it after
    (to what :func:`require_fds` may have raised it, or not: the limit on entry)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft > STOCK_NOFILE:
        resource.setrlimit(resource.RLIMIT_NOFILE, (STOCK_NOFILE, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def fd_table() -> dict[int, str]:
    """This process's open descriptors: number -> what ``/proc/self/fd`` links it to."""
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the directory listdir read, closed by now
            pass
    return fds


#: Descriptors a test may need beyond its own: pytest's capture, xdist's channel, imports, hypothesis.
FD_HEADROOM = 64


def require_fds(n: int) -> None:
    """Skip the calling test unless ``n`` more descriptors fit under ``RLIMIT_NOFILE``; if they do,
    lift the test's soft limit (the stock one) to what the session raised it to.

    The session has already raised the soft limit to the hard one, so the
    reason names the limit and the ``ulimit -n`` (hard, hence as root or in
    ``/etc/security/limits.conf``) that would run the test.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    allowed = max(soft, _session_nofile or soft)
    need = len(fd_table()) + n + FD_HEADROOM
    if need > allowed:
        pytest.skip(
            f"needs {need} open files, RLIMIT_NOFILE allows {allowed} (hard limit {hard}); "
            f"run it with a hard limit of at least {need}: ulimit -n {need} (as root, or "
            f"nofile in /etc/security/limits.conf)"
        )
    if soft < allowed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (allowed, hard))


def memlock_limit_text() -> str:
    """``RLIMIT_MEMLOCK`` in KiB, as ``ulimit -l`` shows it (``unlimited`` when it is)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"


def socketpair_list(n: int, made: list[socket.socket]) -> list[tuple[socket.socket, socket.socket]]:
    pairs = []
    for _ in range(n):
        a, b = socket.socketpair()
        made.extend((a, b))
        a.setblocking(False)
        b.setblocking(False)
        pairs.append((a, b))
    return pairs


@contextlib.contextmanager
def open_socketpairs(n: int = 1):
    """``with open_socketpairs(n) as pairs``: (a, b) non-blocking connected pairs, closed on exit.

    For a Hypothesis test: a function-scoped fixture lives across all its
    examples, so pairs from ``socketpairs`` would pile up until the last one.
    """
    made: list[socket.socket] = []
    try:
        yield socketpair_list(n, made)
    finally:
        for s in made:
            s.close()
