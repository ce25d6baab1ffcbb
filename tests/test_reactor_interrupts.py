"""An interrupt at any bytecode of a round, after its wait returned, loses no event, and one at
any bytecode of a timer pass loses no timer (clause R21).

A signal handler runs where Python code calls out (a function's start, the
return of a C call) or jumps back, so it can land between almost any two
bytecodes; a tracer or debugger (``sys.settrace``, pdb and its Ctrl-C) can
raise at any of them.  These sweeps raise ``KeyboardInterrupt`` at one
bytecode per trial (opcode tracing), on both backends, and check that every
armed event (or timer) then runs exactly once, that no callback's state
(``dispatch_late()``, the hot re-arm) is left behind, and that later rounds
run normally.  The I/O sweep covers ``Reactor._round``, ``_stamp``,
``_dispatch`` (dispatch.py) and ``_end_round`` once the wait has returned a batch, and in a
round that harvests (``CWIST_REACTOR_HARVEST_US``) ``_harvest`` and
``AgeOrder.add`` too.

Two windows are left out, and the reactor says where they are:

* from marking an event DONE to the start of its callback nothing calls out,
  so no signal handler can run there; a tracer that raises there loses that
  one event (it is DONE, and its callback never ran);
* between the backend's ``wait`` returning and the round storing its result
  (``...reaped = self.backend.wait(...)``): the reaped events are only on the stack.  A return from
  a Python ``wait`` runs no signal handler; with a backend whose ``wait`` is
  C code a signal can land there, which the docs count as the backend's window.
"""

from __future__ import annotations

import dis
import inspect
import socket
import sys
from collections import Counter

import pytest

from tailreactor import READ, Reactor
from tailreactor import dispatch as dispatch_mod
from tailreactor import interrupts as interrupts_mod
from tailreactor import posts as posts_mod
from tailreactor import reactor as reactor_mod
from tailreactor import timers as timers_mod
from tailreactor.config import Config

TRACED = {"_round", "_stamp", "_dispatch", "_in_order", "_end_round"}


class Interrupter:
    """A ``sys.settrace`` tracer that raises ``KeyboardInterrupt`` at the k-th bytecode it counts.

    It counts the ``opcode`` events of frames whose function is named in
    ``names`` and whose file is in ``files``, while ``active()`` is true,
    except where ``skip(frame)`` is true; it raises once.  ``run(fn)`` calls
    ``fn`` traced and tells whether a ``KeyboardInterrupt`` left it.
    """

    def __init__(self, k: int, names: set[str], files: set[str], skip=None, active=None):
        self.k, self.names, self.files = k, names, files
        self.skip = skip or (lambda frame: False)
        self.active = active or (lambda: True)
        self.count = 0
        self.fired = False

    def __call__(self, frame, event, arg):
        if frame.f_code.co_name not in self.names or frame.f_code.co_filename not in self.files:
            return None
        frame.f_trace_opcodes = True
        return self._local

    def _local(self, frame, event, arg):
        if event == "opcode" and not self.fired and self.active() and not self.skip(frame):
            if self.count == self.k:
                self.fired = True
                raise KeyboardInterrupt
            self.count += 1
        return self._local

    def run(self, fn) -> bool:
        sys.settrace(self)
        try:
            fn()
        except KeyboardInterrupt:
            return True
        finally:
            sys.settrace(None)
        return False


def _readable_pairs(r: Reactor, n: int, cb) -> list:
    """``n`` socketpairs, each armed READ with ``cb`` on its first end, with a byte queued."""
    pairs = [socket.socketpair() for _ in range(n)]
    for a, b in pairs:
        a.setblocking(False)
        r.arm(a.fileno(), READ, cb)
        b.send(b"x")
    return pairs


def _finish(r: Reactor, pairs: list, rounds: int) -> None:
    """Run ``rounds`` more rounds (nothing interrupts them), then close everything."""
    try:
        for _ in range(rounds):
            r.run_once(0)
    finally:
        r.close()
        for a, b in pairs:
            a.close()
            b.close()


