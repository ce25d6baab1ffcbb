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


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the (soft, hard) now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # a hard limit past the kernel's nr_open: keep what we have
            return soft, hard
    return resource.getrlimit(resource.RLIMIT_NOFILE)


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
    """Skip the calling test unless ``n`` more descriptors fit under ``RLIMIT_NOFILE``.

    The session has already raised the soft limit to the hard one, so the
    reason names the limit and the ``ulimit -n`` (hard, hence as root or in
    ``/etc/security/limits.conf``) that would run the test.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = len(fd_table()) + n + FD_HEADROOM
    if need > soft:
        pytest.skip(f"needs {need} open files, RLIMIT_NOFILE allows {soft} (hard limit {hard}); "
                    f"run it with a hard limit of at least {need}: ulimit -n {need} (as root, or "
                    f"nofile in /etc/security/limits.conf)")


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
