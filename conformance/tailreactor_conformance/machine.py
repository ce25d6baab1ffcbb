"""A Hypothesis state machine: a real reactor on real socketpairs next to the model (R20).

Role
----
:class:`ReactorMachine` has one rule per :class:`~.driver.Driver` step; the
invariant after every step is "no callback disagreed with the model".
Hypothesis explores step sequences, and on a failure shrinks to the shortest
one and prints it as a replayable program.

Use :func:`run` from a test: it builds a fresh reactor per example through
``build(clock)`` and closes it at the end of the example.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tailreactor.clock import ManualClock

from .driver import Driver

__all__ = ["ReactorMachine", "run"]

_INDEX = st.integers(0, 7)
MAX_PAIRS = 8


class ReactorMachine(RuleBasedStateMachine):
    """Set ``build`` (``build(clock) -> reactor``) on a subclass; see :func:`run`."""

    build = None

    def __init__(self):
        super().__init__()
        self.clock = ManualClock()
        self.driver = Driver(type(self).build(self.clock), self.clock)
        self.driver.open()

    @precondition(lambda self: len(self.driver.pairs) < MAX_PAIRS)
    @rule()
    def open(self):
        self.driver.open()

    @rule(i=_INDEX)
    def arm(self, i):
        self.driver.arm(i)

    @rule(i=_INDEX)
    def disarm(self, i):
        self.driver.disarm(i)

    @rule(i=_INDEX, n=st.integers(1, 64))
    def write(self, i, n):
        self.driver.write(i, n)

    @rule(i=_INDEX)
    def read(self, i):
        self.driver.read(i)

    @rule(i=_INDEX)
    def close_peer(self, i):
        self.driver.close_peer(i)

    @rule(i=_INDEX)
    def close(self, i):
        self.driver.close(i)

    @rule(delay_us=st.sampled_from([0, 1, 500, 1000, 2500]))
    def timer(self, delay_us):
        self.driver.timer(delay_us)

    @rule(k=_INDEX)
    def cancel(self, k):
        self.driver.cancel(k)

    @rule(us=st.sampled_from([1, 499, 500, 1000, 3000]))
    def advance(self, us):
        self.driver.advance(us)

    @rule(n=st.integers(1, 3))
    def post(self, n):
        self.driver.post(n)

    @rule()
    def run_round(self):
        self.driver.run()

    @rule()
    def settle(self):
        self.driver.settle()

    @invariant()
    def agrees_with_model(self):
        self.driver.check()

    def teardown(self):
        try:
            self.driver.settle()
            self.driver.check()
        finally:
            self.driver.reactor.close()
            self.driver.close_sockets()


def run(build, settings) -> None:
    """Run the machine with ``build(clock) -> reactor`` under Hypothesis ``settings``."""
    machine = type("ReactorMachineUnderTest", (ReactorMachine,), {"build": staticmethod(build)})
    run_state_machine_as_test(machine, settings=settings)