def _window() -> set[tuple[str, int]]:
    """(function, line) of the two windows of the module docstring (dispatch.py, reactor.py)."""
    window = set()
    for walk in (Reactor._dispatch, Reactor._in_order):  # backend order's loop and the policy's
        lines, first = inspect.getsourcelines(walk)
        start = next(i for i, line in enumerate(lines) if line.strip() == "ev.state = DONE")
        end = next(i for i, line in enumerate(lines) if line.strip() == "callback(ev)")
        window |= {(walk.__name__, line) for line in range(first + start + 1, first + end + 1)}
    lines_r, first_r = inspect.getsourcelines(Reactor._round)
    wait = next(i for i, line in enumerate(lines_r) if "reaped = self.backend.wait(" in line)
    return window | {("_round", first_r + wait)}


def _trial(backend: str, k: int, tail_us: int) -> tuple[bool, Counter, int]:
    """Raise at the k-th traced bytecode after the wait returned; (raised, deliveries, events)."""
    r = Reactor(backend, config=Config.default().replace(tail_us=tail_us, drain_chunk=1))
    got: Counter = Counter()
    state = {"after": False}
    window = _window()

    def cb(ev):
        got[ev.fd] += 1
        r.post(lambda _: None)  # a drain inside the batch (drain chunk 1)

    pairs = _readable_pairs(r, 3, cb)
    wait = r.backend.wait

    def traced_wait(timeout):
        out = wait(timeout)
        if out:
            state["after"] = True  # count from here: the batch is taken
        return out

    r.backend.wait = traced_wait
    interrupter = Interrupter(
        k,
        TRACED,
        {reactor_mod.__file__, dispatch_mod.__file__},
        skip=lambda frame: (frame.f_code.co_name, frame.f_lineno) in window,
        active=lambda: state["after"],
    )
    raised = interrupter.run(lambda: r.run_once(1.0))
    state["after"] = False
    # Nothing of the callback that ran last is left for code outside callbacks to see.
    assert not r.dispatch_late(), f"interrupt at traced bytecode {k}: dispatch_late() still true"
    assert r._running is None, f"interrupt at traced bytecode {k}: a callback still running"
    _finish(r, pairs, 5)
    return raised, got, len(pairs)


@pytest.mark.parametrize("tail_us", [0, 1], ids=["backend-order", "aged"])
def test_an_interrupt_at_any_bytecode_of_a_round_loses_nothing(backend_name, tail_us):
    k = 0
    while True:
        raised, got, n = _trial(backend_name, k, tail_us)
        assert len(got) == n and set(got.values()) == {1}, (
            f"interrupt at traced bytecode {k}: deliveries {dict(got)}"
        )
        if not raised:
            break
        k += 1
    assert k > 300, f"precondition: the round executed only {k} traced bytecodes"


# -- a harvesting round (CWIST_REACTOR_HARVEST_US) ----------------------------------
# The same sweep over a round that harvests: the first callback makes two more
# armed fds ready and every callback takes 10 us of a ManualClock, so a harvest
# (every 1 us) runs before each later delivery.  One more window is left out, as
# for the wait: between the backend's harvest returning and the round storing it.
HARVEST_TRACED = TRACED | {"_harvest", "add", "<listcomp>", "<setcomp>"}


def _harvest_window() -> set[tuple[str, int]]:
    lines, first = inspect.getsourcelines(Reactor._harvest)
    take = next(i for i, line in enumerate(lines) if "= self._harvest_from(" in line)
    return {("_harvest", first + take)} | _window()


def _harvest_trial(backend: str, k: int, tail_us: int) -> tuple[bool, Counter, int]:
    from tailreactor.clock import ManualClock
    from tailreactor.policies import age as age_mod

    clock = ManualClock()
    r = Reactor(backend, config=Config.default().replace(tail_us=tail_us, harvest_us=1), clock=clock)
    got: Counter = Counter()
    state = {"after": False}
    window = _harvest_window()
    pairs = [socket.socketpair() for _ in range(4)]

    def cb(ev):
        got[ev.fd] += 1
        clock.advance_us(10)
        if sum(got.values()) == 1:
            for _, b in pairs[2:]:
                b.send(b"x")

    for i, (a, b) in enumerate(pairs):
        a.setblocking(False)
        r.arm(a.fileno(), READ, cb)
        if i < 2:
            b.send(b"x")
    r.backend.flush()
    clock.advance_us(5000)  # all aged with tail_us=1000
    wait = r.backend.wait

    def traced_wait(timeout):
        out = wait(timeout)
        if out:
            state["after"] = True
        return out

    r.backend.wait = traced_wait
    interrupter = Interrupter(
        k,
        HARVEST_TRACED,
        {reactor_mod.__file__, dispatch_mod.__file__, age_mod.__file__},
        skip=lambda frame: (frame.f_code.co_name, frame.f_lineno) in window,
        active=lambda: state["after"],
    )
    raised = interrupter.run(lambda: r.run_once(1.0))
    state["after"] = False
    harvested = r.counters.harvested
    _finish(r, pairs, 5)
    return raised, got, len(pairs), harvested


