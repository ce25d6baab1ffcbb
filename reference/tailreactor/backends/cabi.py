"""``cabi:PATH``: a backend in a shared library, through the C ABI of ``tailreactor_backend.h``.

Role
----
Runs a backend written in C, Rust, Go or anything else that exports the
functions of ``conformance/include/tailreactor_backend.h`` (ABI version 1) as
a backend like the shipped ones (:class:`~.base.Backend`): the reactor and the
bench server take it as ``CWIST_REACTOR_BACKEND=cabi:PATH``, and the
conformance suite checks it as ``--backend cabi:PATH`` (through its subclass,
which adds a watchdog on each wait: ``tailreactor_conformance.cabi``).
:class:`CabiBackend` loads the library with ctypes.  The adapter only
translates; every rule is left to the library, so the suite's clauses judge
the C code, not this module:

* **tokens**: the ABI carries 64-bit tokens, the Python contract any object.
  Each arming gets a fresh number (never reused, never 0) and the adapter maps
  it back when the library reports it.  A number the library reports after it
  was reported, disarmed or replaced maps back to the token it stood for (up
  to :data:`RETIRED_KEPT` of them), so a library that reports twice or ignores
  disarm fails the suite's B1 or B3 exactly as a Python backend would; one
  retired longer ago comes back as an :class:`UnknownToken`.
* **errors**: a negative return is ``-errno``.  ``-ESHUTDOWN`` (the backend is
  closed) raises ``RuntimeError`` (B13); any other raises ``OSError`` with that
  errno (``EBADF`` for a closed fd, B16).  A bad direction raises ``ValueError``
  here, before the call, as the Python backends do: it never reaches the
  library.
* **what only the adapter can see** raises :class:`ContractError` naming the
  value (in the suite, in the test that made the call, so its clause fails): a
  negative return outside ``-4095..-1``; a wait that returns more reports than
  its capacity; a report with a token number ``arm`` never gave, ``revents`` 0
  or with a bit outside the ``TR_*`` set (named where poll(2) or epoll has a name for it:
  ``POLLNVAL``, a closed fd polled by number), or ``reserved`` not 0; a flush that
  claims more than two submissions per arm or disarm since the last flush,
  plus one (a replacing arm may submit a cancel and a new poll; one for the
  backend's own wake).  ``tr_backend_create`` returning a positive value is a
  :class:`CabiError`.
* **wait**: the timeout goes over in nanoseconds (``None`` -> -1), and
  ``-EINTR`` is retried with the time left, after Python's signal handlers ran
  (PEP 475).  A signal handler that raises after the library returned loses
  nothing: the reports stay in the adapter's array until they are listed (a
  report's ``revents`` is never 0, and the array is cleared once they are) and
  the next wait returns them.  A call into C cannot be interrupted: a wait
  with no limit may block for good, as a server's should.
* **close** calls ``tr_backend_close`` and keeps the handle, so calls after it
  reach the library (which must refuse them, B13) and a wake racing the close
  is the library's to make harmless; ``tr_backend_destroy`` runs when the
  adapter is garbage-collected.

Capabilities (``tr_backend_capabilities``) become the backend attributes
``ordered`` (``TR_CAP_ORDERED``: the readiness-order claim of clause B9) and
``max_batch`` (the most reports one wait returns, the cap of clause B10;
``None`` for 0: no cap declared, and the adapter then offers an array of
``MAX_BATCH`` reports).  Flag bits the adapter does not know are ignored.  The
backend is named ``cabi:`` and the library's file name without ``.so``
(``cabi:libtr_epoll``).
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

from .base import MAX_BATCH, check_direction, closed_error

__all__ = [
    "PREFIX",
    "ABI_VERSION",
    "CabiError",
    "ContractError",
    "CabiBackend",
    "UnknownToken",
    "is_cabi",
    "library_path",
    "canonical",
    "label",
    "load_library",
]

PREFIX = "cabi:"
HEADER = "conformance/include/tailreactor_backend.h"
#: The TR_BACKEND_ABI_VERSION this adapter speaks.
ABI_VERSION = 1
#: TR_CAP_* flags of the header.
CAP_ORDERED = 0x1
#: How many reported, disarmed or replaced token numbers are still mapped back.
RETIRED_KEPT = 1 << 16
#: Every revents bit of the header (TR_IN, TR_OUT, TR_ERR, TR_HUP, TR_RDHUP).
TR_REVENTS = 0x001 | 0x004 | 0x008 | 0x010 | 0x2000
#: poll(2) and epoll bits outside the TR_* set, named in the error of a report that holds one.
OTHER_BITS = {
    0x002: "POLLPRI",
    0x020: "POLLNVAL",
    0x040: "POLLRDNORM",
    0x080: "POLLRDBAND",
    0x100: "POLLWRNORM",
    0x200: "POLLWRBAND",
    0x400: "POLLMSG",
    1 << 28: "EPOLLEXCLUSIVE",
    1 << 29: "EPOLLWAKEUP",
    1 << 30: "EPOLLONESHOT",
    1 << 31: "EPOLLET",
}
#: What a report with POLLNVAL says, and what the backend does instead (the header's rule).
NVAL_HINT = (
    "POLLNVAL: the fd was closed while armed; drop its armings and the library's watch of it, "
    "or report TR_ERR once, and never poll it again"
)
#: The errno range of a negative return (-4095..-1, as the kernel's).
MAX_ERRNO = 4095


def _other_bits(bits: int) -> str:
    """``0x20 (POLLNVAL: ...)``: the bits, the poll(2) and epoll names of those that have one."""
    names = [NVAL_HINT if bit == 0x020 else name for bit, name in OTHER_BITS.items() if bits & bit]
    return f"{bits:#x} ({'; '.join(names)})" if names else f"{bits:#x}"


class CabiError(ValueError):
    """A ``cabi:`` library that cannot be used: no such file, not loadable, a
    missing symbol or another ABI version (one line: the suite's runner and the
    bench server print it and exit)."""


class ContractError(AssertionError):
    """The library broke a rule the adapter can see in a return value or a report
    (an AssertionError: the test that made the call fails, naming the value)."""


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


def library_path(spec: str) -> Path:
    raw = spec[len(PREFIX) :]
    if not raw:
        raise CabiError("no library path: give cabi:PATH, e.g. cabi:examples/c-backend/libtr_epoll.so")
    return Path(raw).expanduser().resolve()


def canonical(spec: str) -> str:
    """``cabi:`` with an absolute path (the test workers may run elsewhere); other names unchanged."""
    return PREFIX + str(library_path(spec)) if is_cabi(spec) else spec


def label(spec: str) -> str:
    """The column name of ``spec`` in the table: ``cabi:libfoo`` for ``cabi:dir/libfoo.so``."""
    if not is_cabi(spec):
        return spec
    name = Path(spec[len(PREFIX) :]).name
    return PREFIX + (name.split(".so", 1)[0] or name)


def load_library(path: Path) -> ctypes.CDLL:
    """Load ``path`` and declare the ABI's functions on it.

    Raises :class:`CabiError` (one line) if the file is missing or cannot be
    loaded, lacks a function of the header, or reports another ABI version.
    """
    if path.is_dir():
        raise CabiError(
            f"{path} is a directory, not a shared library (accepted: cabi:PATH to a "
            f"shared library that exports the functions of {HEADER})"
        )
    if not path.is_file():
        raise CabiError(
            f"no such file {path} (accepted: cabi:PATH to a shared library that exports "
            f"the functions of {HEADER})"
        )
    try:
        lib = ctypes.CDLL(str(path))  # CDLL releases the GIL around each call: wake() from any thread
    except OSError as exc:
        raise CabiError(f"cannot be loaded: {exc}") from None
    missing = [name for name in SIGNATURES if not hasattr(lib, name)]
    if missing:
        raise CabiError(
            f"does not export {', '.join(missing)} (a backend exports every function of "
            f"{HEADER}, ABI version {ABI_VERSION})"
        )
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    version = lib.tr_backend_abi_version()
    if version != ABI_VERSION:
        raise CabiError(
            f"ABI version {version}, but this suite speaks ABI version {ABI_VERSION} "
            f"(rebuild it against {HEADER})"
        )
    return lib


class CabiBackend:
    """A backend in a shared library (see the module docstring).  ``path``: the library."""

    #: How a C library claims each capability, as a skip reason names it: (the claim, where).
    capability_spelling = {
        "ordered": ("TR_CAP_ORDERED", "a flag tr_backend_capabilities sets, tailreactor_backend.h")
    }

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = label(PREFIX + str(self.path))
        lib = self._lib = load_library(self.path)
        call = self.call_library
        handle = _P()
        rc = call(self.name, lib.tr_backend_create, ctypes.byref(handle))
        if rc > 0:
            raise CabiError(f"tr_backend_create returned {rc} (accepted: 0, or a negative errno)")
        self._check("tr_backend_create", rc)
        if not handle.value:
            raise CabiError("tr_backend_create returned 0 but no handle")
        self._h = handle
        self._finalizer = weakref.finalize(self, call, self.name, lib.tr_backend_destroy, handle)
        caps = Capabilities()
        try:
            self._call(lib.tr_backend_capabilities, ctypes.byref(caps))
        except BaseException:
            self._finalizer()
            raise
        self.ordered = bool(caps.flags & CAP_ORDERED)
        self.max_batch = caps.max_batch or None  # 0: no cap declared
        self._events = (Event * (caps.max_batch or MAX_BATCH))()
        #: The ``capacity`` each ``tr_backend_wait`` gets (any value >= 1 is the caller's to
        #: choose).  B3 and B5 lower it to 1, so that a library that collects more reports
        #: than it may return holds some it has not delivered.
        self.wait_capacity = len(self._events)
        self._ids = itertools.count(1)
        self._next = 1  # the next token number arm gives
        self._live: dict[int, tuple[int, int, object]] = {}  # number -> (fd, direction, token)
        self._armed: dict[tuple[int, int], int] = {}  # (fd, direction) -> number
        self._retired: OrderedDict[int, object] = OrderedDict()
        self._reported: list[tuple[object, int]] = []  # taken by a wait cut short, not yet returned
        self._calls_since_flush = 0  # arms and disarms: what a flush can have submitted

    @staticmethod
    def call_library(name: str, fn, *args):
        """``fn(*args)``: one call into the library, for the backend named ``name``.  Every call
        the adapter makes goes through here, destroy's at collection too (a static method: the
        finalizer must not hold the backend).  Python-only machinery: the conformance suite
        bounds each call with a watchdog, since a call into C cannot be interrupted."""
        return fn(*args)

    def _call(self, fn, *args) -> int:
        """``fn(handle, *args)`` through :meth:`call_library`, its return checked."""
        return self._check(fn.__name__, self.call_library(self.name, fn, self._h, *args))

    def _check(self, call: str, rc: int) -> int:
        if rc >= 0:
            return rc
        err = -rc
        if err > MAX_ERRNO:
            raise ContractError(
                f"{self.name}: {call} returned {rc}, not a negative errno "
                f"(accepted: >= 0, or -{MAX_ERRNO}..-1)"
            )
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
        if token is not self._retired:
            return token
        if not 0 < number < self._next:
            raise ContractError(f"{self.name}: tr_backend_wait reported token {number}, never given by arm")
        return UnknownToken(number)  # given, but retired longer ago than RETIRED_KEPT numbers

    def _listed(self, ev: Event) -> tuple[object, int]:
        """One report as ``(token, revents)``; a report outside the ABI raises :class:`ContractError`."""
        if ev.revents == 0 or ev.revents & ~TR_REVENTS or ev.reserved:
            what = (
                "revents 0 (a report has at least one TR_* bit)"
                if not ev.revents
                else f"revents {ev.revents:#x}, bits {_other_bits(ev.revents & ~TR_REVENTS)} outside the "
                f"TR_* set {TR_REVENTS:#x}"
                if ev.revents & ~TR_REVENTS
                else f"reserved {ev.reserved} (accepted: 0)"
            )
            raise ContractError(f"{self.name}: tr_backend_wait reported token {ev.token} with {what}")
        return self._token(ev.token), ev.revents

    # -- the Backend methods ----------------------------------------------------
    def arm(self, fd: int, direction: int, token: object) -> None:
        check_direction(direction)
        number = next(self._ids)
        self._next = number + 1
        self._call(self._lib.tr_backend_arm, fd, direction, number)
        self._calls_since_flush += 1
        old = self._armed.get((fd, direction))
        if old is not None:
            self._retire(old)  # replaced
        self._live[number] = (fd, direction, token)
        self._armed[(fd, direction)] = number

    def disarm(self, fd: int, direction: int) -> None:
        check_direction(direction)
        self._call(self._lib.tr_backend_disarm, fd, direction)
        self._calls_since_flush += 1
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
            out.append(self._listed(ev))
        ctypes.memset(events, 0, n * ctypes.sizeof(Event))  # a signal before it: listed twice at worst
        self._reported = []
        return out

    def _wait(self, timeout_s: float | None) -> int:
        """``tr_backend_wait`` into the array, retried on EINTR; the number of reports."""
        # Up to INT64_MAX (the header's range): a later timer than that is past any wait.
        timeout_ns = -1 if timeout_s is None else min(max(0, math.ceil(timeout_s * 1e9)), 2**63 - 1)
        deadline = None if timeout_ns < 0 else time.monotonic_ns() + timeout_ns
        capacity = max(1, min(self.wait_capacity, len(self._events)))
        while True:
            rc = self._call_wait(timeout_ns, capacity)
            if rc > capacity:
                raise ContractError(
                    f"{self.name}: tr_backend_wait returned {rc} reports, more than its capacity {capacity}"
                )
            if rc != -errno.EINTR:
                return self._check("tr_backend_wait", rc)
            # PEP 475: Python's signal handlers have run; retry with the time left.
            if deadline is not None:
                timeout_ns = max(0, deadline - time.monotonic_ns())

    def _call_wait(self, timeout_ns: int, capacity: int) -> int:
        """One ``tr_backend_wait`` into the array (the conformance suite counts what each returns)."""
        return self.call_library(
            self.name, self._lib.tr_backend_wait, self._h, timeout_ns, self._events, capacity
        )

    def flush(self) -> int:
        n = self._call(self._lib.tr_backend_flush)
        calls, self._calls_since_flush = self._calls_since_flush, 0
        if n > 2 * calls + 1:
            raise ContractError(
                f"{self.name}: tr_backend_flush returned {n}, but {calls} arms and "
                f"disarms were made since the last flush (accepted: at most "
                f"{2 * calls + 1}: two submissions per arm or disarm, as an arm that "
                f"replaces one may submit a cancel and a new poll, plus one of the "
                f"backend's own)"
            )
        return n

    def wake(self) -> None:
        self._call(self._lib.tr_backend_wake)

    def close(self) -> None:
        self._call(self._lib.tr_backend_close)
