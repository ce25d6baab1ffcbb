"""The backend interface: what the reactor needs from epoll, io_uring or any other poller.

Role
----
A backend only knows file descriptors, directions and opaque tokens.  It arms
one-shot readiness interest, reports what became ready, can be woken from
another thread, and can be closed.  Everything above that -- timers, posts,
stamps, the dispatch policy -- lives in the reactor and is shared by every
backend, so a policy measured on epoll is the same code as on io_uring.

Contract (the conformance suite checks every point; see docs/en/conformance.md)
-----------------------------------------------------------------------------
* ``arm(fd, direction, token)``: one-shot interest in ``READ`` or ``WRITE`` on
  ``fd``.  When the fd becomes ready (or is ready already), ``wait`` reports
  ``(token, revents)`` exactly once; the interest is then gone until armed
  again (CWIST's one-shot model; multishot was rejected there because a
  persistent poll can fire into a recycled slot).  Arming a direction that is
  already armed replaces its token.  A closed or invalid fd raises ``OSError``
  (``EBADF``) from ``arm``; a backend may skip that check in ``rearm``, and
  for the re-arm of a direction its latest ``wait`` reported when a closed fd
  still fails later (io_uring: ERR) -- the check would cost a syscall per
  request.
* ``disarm(fd, direction)``: after it returns, the token armed for that
  direction is never reported by a later ``wait``.  Disarming what is not armed
  reports nothing; the reactor calls it before an fd is closed even when the
  token was already reported, so a backend that keeps a registration across
  arms (epoll) drops it there.
* ``wait(timeout_s)``: block up to ``timeout_s`` seconds (``None`` = no limit,
  ``0`` = poll) and return a list of ``(token, revents)``, possibly empty.
  Any ``timeout_s`` up to 2**63 ns (about 292 years: the reactor passes the
  time to its next timer as is) is accepted, never refused; past what the
  poller takes it may be clamped (``WAIT_MAX_S``) and that wait returns
  nothing at its end, the reactor waits again.  HUP
  and ERR are reported to the READ token (and to a WRITE token) so EOF reaches
  the read callback.  A backend may bound the batch size; what it does not
  return now it returns in a later wait (nothing starves).
* ``rearm(fd, direction, token)`` (optional): the same as ``arm``; the
  reactor calls it instead of ``arm`` only from inside the callback of an
  event reported for ``fd``, so a backend may skip work there (epoll keeps
  the registration and stores the token).  Usually the latest ``wait``
  reported it; an event carried over from a round cut short (clause R21)
  runs after a later wait, when another callback may have closed the fd and
  its number been reused, so the skip is safe only for a report of the
  latest wait (epoll checks that).  Without it the reactor calls ``arm``.
* ``harvest(max_events)`` (optional): take what is ready *now*, without
  blocking, for the round in progress (``CWIST_REACTOR_HARVEST_US``).  It
  makes queued arms visible first (as ``flush``), then reports as ``wait``
  does -- each armed token once, then forgotten, so it is not in the next
  wait's batch -- but at most ``max_events`` reports; what it leaves, and any
  wake-up, the next ``wait`` returns.  Its reports belong to the round of the
  latest ``wait``: the reactor may call ``rearm`` from their callbacks.  A
  backend without it is never harvested (the knob does nothing on it).
* ``flush()``: make queued arms visible to the kernel now; returns how many
  were submitted (0 for backends that arm synchronously).
* ``wake()``: thread-safe; makes a blocked or the next ``wait`` return soon.
* ``close()``: releases kernel resources; a later ``arm``, ``disarm``, ``wait``
  or ``flush`` raises ``RuntimeError``.  ``wake`` and ``close`` stay harmless
  (a wake from another thread may race the close).

``revents`` uses the portable bits below (values equal to ``select.POLL*`` so
io_uring poll results and epoll events map without translation).

Capabilities (what a backend promises beyond the contract)
----------------------------------------------------------
A backend declares them as two attributes, read by :func:`capabilities` (the
reactor, the conformance suite and its table read them the same way).  A
backend that declares nothing promises nothing beyond the contract above.

* ``ordered`` (bool, default ``False``): tokens are reported in the order
  their readiness arose, and in arm order for fds already ready when armed
  (clause B9).  epoll's ready list and io_uring's completion ring keep that
  order; poll(2) and select(2) cannot: they say *that* an fd is ready, never
  *when* it became ready.
* ``max_batch`` (int >= 1, or ``None``, the default): the most reports one
  ``wait`` returns.  A declared cap is a promise (clause B10 checks it);
  ``None`` declares no cap.  Either way a backend may return fewer than are
  ready, and what it does not return now it returns in a later wait.

What the reactor promises on a backend that is not ``ordered``: every ready
armed event still runs, within a bounded number of rounds (B10), exactly once
per arming.  Age-based dispatch keeps its rule, because ages come from the
reactor's own stamps (arm time, or the round that first saw the event ready
under ``CWIST_REACTOR_AGE_FROM=ready``), never from the backend's order: with
``CWIST_REACTOR_TAIL_US=T > 0`` an event aged past ``T`` still runs before
the events of its batch that are not, oldest first.  What it loses is the
order of everything else: the events that are not aged, ties, and every
event with ``TAIL_US=0``, run in the order the backend returned them, which
is then only the backend's scan order (poll(2): the order of its fd array),
not first-come first-served.
"""