@pytest.mark.parametrize("tail_us", [0, 1000], ids=["backend-order", "aged"])
def test_an_interrupt_at_any_bytecode_of_a_harvesting_round_loses_nothing(backend_name, tail_us):
    k = 0
    harvested_once = False
    while True:
        raised, got, n, harvested = _harvest_trial(backend_name, k, tail_us)
        assert len(got) == n and set(got.values()) == {1}, (
            f"interrupt at traced bytecode {k}: deliveries {dict(got)}"
        )
        harvested_once |= harvested > 0
        if not raised:
            break
        k += 1
    assert harvested_once and harvested == 2, f"precondition: the uninterrupted round harvested {harvested}"
    assert k > 200, f"precondition: the round executed only {k} traced bytecodes"


# -- the timer pass ------------------------------------------------------------
# A signal handler runs where Python code calls out (a function's start, the
# return of a C call) or jumps back, so it can land between any two bytecodes
# of the timer machinery.  This sweep raises at each bytecode (opcode tracing)
# of the functions that take a pass off the heap, fire it and put it back, one
# bytecode per trial.  The one window left out is the reactor's, and it says so
# where it is: from marking a timer's entry fired to its callback's start
# nothing calls out.

TIMER_TRACED = {"next_deadline", "take_due", "_restore", "fire_due", "_fire_timers", "_run_timer"}


def _timer_window() -> range:
    """Line numbers (in reactor.py) from marking a timer fired to calling its callback."""
    fire = getattr(Reactor, "_fire_timers", None)
    if fire is None:
        return range(0)
    lines, first = inspect.getsourcelines(fire)
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("entry.timer = None"))
    end = next(i for i, line in enumerate(lines) if line.strip() == "timer.callback(timer)")
    return range(first + start + 1, first + end + 1)


def _timer_trial(backend: str, k: int) -> tuple[bool, list, int]:
    """Raise at the k-th traced bytecode of the first round; (raised, fired, timers_fired)."""
    now = 10**12
    r = Reactor(backend, clock=lambda: now, config=Config.default())
    fired: list = []
    timers = {}

    def cb(t):
        fired.append((t.data, r.counters.rounds))
        if t.data == "B":
            timers["C"].cancel()  # cancel means it will not fire, also mid-pass
            timers["F"] = r.call_later_us(0, cb, "F")  # due now, but armed during the pass: a later pass

    for name in "ABCD":
        timers[name] = r.call_later_us(0, cb, name)
    r.call_later_us(0, cb, "X").cancel()  # a dead entry on the heap, popped by the pass
    window = _timer_window()
    interrupter = Interrupter(
        k,
        TIMER_TRACED,
        {reactor_mod.__file__, timers_mod.__file__},
        skip=lambda frame: frame.f_code.co_filename == reactor_mod.__file__ and frame.f_lineno in window,
    )
    raised = interrupter.run(lambda: r.run_once(0))
    try:
        for _ in range(4):
            r.run_once(0)
    finally:
        r.close()
    return raised, fired, r.counters.timers_fired


def test_an_interrupt_at_any_bytecode_of_a_timer_pass_loses_no_timer(backend_name):
    k = 0
    while True:
        raised, fired, counted = _timer_trial(backend_name, k)
        names = [name for name, _ in fired]
        assert names == ["A", "B", "D", "F"], f"interrupt at traced bytecode {k}: fired {fired}"
        rounds = dict(fired)
        assert rounds["F"] > rounds["B"], f"interrupt at traced bytecode {k}: F fired in B's pass"
        assert counted == 4, f"interrupt at traced bytecode {k}: timers_fired {counted}"
        if not raised:
            break
        k += 1
    assert k > 50, f"precondition: the pass executed only {k} traced bytecodes"


