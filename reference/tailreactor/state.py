"""What a reactor keeps between the steps of its rounds: its counters and the round in progress.

Two plain records, read and written by the round (reactor.py) and its
dispatch (dispatch.py): :class:`Counters`, the always-on counts a user reads
(``Reactor.counters``), and :class:`RoundState`, what the round in progress
has taken from the backend and not yet run.  The round state lives on the
reactor, not in the round's locals, so that a round cut short leaves it for
the next one (clause R21; interrupts.py says what a Python reactor adds).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .events import Event

__all__ = ["Counters", "RoundState"]


@dataclass(slots=True)
class Counters:
    """Always-on, cheap counters of one reactor (plain ints).

    ``rounds``: rounds run; ``dispatched``: I/O callbacks run;
    ``tail_elevations``: callbacks run because their event aged past
    ``CWIST_REACTOR_TAIL_US`` (the seed's probe counter); ``timers_fired``;
    ``posts_run``; ``round_budget_flushes``: mid-round submits of queued
    re-arms; ``drain_chunk_drains``: post drains inside a batch;
    ``callback_errors``: callbacks that raised; ``harvests``: mid-round
    harvests (``CWIST_REACTOR_HARVEST_US``) and ``harvested``: the events
    they added to rounds.  A round cut short by an
    exception that escapes a callback (clause R21) is counted like any
    other: its round, and every callback that ran, the one that raised too.
    """

    rounds: int = 0
    dispatched: int = 0
    tail_elevations: int = 0
    timers_fired: int = 0
    posts_run: int = 0
    round_budget_flushes: int = 0
    drain_chunk_drains: int = 0
    callback_errors: int = 0
    harvests: int = 0
    harvested: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class RoundState:
    """What the round in progress holds, kept on the reactor (see the module docstring).

    ``batch``: the round's events, those carried over from a round cut short
    first, then the ones this round stamped, in backend order; an event is
    the round's while it is ``READY``.  ``reaped``: what this round's wait
    returned, until all of it is stamped into ``batch`` (then empty).
    ``start_ns``: the round's stamp, the clock read of step 3 (0 before it).
    ``dropped``: the events of ``batch`` cancelled while ``READY`` (disarmed,
    or replaced by a new arm) since the batch was kept: with the callbacks
    the round ran, they account for every entry the policy gave, so the
    reactor knows without a walk whether any entry is still ``READY``.
    """

    __slots__ = ("batch", "reaped", "start_ns", "dropped")

    def __init__(self):
        self.batch: list[Event] = []
        self.reaped = ()
        self.start_ns = 0
        self.dropped = 0
