"""Backend registry and selection (``CWIST_REACTOR_BACKEND``).

Role
----
Maps a backend name to a constructor and implements the ``auto`` rule:
try io_uring, fall back to epoll and log one line with the reason.  An
explicit ``io_uring`` that cannot start raises :class:`IoUringUnavailable`;
it never silently measures epoll instead.

A third-party backend is named ``module:factory``; the factory takes no
arguments and returns an object with the :class:`~.base.Backend` methods.
"""

from __future__ import annotations

import importlib
import logging

from .base import ERR, HUP, IN, OUT, RDHUP, READ, WRITE, Backend
from .epoll import EpollBackend
from .io_uring import IoUringBackend, IoUringUnavailable

__all__ = [
    "Backend", "EpollBackend", "IoUringBackend", "IoUringUnavailable", "UnknownBackend",
    "READ", "WRITE", "IN", "OUT", "ERR", "HUP", "RDHUP", "SHIPPED", "create_backend",
]

log = logging.getLogger("tailreactor")


class UnknownBackend(ValueError):
    """The backend name is neither shipped nor an importable ``module:factory``."""


def _selectors_backend():
    from .selectors_backend import SelectorsBackend
    return SelectorsBackend()


#: Shipped backends by name.
SHIPPED = {
    "io_uring": IoUringBackend,
    "epoll": EpollBackend,
    "selectors": _selectors_backend,
}


def create_backend(name: str = "auto"):
    """Create a backend by name.

    ``name``: ``auto``, a key of :data:`SHIPPED`, or ``module:factory``.
    Returns the backend.  Raises :class:`IoUringUnavailable` for an explicit
    ``io_uring`` that cannot start, :class:`UnknownBackend` for anything else
    that cannot be resolved.
    """
    if name == "auto":
        try:
            return IoUringBackend()
        except IoUringUnavailable as exc:
            log.warning("CWIST_REACTOR_BACKEND=auto: falling back to epoll (%s)", exc.reason)
            return EpollBackend()
    factory = SHIPPED.get(name)
    if factory is not None:
        return factory()
    if ":" in name:
        mod_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as exc:
            raise UnknownBackend(f"backend {name!r} cannot be loaded: {exc}") from None
        return factory()
    raise UnknownBackend(
        f"unknown backend {name!r}: accepted auto, {', '.join(SHIPPED)}, or module:factory")