# -- the post drain ------------------------------------------------------------
# The same sweep over taking the queued posts and running them.  Left out: from
# the line that takes a post off the drain list to its callback's start nothing
# calls out; and the few bytecodes where the queue's lock is held outside its
# with-block's protection (_lock_held_unprotected): no signal handler runs
# there, but a tracer that raises there leaves the lock held.

POST_TRACED = {"take", "__bool__", "__len__", "_drain_posts"}


def _post_window() -> set[int]:
    """Line numbers (in reactor.py) from taking a post off the drain list to calling it."""
    lines, first = inspect.getsourcelines(Reactor._drain_posts)
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "del items[0]")
    except StopIteration:
        return set()
    end = next(i for i, line in enumerate(lines) if line.strip() == "callback(data)")
    return set(range(first + start + 1, first + end + 1))


def _lock_held_unprotected(code) -> set[int]:
    """Offsets in ``code`` where the queue's lock is held outside the with-block's protection.

    Between BEFORE_WITH (which calls the lock's ``__enter__``) and the block's
    exception-table range, and from the end of that range to the call of
    ``__exit__``, only loads and pops run: no signal handler can run there, and
    a tracer that raises there leaves the lock held.
    """
    entries = dis.Bytecode(code).exception_entries
    protected = lambda off: any(e.start <= off < e.end for e in entries)  # noqa: E731
    out, holding = set(), False
    for x in dis.get_instructions(code):
        if x.opname == "BEFORE_WITH":
            holding = True
        elif holding and not protected(x.offset):
            out.add(x.offset)
            if x.opname == "CALL":  # __exit__: the lock is released once it runs
                holding = False
    return out


def _post_trial(backend: str, k: int, then: str) -> tuple[bool, list, int, bool]:
    """Raise at the k-th traced bytecode of the first round, then run rounds or close;
    (raised, ran, posts_run, whether E must have run)."""
    r = Reactor(backend, config=Config.default())
    ran: list = []

    def cb(name):
        ran.append(name)
        if name == "B":
            r.post(cb, "E")  # posted during the drain: the next drain runs it

    for name in "ABCD":
        r.post(cb, name)
    window = _post_window()
    unprotected = _lock_held_unprotected(posts_mod.PostQueue.take.__code__)
    take_code = posts_mod.PostQueue.take.__code__

    def skip(frame):
        if frame.f_code is take_code:
            return frame.f_lasti in unprotected
        return frame.f_code.co_filename == reactor_mod.__file__ and frame.f_lineno in window

    interrupter = Interrupter(k, POST_TRACED, {reactor_mod.__file__, posts_mod.__file__}, skip=skip)
    raised = interrupter.run(lambda: r.run_once(0))
    try:
        for _ in range(4 if then == "rounds" else 0):
            r.run_once(0)
        e_due = then == "rounds" or "B" in ran  # else B runs in close's drain: E need not run (R19)
    finally:
        r.close()  # runs what is still queued (R19)
    return raised, ran, r.counters.posts_run, e_due


@pytest.mark.parametrize("then", ["rounds", "close"])
def test_an_interrupt_at_any_bytecode_of_a_post_drain_loses_no_post(backend_name, then):
    k = 0
    while True:
        raised, ran, counted, e_due = _post_trial(backend_name, k, then)
        want = list("ABCDE") if e_due else [list("ABCD"), list("ABCDE")]
        assert ran == want if e_due else ran in want, f"interrupt at traced bytecode {k}: ran {ran}"
        assert counted == len(ran), f"interrupt at traced bytecode {k}: posts_run {counted}, ran {ran}"
        if not raised:
            break
        k += 1
    assert k > 50, f"precondition: the drain executed only {k} traced bytecodes"


# -- the backend's wait ----------------------------------------------------------
# The same sweep inside the backend's wait, which takes events from the kernel
# and forgets each token it reports (one-shot).  Left out:
#
# * io_uring: the completions uring-api took off the ring, from its ``wait``
#   returning (a C call: a signal handler can run then) to the backend storing
#   them, which no Python code can close.  (epoll has no such window, and the
#   sweep keeps its poll: level-triggered, events lost there come again.)
# * ``return out`` after the backend let go of the list: the reactor's own
#   window, that of ``reaped = ...`` (module docstring), one line earlier.

WAIT_TRACED = {"wait", "_wait_retrying_eintr", "_report", "_register", "_drop"}


