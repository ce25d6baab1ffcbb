"""An interrupt at any line of a round, after its wait returned, loses no event (clause R21).

Signal handlers run only where Python code calls out or jumps back, but a
tracer or debugger (``sys.settrace``, pdb and its Ctrl-C) can raise at any
line.  This sweep raises ``KeyboardInterrupt`` at each line that
``Reactor._round``, ``_stamp_the_rest`` and ``_dispatch`` execute once the
wait has returned a batch, one line per trial, on both backends, and checks
that every armed event then runs exactly once and later rounds run normally.

One window is left out, and the reactor says so where it is: from the line
that marks an event DONE to the start of its callback nothing calls out, so
no signal handler can run there; a tracer that raises there loses that one
event (it is DONE, and its callback never ran).
"""

from __future__ import annotations

import inspect
import socket
import sys
from collections import Counter

import pytest

from tailreactor import READ, Reactor
from tailreactor.config import Config
from tailreactor import reactor as reactor_mod

TRACED = {"_round", "_stamp_the_rest", "_dispatch"}


def _window() -> range:
    """Line numbers (in reactor.py) of the DONE-to-callback window of _dispatch."""
    lines, first = inspect.getsourcelines(Reactor._dispatch)
    start = next(i for i, l in enumerate(lines) if l.strip() == "ev.state = DONE")
    end = next(i for i, l in enumerate(lines) if l.strip() == "callback(ev)")
    return range(first + start + 1, first + end + 1)


def _trial(backend: str, k: int, tail_us: int) -> tuple[bool, Counter, int]:
    """Raise at the k-th traced line after the wait returned; (raised, deliveries, events)."""
    r = Reactor(backend, config=Config.default().replace(tail_us=tail_us, drain_chunk=1))
    pairs = [socket.socketpair() for _ in range(3)]
    got: Counter = Counter()
    state = {"after": False, "count": 0, "fired": False}
    window = _window()

    def cb(ev):
        got[ev.fd] += 1
        r.post(lambda _: None)  # a drain inside the batch (drain chunk 1)

    for a, b in pairs:
        a.setblocking(False)
        r.arm(a.fileno(), READ, cb)
        b.send(b"x")
    wait = r.backend.wait

    def traced_wait(timeout):
        out = wait(timeout)
        if out and not state["fired"]:
            state["after"] = True
        return out

    r.backend.wait = traced_wait

    def tracer(frame, event, arg):
        if frame.f_code.co_name not in TRACED or frame.f_code.co_filename != reactor_mod.__file__:
            return None

        def local(frame, event, arg):
            if event == "line" and state["after"] and not state["fired"] and frame.f_lineno not in window:
                if state["count"] == k:
                    state["fired"] = True
                    raise KeyboardInterrupt
                state["count"] += 1
            return local
        return local

    raised = False
    sys.settrace(tracer)
    try:
        r.run_once(1.0)
    except KeyboardInterrupt:
        raised = True
    finally:
        sys.settrace(None)
        state["after"] = False
    try:
        for _ in range(5):
            r.run_once(0)
    finally:
        r.close()
        for a, b in pairs:
            a.close()
            b.close()
    return raised, got, len(pairs)


@pytest.mark.parametrize("tail_us", [0, 1], ids=["backend-order", "aged"])
def test_an_interrupt_at_any_line_of_a_round_loses_nothing(backend_name, tail_us):
    k = 0
    while True:
        raised, got, n = _trial(backend_name, k, tail_us)
        assert len(got) == n and set(got.values()) == {1}, f"interrupt at traced line {k}: deliveries {dict(got)}"
        if not raised:
            break
        k += 1
    assert k > 20, f"precondition: the round executed only {k} traced lines"