from __future__ import annotations

import errno
import select
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

READ = 1  # direction: readable (POLLIN)
WRITE = 2  # direction: writable (POLLOUT)

# revents bits (equal to select.POLL* / select.EPOLL* on Linux).
IN = select.POLLIN
OUT = select.POLLOUT
ERR = select.POLLERR
HUP = select.POLLHUP
RDHUP = 0x2000  # POLLRDHUP / EPOLLRDHUP

#: revents bits that satisfy each direction.  HUP/ERR satisfy both so a peer's
#: close or a socket error always reaches whichever callback is armed.
SATISFIES = {READ: IN | ERR | HUP | RDHUP, WRITE: OUT | ERR | HUP}

#: The longest timeout (s) epoll_wait and poll(2) take: they count an int of milliseconds
#: (INT_MAX ms, about 24.8 days), and Python's wrappers raise OverflowError past it.
#: Whole seconds, so the milliseconds never round past INT_MAX.
WAIT_MAX_S = (2**31 - 1) // 1000

#: A default cap on one wait's batch (CWIST's epoll uses 1024 events).
MAX_BATCH = 1024


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares (see "Capabilities" above): ``ordered``, ``max_batch``."""

    ordered: bool = False
    max_batch: int | None = None


def capabilities(backend: object) -> Capabilities:
    """The capabilities ``backend`` declares; an attribute it lacks promises nothing.

    Raises ``ValueError`` naming the attribute, its value and what is accepted
    when a declaration is malformed (``ordered`` not a bool, ``max_batch``
    not ``None`` or an int >= 1).
    """
    ordered = getattr(backend, "ordered", False)
    if not isinstance(ordered, bool):
        raise ValueError(f"backend capability ordered={ordered!r}: accepted True or False")
    max_batch = getattr(backend, "max_batch", None)
    if max_batch is not None and (
        isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1
    ):
        raise ValueError(f"backend capability max_batch={max_batch!r}: accepted None (no cap) or an int >= 1")
    return Capabilities(ordered=ordered, max_batch=max_batch)


def key_of(fd: int, direction: int) -> int:
    """The one key of an arming, ``(fd, direction)`` as an int: ``fd * 2 + direction - 1``.

    The reactor's table of armed events and io_uring's operations (the
    ``user_data`` of its requests) are keyed by it; ``key >> 1`` is the fd.
    """
    return fd * 2 + direction - 1


def direction_name(direction: int) -> str:
    return {READ: "read", WRITE: "write"}.get(direction, f"direction {direction!r}")


def check_direction(direction: int) -> None:
    """Raise ``ValueError`` unless ``direction`` is ``READ`` or ``WRITE``."""
    if direction != READ and direction != WRITE:
        raise ValueError(f"direction must be READ (1) or WRITE (2), got {direction!r}")


def not_open_error(fd: int, why: str = "") -> OSError:
    """The ``OSError(EBADF)`` every arm raises for an fd that is not open (clause B16).

    ``why``, if given, is added in parentheses.
    """
    return OSError(
        errno.EBADF, f"cannot arm fd {fd}: not an open file descriptor" + (f" ({why})" if why else "")
    )


def ready_now(fd: int) -> int:
    """What the file ``fd`` names now is ready for: poll(2) without waiting, revents bits (0: nothing).

    For a registration that follows files (epoll): a number whose file was closed without
    disarm while another descriptor kept it open (a dup, a forked child, SCM_RIGHTS) keeps
    that file's registration under the number (epoll(7) Q6), and nothing can remove it.  A
    report under such a number is the new file's only if the new file is ready now (clause B5).
    """
    p = select.poll()
    p.register(fd, IN | OUT | RDHUP)
    got = p.poll(0)
    return got[0][1] if got else 0


def closed_error(name: str) -> RuntimeError:
    return RuntimeError(f"{name} backend is closed; create a new reactor")


@runtime_checkable
class Backend(Protocol):
    """Structural type of a backend.  ``name`` is what the server prints at start."""

    name: str
    # Capabilities (optional, see above): ``ordered: bool``, ``max_batch: int | None``.

    def arm(self, fd: int, direction: int, token: object) -> None: ...

    def disarm(self, fd: int, direction: int) -> None: ...

    def wait(self, timeout_s: float | None) -> list[tuple[object, int]]: ...

    def flush(self) -> int: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...
