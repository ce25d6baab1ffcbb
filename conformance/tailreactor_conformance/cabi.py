"""``cabi:PATH``: a backend in a shared library, through the C ABI of ``tailreactor_backend.h``.

Role
----
Lets the suite check a backend written in C, Rust, Go or anything else that
exports the functions of ``conformance/include/tailreactor_backend.h``
(ABI version 1).  :class:`CabiBackend` loads the library with ctypes and is a
backend like the shipped ones (:class:`tailreactor.backends.base.Backend`),
so the backend clauses run on it directly and the reactor and HTTP clauses run
through the Python reference reactor on top of it.  The adapter only
translates; every rule is left to the library, so the clauses judge the C
code, not this module:

* **tokens**: the ABI carries 64-bit tokens, the Python contract any object.
  Each arming gets a fresh number (never reused, never 0) and the adapter maps
  it back when the library reports it.  A number the library reports after it
  was reported, disarmed or replaced maps back to the token it stood for (up
  to :data:`RETIRED_KEPT` of them), so a library that reports twice or ignores
  disarm fails B1 or B3 exactly as a Python backend would; a number it was
  never given comes back as an :class:`UnknownToken`.
* **errors**: a negative return is ``-errno``.  ``-ESHUTDOWN`` (the backend is
  closed) raises ``RuntimeError`` (B13); any other raises ``OSError`` with that
  errno (``EBADF`` for a closed fd, B16).  A bad direction raises ``ValueError``
  here, before the call, as the Python backends do.
* **wait**: the timeout goes over in nanoseconds (``None`` -> -1), and
  ``-EINTR`` is retried with the time left, after Python's signal handlers ran
  (PEP 475).  A signal handler that raises after the library returned loses
  nothing: the reports stay in the adapter's array until they are listed (a
  report's ``revents`` is never 0, and the array is cleared once they are) and
  the next wait returns them.
* **close** calls ``tr_backend_close`` and keeps the handle, so calls after it
  reach the library (which must refuse them, B13) and a wake racing the close
  is the library's to make harmless; ``tr_backend_destroy`` runs when the
  adapter is garbage-collected.

Capabilities (``tr_backend_capabilities``) become the attributes that
``tailreactor.backends.base`` names: ``ordered`` (``TR_CAP_ORDERED``:
readiness order, clause B9) and ``max_batch`` (the most reports one wait
returns, ``None`` for 0: no cap declared; the adapter then offers an array of
``MAX_BATCH`` reports).  Flag bits the adapter does not know are ignored.  The table names the backend ``cabi:`` and the
library's file name without ``.so`` (``cabi:libtr_epoll``).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import math
import os
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from tailreactor.backends.base import MAX_BATCH, check_direction, closed_error

__all__ = ["PREFIX", "ABI_VERSION", "CabiError", "CabiBackend", "UnknownToken", "create_backend",
           "is_cabi", "canonical", "label", "load_library"]

PREFIX = "cabi:"
HEADER = "conformance/include/tailreactor_backend.h"
#: The TR_BACKEND_ABI_VERSION this adapter speaks.
ABI_VERSION = 1
#: TR_CAP_* flags of the header.
CAP_ORDERED = 0x1
#: How many reported, disarmed or replaced token numbers are still mapped back.
RETIRED_KEPT = 1 << 16


class CabiError(ValueError):
    """A ``cabi:`` library that cannot be used: no such file, not loadable, a
    missing symbol or another ABI version (the runner prints it, exit 2)."""


class Event(ctypes.Structure):
    """``tr_event``: one report of ``tr_backend_wait``."""

    _fields_ = [("token", ctypes.c_uint64), ("revents", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


class Capabilities(ctypes.Structure):
    """``tr_capabilities``."""

    _fields_ = [("flags", ctypes.c_uint32), ("max_batch", ctypes.c_uint32)]


_P = ctypes.c_void_p
#: Every function of the ABI: (restype, argtypes).
SIGNATURES = {
    "tr_backend_abi_version": (ctypes.c_uint32, []),
    "tr_backend_create": (ctypes.c_int, [ctypes.POINTER(_P)]),
    "tr_backend_capabilities": (ctypes.c_int, [_P, ctypes.POINTER(Capabilities)]),
    "tr_backend_arm": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, ctypes.c_uint64]),
    "tr_backend_disarm": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int]),
    "tr_backend_wait": (ctypes.c_int, [_P, ctypes.c_int64, ctypes.POINTER(Event), ctypes.c_uint32]),
    "tr_backend_flush": (ctypes.c_int, [_P]),
    "tr_backend_wake": (ctypes.c_int, [_P]),
    "tr_backend_close": (ctypes.c_int, [_P]),
    "tr_backend_destroy": (None, [_P]),
}


@dataclass(frozen=True)
class UnknownToken:
    """A token number the library reported but was never given by ``arm``."""

    value: int


def is_cabi(spec: str) -> bool:
    return spec.startswith(PREFIX)


def _path(spec: str) -> Path:
    raw = spec[len(PREFIX):]
    if not raw:
        raise CabiError("no library path: give cabi:PATH, e.g. cabi:examples/c-backend/libtr_epoll.so")
    return Path(raw).expanduser().resolve()


def canonical(spec: str) -> str:
    """``cabi:`` with an absolute path (the test workers may run elsewhere); other names unchanged."""
    return PREFIX + str(_path(spec)) if is_cabi(spec) else spec


def label(spec: str) -> str:
    """The column name of ``spec`` in the table: ``cabi:libfoo`` for ``cabi:dir/libfoo.so``."""
    if not is_cabi(spec):
        return spec
    name = Path(spec[len(PREFIX):]).name
    return PREFIX + (name.split(".so", 1)[0] or name)


def load_library(path: Path) -> ctypes.CDLL:
    """Load ``path`` and declare the ABI's functions on it.

    Raises :class:`CabiError` (one line) if the file is missing or cannot be
    loaded, lacks a function of the header, or reports another ABI version.
    """
    if not path.is_file():
        raise CabiError(f"no such file {path} (accepted: cabi:PATH to a shared library that exports "
                        f"the functions of {HEADER})")
    try:
        lib = ctypes.CDLL(str(path))  # CDLL releases the GIL around each call: wake() from any thread
    except OSError as exc:
        raise CabiError(f"cannot be loaded: {exc}") from None
    missing = [name for name in SIGNATURES if not hasattr(lib, name)]
    if missing:
        raise CabiError(f"does not export {', '.join(missing)} (a backend exports every function of "
                        f"{HEADER}, ABI version {ABI_VERSION})")
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    version = lib.tr_backend_abi_version()
    if version != ABI_VERSION:
        raise CabiError(f"ABI version {version}, but this suite speaks ABI version {ABI_VERSION} "
                        f"(rebuild it against {HEADER})")
    return lib


class CabiBackend:
    """A backend in a shared library (see the module docstring).  ``path``: the library."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = label(PREFIX + str(self.path))
        lib = self._lib = load_library(self.path)
        handle = _P()
        self._check("tr_backend_create", lib.tr_backend_create(ctypes.byref(handle)))
        if not handle.value:
            raise CabiError("tr_backend_create returned 0 but no handle")
        self._h = handle
        self._finalizer = weakref.finalize(self, lib.tr_backend_destroy, handle)
        caps = Capabilities()
        try:
            self._check("tr_backend_capabilities", lib.tr_backend_capabilities(handle, ctypes.byref(caps)))
        except BaseException:
            self._finalizer()
            raise
        self.ordered = bool(caps.flags & CAP_ORDERED)
        self.max_batch = caps.max_batch or None  # 0: no cap declared
        self._events = (Event * (caps.max_batch or MAX_BATCH))()
        self._ids = itertools.count(1)
        self._live: dict[int, tuple[int, int, object]] = {}  # number -> (fd, direction, token)
        self._armed: dict[tuple[int, int], int] = {}         # (fd, direction) -> number
        self._retired: OrderedDict[int, object] = OrderedDict()
        self._reported: list[tuple[object, int]] = []  # taken by a wait cut short, not yet returned

    def _check(self, call: str, rc: int) -> int:
        if rc >= 0:
            return rc
        err = -rc
        if err == errno.ESHUTDOWN:
            raise closed_error(self.name)
        raise OSError(err, f"{self.name}: {call} failed: {os.strerror(err)}")

    def _retire(self, number: int) -> None:
        fd, direction, token = self._live.pop(number)
        if self._armed.get((fd, direction)) == number:
            del self._armed[(fd, direction)]
        self._retired[number] = token
        if len(self._retired) > RETIRED_KEPT:
            self._retired.popitem(last=False)

    def _token(self, number: int) -> object:
        if number in self._live:
            token = self._live[number][2]
            self._retire(number)
            return token
        token = self._retired.get(number, self._retired)
        return UnknownToken(number) if token is self._retired else token

    # -- the Backend methods ----------------------------------------------------
    def arm(self, fd: int, direction: int, token: object) -> None:
        check_direction(direction)
        number = next(self._ids)
        self._check("tr_backend_arm", self._lib.tr_backend_arm(self._h, fd, direction, number))
        old = self._armed.get((fd, direction))
        if old is not None:
            self._retire(old)  # replaced
        self._live[number] = (fd, direction, token)
        self._armed[(fd, direction)] = number

    def disarm(self, fd: int, direction: int) -> None:
        check_direction(direction)
        self._check("tr_backend_disarm", self._lib.tr_backend_disarm(self._h, fd, direction))
        number = self._armed.get((fd, direction))
        if number is not None:
            self._retire(number)

    def wait(self, timeout_s: float | None) -> list[tuple[object, int]]:
        # The array is the record until its reports are listed: a signal handler
        # that raises after the library returned, or while they are listed,
        # leaves them there and this wait returns them (revents is never 0, so
        # the listed ones are the leading entries that are not zero).
        out = self._reported  # listed and the array cleared, but never returned
        events = self._events
        if out or events[0].revents:
            n = 0 if out else next((i for i, ev in enumerate(events) if not ev.revents), len(events))
        else:
            n = self._wait(timeout_s)
        for ev in events[:n]:
            out.append((self._token(ev.token), ev.revents))
        ctypes.memset(events, 0, n * ctypes.sizeof(Event))  # a signal before it: listed twice at worst
        self._reported = []
        return out

    def _wait(self, timeout_s: float | None) -> int:
        """``tr_backend_wait`` into the array, retried on EINTR; the number of reports."""
        timeout_ns = -1 if timeout_s is None else max(0, math.ceil(timeout_s * 1e9))
        deadline = None if timeout_ns < 0 else time.monotonic_ns() + timeout_ns
        while True:
            rc = self._lib.tr_backend_wait(self._h, timeout_ns, self._events, len(self._events))
            if rc != -errno.EINTR:
                return min(self._check("tr_backend_wait", rc), len(self._events))
            # PEP 475: Python's signal handlers have run; retry with the time left.
            if deadline is not None:
                timeout_ns = max(0, deadline - time.monotonic_ns())

    def flush(self) -> int:
        return self._check("tr_backend_flush", self._lib.tr_backend_flush(self._h))

    def wake(self) -> None:
        self._check("tr_backend_wake", self._lib.tr_backend_wake(self._h))

    def close(self) -> None:
        self._check("tr_backend_close", self._lib.tr_backend_close(self._h))


def create_backend(name: str):
    """``cabi:PATH`` -> a :class:`CabiBackend`; any other name -> ``tailreactor.backends.create_backend``."""
    if is_cabi(name):
        return CabiBackend(_path(name))
    from tailreactor.backends import create_backend as create

    return create(name)
