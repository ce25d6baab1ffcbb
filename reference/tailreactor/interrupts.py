"""Interrupts: what a Python reactor adds so that ``KeyboardInterrupt`` loses nothing.

A port can skip this module
---------------------------
In C, Rust or Go a signal does not run code in the middle of the reactor:
the handler sets a flag (or writes to a self-pipe), and the loop looks at it
between rounds.  Only a callback's own failure can end a round early, and
then the loop either goes on (an error is logged) or the program ends.  Such
a port keeps clause R21 by keeping the batch on the reactor, as this one
does, and needs nothing else below.

What Python adds
----------------
CPython runs a signal handler between two bytecodes, wherever the
interpreter checks for pending work: at the start of a Python function, at
a jump back in a loop, and after some C calls return.  The default SIGINT
handler raises ``KeyboardInterrupt`` there, so an exception that is not an
``Exception`` can leave the reactor from almost any line of a round, not
only from a callback.  (Trio writes the same problem down in
``trio/_core/_ki.py`` and protects its scheduler with a flag on the frames;
asyncio lets the exception through and keeps the rest of its ready queue.)

The events a wait reaped are gone from the backend (one-shot: it will not
report them again), so the reactor must not lose them.  It keeps clause R21
by *ownership*, not by handling the exception:

* **Everything a round has taken is stored on an object that outlives the
  round**, before anything can interrupt it: the wait's result in
  ``RoundState.reaped``, the batch in ``RoundState.batch``, the timer pass
  on the heap's pass list (:mod:`tailreactor.timers`), the post drain on the
  queue's drain list (:mod:`tailreactor.posts`).  No local holds the only
  reference to any of them.
* **An item leaves its owner only as its callback starts.**  The dispatch
  marks an event ``DONE`` and removes it from the armed table, a timer pass marks
  an entry fired, a drain removes a post, and the very next thing is the
  callback's call.  Nothing in between calls out (no Python function, no C
  call that can run a handler), so no signal handler can run there: either
  the item is still owned, or its callback has started, and an interrupt at
  its start counts as the callback's own exception.  That is also why the
  three places call their callback inline rather than through a shared
  helper: a Python helper's start is a place a handler can run.
* **A harvest is a second, smaller wait.**  What ``backend.harvest`` returns
  mid-round goes to ``RoundState.reaped`` and is stamped into the batch the
  same way (by the next round, with that round's stamp, if cut short).
* **Stamping stores the state last.**  ``READY`` means "in the batch", so
  an event is appended to the batch before it is marked ``READY``; one
  interrupted in between is still ``ARMED`` and is stamped again from
  ``RoundState.reaped``, which is cleared only once all of it is stamped.
* **The next round takes over.**  :meth:`Reactor.run_once` stamps what a
  round cut short left in ``reaped``, and the round's end keeps the batch's
  events still ``READY`` (:func:`carried_over`): they lead the next batch,
  with their stamps, and are dispatched by the same code as any other.
  Every round is counted, however it ends.

What is left
------------
Two windows only a tracer or debugger can reach (``sys.settrace``, pdb),
because no signal handler runs there: from the backend's ``wait`` returning
to ``RoundState.reaped`` being stored (and likewise from its ``harvest``
returning, in a round that harvests), and from taking an item to its
callback's call.  One window a signal can reach, and Python cannot close:
on io_uring, the completions uring-api has just taken off the ring before
the backend stores them.  ``tests/test_reactor_interrupts.py`` raises at
every other bytecode of a round, a timer pass, a post drain and a wait.
"""

from __future__ import annotations

from .events import READY


def carried_over(batch: list) -> list:
    """The events of a finished or cut-short round's batch that it did not take (still ``READY``).

    Empty after a round that ran to its end: the dispatch takes every event
    (or skips it, disarmed).  After a round cut short they lead the next
    round's batch, in their order.
    """
    return [ev for ev in batch if ev.state == READY]
