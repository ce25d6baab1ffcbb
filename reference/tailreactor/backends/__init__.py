"""Backend registry and selection (``CWIST_REACTOR_BACKEND``).

Role
----
Maps a backend name to a constructor and implements the ``auto`` rule:
try io_uring, fall back to epoll and log one line with the reason.  An
explicit ``io_uring`` that cannot start raises :class:`IoUringUnavailable`;
it never silently measures epoll instead.

A third-party backend is named ``module:factory``; the factory takes no
arguments and returns an object with the :class:`~.base.Backend` methods.
A backend in a shared library (C, Rust, Go) is named ``cabi:PATH``: the C ABI
of ``conformance/include/tailreactor_backend.h``, loaded by :mod:`.cabi`.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable

from .base import ERR, HUP, IN, OUT, RDHUP, READ, WRITE, Backend
from .epoll import EpollBackend
from .io_uring import IoUringBackend, IoUringUnavailable

__all__ = [
    "Backend",
    "EpollBackend",
    "IoUringBackend",
    "IoUringUnavailable",
    "UnknownBackend",
    "READ",
    "WRITE",
    "IN",
    "OUT",
    "ERR",
    "HUP",
    "RDHUP",
    "SHIPPED",
    "create_backend",
    "io_uring_refused",
]

log = logging.getLogger("tailreactor")


class UnknownBackend(ValueError):
    """The backend name is neither shipped nor an importable ``module:factory``."""


def _selectors_backend() -> Backend:
    from .selectors_backend import SelectorsBackend

    return SelectorsBackend()


#: Shipped backends by name.
SHIPPED: dict[str, Callable[[], Backend]] = {
    "io_uring": IoUringBackend,
    "epoll": EpollBackend,
    "selectors": _selectors_backend,
}


def io_uring_refused() -> str | None:
    """None if this process can set up an io_uring ring, else why not (one line naming the errno)."""
    try:
        IoUringBackend().close()
    except IoUringUnavailable as exc:
        return str(exc)
    return None


#: What a backend must have (:class:`~tailreactor.backends.base.Backend`).
BACKEND_METHODS = ("arm", "disarm", "wait", "flush", "wake", "close")


def import_factory(spec: str):
    """Import ``module:factory`` and return the attribute.

    Raises ``ValueError`` with one line: not ``module:factory``, a file path
    where a module name belongs, or why the import or attribute failed.
    """
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ValueError("not module:factory")
    if "/" in mod_name or mod_name.endswith(".py") or mod_name.startswith("."):
        stem = os.path.basename(mod_name).removesuffix(".py").lstrip(".") or "module"
        raise ValueError(
            f"{mod_name!r} is a file path; give a module name, not a file path (run from "
            f"its directory or put that on PYTHONPATH, then {stem}:{attr})"
        )
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot be loaded: {exc}") from None


def missing_methods(obj, names) -> list[str]:
    """The names in ``names`` that ``obj`` has no callable attribute for."""
    return [n for n in names if not callable(getattr(obj, n, None))]


def describe(obj) -> str:
    """``None`` or ``a <TypeName>`` (``an`` before a vowel), for error messages."""
    if obj is None:
        return "None"
    name = type(obj).__name__
    return f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"


def create_backend(name: str = "auto", *, ring_entries: int | None = None):
    """Create a backend by name.

    ``name``: ``auto``, a key of :data:`SHIPPED`, or ``module:factory``.
    ``ring_entries``: the io_uring ring's size (``CWIST_URING_ENTRIES``;
    None: :data:`io_uring.DEFAULT_ENTRIES`), for ``auto`` and ``io_uring``.
    Returns the backend.  Raises :class:`IoUringUnavailable` for an explicit
    ``io_uring`` that cannot start, :class:`UnknownBackend` for anything else
    that cannot be resolved.
    """
    ring = {} if ring_entries is None else {"entries": ring_entries}
    if name == "auto":
        try:
            return IoUringBackend(**ring)
        except IoUringUnavailable as exc:
            log.warning("CWIST_REACTOR_BACKEND=auto: falling back to epoll (%s)", exc.reason)
            return EpollBackend()
    if name == "io_uring":
        return IoUringBackend(**ring)
    factory = SHIPPED.get(name)
    if factory is not None:
        return factory()
    if name.startswith("cabi:"):
        from .cabi import CabiBackend, CabiError, library_path

        try:
            return CabiBackend(library_path(name))
        except (CabiError, OSError) as exc:
            raise UnknownBackend(f"backend {name!r}: {exc}") from None
    if ":" in name:
        try:
            factory = import_factory(name)
        except ValueError as exc:
            raise UnknownBackend(f"backend {name!r}: {exc}") from None
        backend = factory()
        missing = missing_methods(backend, BACKEND_METHODS)
        if missing:
            if callable(getattr(backend, "close", None)):
                backend.close()  # release what it opened
            raise UnknownBackend(
                f"backend {name!r}: its factory returned {describe(backend)}, not a backend: no "
                f"{', '.join(m + '()' for m in missing)} (a backend has {', '.join(BACKEND_METHODS)}: "
                f"tailreactor.backends.base.Backend)"
            )
        return backend
    raise UnknownBackend(
        f"unknown backend {name!r}: accepted auto, {', '.join(SHIPPED)}, module:factory or cabi:PATH"
    )
