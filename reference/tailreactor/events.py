"""Armed events and their stamps.

Role
----
An :class:`Event` is one one-shot arming of an fd in one direction: what the
reactor hands the backend as the token, and what the callback receives.  It
carries the two stamps age-based dispatch reads:

* ``armed_ns``: the reactor clock when the event was armed (one clock read and
  a store, as in CWIST's ``reactor_add_common``);
* ``ready_ns``: the reactor clock when the batch holding it was reaped, i.e.
  when the reactor first saw it ready (0 until then).

States: ``ARMED`` (waiting in the backend) -> ``READY`` (reaped, in the current
batch) -> ``DONE`` (callback ran).  ``disarm`` moves ``ARMED`` or ``READY`` to
``CANCELLED``; a cancelled event is never dispatched, even if it is already in
the batch being dispatched.  A callback that re-arms its own fd in the same
direction gets this object back, ``ARMED`` again with fresh stamps
(``Reactor.arm``): an Event is one arming at a time, not forever.
"""

from __future__ import annotations

from operator import attrgetter

from .backends.base import key_of

ARMED, READY, DONE, CANCELLED = 0, 1, 2, 3


class Event:
    """One one-shot arming.  Times are ``monotonic_ns`` of the reactor clock.

    Attributes: ``fd`` (int), ``direction`` (READ=1 or WRITE=2), ``callback``
    (called as ``callback(event)``), ``data`` (caller's context, any object),
    ``key`` (``key_of(fd, direction)``: the reactor's table is keyed by it),
    ``armed_ns``, ``ready_ns``, ``revents`` (poll bits the backend reported;
    for a receive armed with ``Reactor.arm_recv``, its result instead, also
    readable as :attr:`result`), ``state``, and ``hint``: what the owner says
    about the work of its next callback (0: nothing said), read by a dispatch
    policy that orders by it (``policies/shortest.py``), never by the reactor;
    the HTTP layer sets the requests its connection served in its last
    callback.  A re-arm in place keeps it: it describes the owner, not one
    arming.
    """

    __slots__ = (
        "fd",
        "direction",
        "key",
        "callback",
        "data",
        "armed_ns",
        "ready_ns",
        "revents",
        "state",
        "hint",
    )

    def __init__(self, fd: int, direction: int, callback, data, armed_ns: int):
        self.fd = fd
        self.direction = direction
        self.key = key_of(fd, direction)
        self.callback = callback
        self.data = data
        self.armed_ns = armed_ns
        self.ready_ns = 0
        self.revents = 0
        self.state = ARMED
        self.hint = 0

    @property
    def result(self) -> int:
        """A receive's result (``Reactor.arm_recv``): bytes received, 0 at EOF, or ``-errno``."""
        return self.revents

    def __repr__(self) -> str:
        names = {ARMED: "armed", READY: "ready", DONE: "done", CANCELLED: "cancelled"}
        d = "read" if self.direction == 1 else "write"
        return f"<Event fd={self.fd} {d} {names[self.state]} armed_ns={self.armed_ns}>"


#: The stamp each CWIST_REACTOR_AGE_FROM value counts an event's age from.
STAMPS = {"arm": attrgetter("armed_ns"), "ready": attrgetter("ready_ns")}


def stamp_of(age_from: str):
    """The stamp ``age_from`` (CWIST_REACTOR_AGE_FROM) names; ValueError for any other value."""
    try:
        return STAMPS[age_from]
    except KeyError:
        raise ValueError(f"age_from must be 'arm' or 'ready', got {age_from!r}") from None