def _wait_window(backend) -> set[tuple[str, int]]:
    """(function name, line) pairs left out of the sweep (see above)."""
    from tailreactor.backends import io_uring as uring_mod

    fns = [(type(backend).wait, "return out")]
    if isinstance(backend, uring_mod.IoUringBackend):
        fns += [
            (uring_mod.IoUringBackend._wait_retrying_eintr, "return self._ring.wait("),
            (uring_mod.IoUringBackend.wait, "pending.extend(self._wait_retrying_eintr("),
        ]
    out = set()
    for fn, text in fns:
        lines, first = inspect.getsourcelines(fn)
        out.add(
            (fn.__name__, first + next(i for i, line in enumerate(lines) if line.strip().startswith(text)))
        )
    return out


def _wait_trial(backend: str, k: int) -> tuple[bool, Counter, int]:
    """Raise at the k-th traced bytecode of the first wait that reports events."""
    r = Reactor(backend, config=Config.default())
    got: Counter = Counter()

    def cb(ev):
        got[ev.fd] += 1

    pairs = _readable_pairs(r, 3, cb)
    window = _wait_window(r.backend)
    interrupter = Interrupter(
        k,
        WAIT_TRACED,
        {sys.modules[type(r.backend).__module__].__file__},
        skip=lambda frame: (frame.f_code.co_name, frame.f_lineno) in window,
    )
    raised = interrupter.run(lambda: r.run_once(1.0))
    _finish(r, pairs, 5)
    return raised, got, len(pairs)


# selectors too: it is the example backend authors start from (docs/en/conformance.md).
@pytest.mark.parametrize(
    "backend", ["epoll", pytest.param("io_uring", marks=pytest.mark.io_uring), "selectors"]
)
def test_an_interrupt_at_any_bytecode_of_the_backends_wait_loses_no_event(backend):
    k = 0
    while True:
        raised, got, n = _wait_trial(backend, k)
        assert len(got) == n and set(got.values()) == {1}, (
            f"interrupt at traced bytecode {k}: deliveries {dict(got)}"
        )
        if not raised:
            break
        k += 1
    assert k > 50, f"precondition: the wait executed only {k} traced bytecodes"


# -- a second interrupt while the first is handled ---------------------------------
# Ctrl-C twice, or a signal that keeps coming: the second KeyboardInterrupt can
# land while the round handles the first (its except and finally blocks) or in
# the next round, while that one takes over what the first left.  The first
# here is an I/O callback's own; the second is raised at one traced bytecode
# after it, one per trial.

# run_once is left out: between its flag store and its try, and in its finally,
# nothing calls out (tracer-only), and a raise there would leave the R22 flag set.
RECOVERY_TRACED = TRACED | {"carried_over", "<listcomp>", "<genexpr>"}


def _double_trial(backend: str, j: int) -> tuple[bool, Counter, int]:
    """An I/O callback raises; then raise again at the j-th traced bytecode; (second raised, deliveries, events)."""
    r = Reactor(backend, config=Config.default().replace(tail_us=0))
    got: Counter = Counter()
    state = {"first": False}
    window = _window()

    def cb(ev):
        got[ev.fd] += 1
        if not state["first"]:
            state["first"] = True
            raise KeyboardInterrupt  # the first: the rest of the batch must run later

    pairs = _readable_pairs(r, 4, cb)

    interrupter = Interrupter(
        j,
        RECOVERY_TRACED,
        {reactor_mod.__file__, dispatch_mod.__file__, interrupts_mod.__file__},
        skip=lambda frame: (frame.f_code.co_name, frame.f_lineno) in window,
        active=lambda: state["first"],
    )

    def rounds():  # the first interrupt, the second, and rounds after them (data is queued)
        for _ in range(4):
            try:
                r.run_once(0)
            except KeyboardInterrupt:
                pass

    interrupter.run(rounds)
    _finish(r, pairs, 4)
    return interrupter.fired, got, len(pairs)


def test_a_second_interrupt_while_the_first_is_handled_loses_nothing(backend_name):
    j = 0
    while True:
        fired, got, n = _double_trial(backend_name, j)
        assert len(got) == n and set(got.values()) == {1}, (
            f"second interrupt at traced bytecode {j}: deliveries {dict(got)}"
        )
        if not fired:
            break
        j += 1
    assert j > 100, f"precondition: only {j} traced bytecodes after the first interrupt"
