"""Dispatch policies: the order of delivery within a round, as a plug-in.

The interface
-------------
A policy is a class ``Policy(age_from, threshold_ns)`` (``CWIST_REACTOR_AGE_FROM``
and ``CWIST_REACTOR_TAIL_US`` in ns; a policy may ignore them), one object per
reactor, reused round after round:

* ``start(batch)``: a round begins over ``batch``, its events in backend order
  (the reactor's own list: a harvest appends to it, and then calls ``add``);
* ``next(now_ns)``: the event to deliver next at clock ``now_ns``, or None when
  the policy has nothing left to give this round;
* ``again()``: the event ``next`` gave last was not taken (the reactor drained
  posts or harvested first): give it, or what now comes first, next time;
* ``add(events)``: ``events`` joined the batch at its end (a harvest);
* ``elevated`` (attribute): whether the event ``next`` gave last was moved
  ahead for its age: ``dispatch_late()`` is true during its callback and
  ``tail_elevations`` counts it (only ``age`` elevates);
* ``reads_clock`` (attribute): False when ``next`` ignores ``now_ns``, so the
  reactor need not read the clock for it;
* ``in_backend_order`` (attribute, optional, read once when the reactor is
  made; absent is False): True when the order is the batch's own all round
  (``backend``; ``age`` and ``lifo`` with ``TAIL_US=0``).  The reactor then
  walks the batch itself, a cursor over it, and calls none of the methods
  above: the cost of backend order is the reactor's walk alone.
* ``aged_at(batch)``, ``aged_run(batch, now_ns)`` and ``rest()`` (methods,
  optional; ``age`` has them):
  where the order needs no decision the reactor walks the round itself
  (policies/age.py, "Where the reactor walks the round itself"):
  ``aged_at`` gives the clock value before which the order is backend order
  and nothing is elevated (the aging time of the batch's oldest event: a
  round of one event is then delivered elevated), ``aged_run``, asked at the
  delivery at which the clock reaches that value, the rest of the round as
  one run of elevated events if every event left has aged (else None), and
  ``rest``, asked once
  at the first event the policy elevates, the events it would give after
  it if that is all it gives, all elevated (else None).

A policy only reads: the batch, the events' stamps (``armed_ns``,
``ready_ns``), their ``state`` and ``hint`` (what the owner says about its
next callback; the HTTP layer sets the requests served in the last one),
never a socket.  It takes nothing: the reactor takes the event it gives.

What the reactor keeps, whatever the policy
-------------------------------------------
Every event of the batch runs once in its round (but for events a harvest
took past the round's bound, which lead the next round's batch: dispatch.py,
"Harvesting mid-round"): the reactor skips an event
``next`` gives that is no longer ``READY`` (it ran, or was disarmed), and when
``next`` has nothing left while events are still ``READY`` it runs those in
backend order.  It takes each event before its callback (interrupts.py), and
keeps the round budget, the harvest and the drain chunk between deliveries
(dispatch.py).  A policy orders one round: it cannot hold an event over to a
later one, so no ready event waits more than the backend's bound in waits
(clause B10) whatever the order.

The policies (``CWIST_REACTOR_POLICY``)
---------------------------------------
* ``backend`` (backend.py): backend order, as asyncio and libuv;
* ``age`` (age.py, the default): CWIST's age-based order,
  events aged past ``TAIL_US`` first, oldest first;
* ``oldest`` (oldest.py): strict oldest first;
* ``lifo`` (lifo.py): adaptive LIFO, newest first once the queue is old;
* ``shortest`` (shortest.py): shortest expected first, by the owner's hint.
"""

from __future__ import annotations

from .age import DeliveryOrder
from .backend import BackendOrder
from .lifo import AdaptiveLifo
from .oldest import OldestFirst
from .shortest import ShortestFirst

__all__ = ["POLICIES", "BackendOrder", "create"]

#: The shipped policies by ``CWIST_REACTOR_POLICY`` name.
POLICIES = {
    "backend": BackendOrder,
    "age": DeliveryOrder,
    "oldest": OldestFirst,
    "lifo": AdaptiveLifo,
    "shortest": ShortestFirst,
}


def create(spec, age_from: str, threshold_ns: int):
    """A policy object from ``spec``: a name of :data:`POLICIES`, ``module:Class``, or a class.

    Raises ``ValueError`` (one line: the value and what is accepted) for a
    name that is neither, or a ``module:Class`` that cannot be imported.
    """
    if isinstance(spec, str):
        if ":" in spec:
            from ..backends import import_factory

            cls = import_factory(spec)
        elif spec in POLICIES:
            cls = POLICIES[spec]
        else:
            raise ValueError(f"policy {spec!r}: accepted {', '.join(POLICIES)} or module:Class")
    else:
        cls = spec
    return cls(age_from, threshold_ns)
