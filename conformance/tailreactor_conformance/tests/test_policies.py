"""Dispatch-policy clauses: each policy's order against its model (R26), every event of a
round runs in it once whatever the policy (R27), and a round cut short loses nothing under
every policy (R21).

The policies under test are the shipped ones (``tailreactor.policies.POLICIES``), or those
given with ``--policy`` (a name or ``module:Class``); each test runs once per policy, passed
to the reactor as ``policy=``.  A reactor under test that takes no ``policy=`` (a
third-party reactor with its own order) skips these tests with the reason.  Deterministic
as R10's tests: a ManualClock, real socketpairs, the backend's own batch order recorded by a
RecordingBackend and fed to the model.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailreactor.backends import READ
from tailreactor.backends.base import capabilities
from tailreactor.clock import ManualClock
from tailreactor.events import READY
from tailreactor_conformance import profiles
from tailreactor_conformance.harness import Pair, RecordingBackend, require_batch, rule_broken
from tailreactor_conformance.model import policy_model
from tailreactor_conformance.plugin import policy_class
from tailreactor_conformance.strategies import AgeScenario, policy_scenarios
from tailreactor_conformance.tests.test_dispatch import Round


def reactor_with(make, policy, **kw):
    """``make(policy=policy, **kw)``; skips, with the reason, when the reactor takes no policy."""
    try:
        return make(policy=policy, **kw)
    except TypeError as exc:
        if "policy" not in str(exc):
            raise
        pytest.skip(f"the reactor under test takes no policy= ({exc}): the policy clauses do not apply")


def model_of(spec: str):
    model = policy_model(policy_class(spec))
    if model is None:
        pytest.skip(
            f"policy {spec} names no model (a shipped policy's name, or a `model` attribute with "
            f"the signature of tailreactor_conformance.model.POLICY_MODELS): its order is unchecked"
        )
    return model


def stamps_of(rnd: Round, age_from: str) -> dict[int, int]:
    start = rnd.base + rnd.sc.start_us * 1000
    return {i: start if age_from == "ready" else rnd.base + at * 1000 for i, at in enumerate(rnd.sc.arm_us)}


# -- R26 -----------------------------------------------------------------------
@pytest.mark.clause("R26")
def test_each_policy_delivers_in_its_models_order_for_any_round(
    fresh_reactor, make_backend, conformance_policy
):
    model = model_of(conformance_policy)

    @profiles.current()
    @given(sc=policy_scenarios(), age_from=st.sampled_from(["arm", "ready"]))
    def check(sc, age_from):
        clock = ManualClock()
        rec = RecordingBackend(make_backend())
        r = reactor_with(
            fresh_reactor, conformance_policy, clock=clock, backend=rec, tail_us=sc.tail_us, age_from=age_from
        )
        ps = [Pair() for _ in sc.arm_us]
        try:
            rnd = Round(r, rec, clock, ps, sc)
            hints = dict(enumerate(sc.hints))
            advance = {i: us * 1000 for i, us in enumerate(sc.slow_us)}
            start = rnd.base + sc.start_us * 1000
            want = model(
                rnd.backend_order, stamps_of(rnd, age_from), hints, sc.tail_us * 1000, start, advance
            )
            assert rnd.log == want, (conformance_policy, age_from, sc, rnd.backend_order)
        finally:
            r.close()
            for p in ps:
                p.close()

    check()


# One round, five orders: backend 2 0 4 1 3 (ready order), age 0 1 2 4 3 (0-2 aged at
# T = 150 us), oldest 0 1 2 3 4, lifo 4 3 2 1 0, shortest 3 1 4 2 0 (by hint).
SPREAD = AgeScenario(
    arm_us=(0, 100, 200, 300, 400),
    ready_order=(2, 0, 4, 1, 3),
    tail_us=150,
    start_us=400,
    slow_us=(0,) * 5,
    hints=(16, 1, 8, 0, 4),
)


@pytest.mark.clause("R26")
def test_the_shipped_policies_orders_differ_on_one_round(
    make_reactor, make_backend, pairs, clock, conformance_policy
):
    """A round on which the orders of the shipped policies differ: each runs it as its model
    says (a policy that ran another's order passes no property test by luck here)."""
    model = model_of(conformance_policy)
    rec = RecordingBackend(make_backend())
    r = reactor_with(make_reactor, conformance_policy, clock=clock, backend=rec, tail_us=SPREAD.tail_us)
    # A backend that does not declare readiness order gets its batch built in ready order (R10's tests).
    rnd = Round(r, rec, clock, pairs(5), SPREAD, staged=not capabilities(rec.inner).ordered)
    if rnd.backend_order != list(SPREAD.ready_order):
        rule_broken(
            "B9", f"the fds became ready in the order {SPREAD.ready_order}, reported {rnd.backend_order}"
        )
    start = rnd.base + SPREAD.start_us * 1000
    want = model(rnd.backend_order, stamps_of(rnd, "arm"), dict(enumerate(SPREAD.hints)), 150_000, start, {})
    assert rnd.log == want, (conformance_policy, rnd.backend_order)


# -- R27 -----------------------------------------------------------------------
class _Gives:
    """A broken policy: gives the batch as ``pick(batch)`` says (a list of positions)."""

    reads_clock = False
    elevated = False
    pick: Callable[[list], list[int]] = staticmethod(lambda batch: list(range(len(batch))))

    def __init__(self, age_from="arm", threshold_ns=0):
        self._seq, self._i = [], 0

    def start(self, batch):
        self._batch, self._seq, self._i = batch, self.pick(batch), 0

    def next(self, now_ns):
        if self._i < len(self._seq):
            self._i += 1
            return self._batch[self._seq[self._i - 1]]
        return None

    def again(self):
        self._i -= 1

    def add(self, events):
        pass


class GivesFirstOnly(_Gives):
    pick = staticmethod(lambda batch: [0][: len(batch)])


class GivesEachTwice(_Gives):
    pick = staticmethod(lambda batch: [i for i in range(len(batch)) for _ in (0, 1)])


class GivesNothing(_Gives):
    pick = staticmethod(lambda batch: list[int]())


@pytest.mark.clause("R27")
@pytest.mark.parametrize("broken", [GivesFirstOnly, GivesEachTwice, GivesNothing])
def test_every_ready_event_runs_once_whatever_the_policy_gives(make_reactor, make_backend, pairs, broken):
    """The reactor, not the policy, keeps "every event of the round runs once": an event a
    policy never gives runs all the same, one it gives twice runs once, and one an earlier
    callback disarmed never runs."""
    n = 5
    rec = RecordingBackend(make_backend(), gather=n)
    r = reactor_with(make_reactor, broken, backend=rec)
    ps = pairs(n)
    ran = []

    def callback(ev):
        if not ran:  # the first callback disarms the event the backend reported last
            r.disarm(ps[rec.batches[-1][-1].data].fd, READ)
        ran.append(ev.data)

    for i, p in enumerate(ps):
        r.arm(p.fd, READ, callback, i)
        p.make_readable()
    r.run_once(0)
    require_batch(rec, n)
    disarmed = rec.batches[-1][-1].data
    assert sorted(ran) == sorted(set(range(n)) - {disarmed}), (broken.__name__, ran, disarmed)
    r.run_once(0)
    assert len(ran) == n - 1, f"{broken.__name__}: an event ran in a later round too ({ran})"


@pytest.mark.clause("R27")
def test_no_event_waits_past_its_round_under_any_policy(
    make_reactor, make_backend, pairs, clock, conformance_policy
):
    """Six connections that stay ready (each callback re-arms with data left), slow callbacks
    and ages past TAIL_US: in every round each event the backend reported runs, once, so an
    event ready and armed waits no more rounds than the backend takes to report it (B10)."""
    n = 6
    rec = RecordingBackend(make_backend(), gather=n)
    r = reactor_with(make_reactor, conformance_policy, clock=clock, backend=rec, tail_us=100)
    ps = pairs(n)
    per_round: list[list] = []

    def callback(ev):
        per_round[-1].append(ev.data)
        ev.hint = ev.data % 3
        clock.advance_us(70)  # slow: the queue ages past TAIL_US within the round
        r.arm(ev.fd, READ, callback, ev.data)  # still readable: ready again next round

    for i, p in enumerate(ps):
        r.arm(p.fd, READ, callback, i)
        p.make_readable()
    for k in range(5):
        per_round.append([])
        before = len(rec.batches)
        r.run_once(0)
        if k == 0:
            require_batch(rec, n)  # the first round holds all six (later ones: as the backend batches)
        reported = [ev.data for b in rec.batches[before:] for ev in b]
        assert sorted(per_round[-1]) == sorted(reported), (conformance_policy, per_round, reported)
    assert all(len(set(got)) == len(got) for got in per_round), per_round


# -- R21 under every policy ------------------------------------------------------
class Escape(BaseException):
    """Stands for KeyboardInterrupt: not an Exception, so it leaves run_once (R21)."""


@pytest.mark.clause("R21")
@pytest.mark.parametrize("cut_at", [1, 3])
def test_a_round_cut_short_loses_nothing_under_every_policy(
    make_reactor, make_backend, pairs, clock, conformance_policy, cut_at
):
    """The cut_at-th callback raises Escape: every other event of the batch runs in the next
    round, once, and the two rounds together run them in the order the policy's model gives
    the whole round (the clock does not move, so nothing is decided differently)."""
    n = 5
    rec = RecordingBackend(make_backend(), gather=n)
    r = reactor_with(make_reactor, conformance_policy, clock=clock, backend=rec, tail_us=150)
    ps = pairs(n)
    ran = []
    base = clock()

    def callback(ev):
        ran.append(ev.data)
        if len(ran) == cut_at:
            raise Escape

    for i, p in enumerate(ps):
        clock.set_ns(base + i * 100_000)
        r.arm(p.fd, READ, callback, i).hint = SPREAD.hints[i]
    rec.inner.flush()
    for i in reversed(range(n)):
        ps[i].make_readable()
    clock.set_ns(base + 500_000)
    with pytest.raises(Escape):
        r.run_once(0)
    require_batch(rec, n)
    assert len(ran) == cut_at
    r.run_once(0)
    assert sorted(ran) == list(range(n)), f"{conformance_policy}: events lost or run twice: {ran}"
    model = policy_model(policy_class(conformance_policy))
    if model is not None:
        order = [ev.data for ev in rec.batches[0]]
        stamps = {i: base + i * 100_000 for i in range(n)}
        want = [
            k for k, _ in model(order, stamps, dict(enumerate(SPREAD.hints)), 150_000, base + 500_000, {})
        ]
        if ran[:cut_at] != want[:cut_at]:
            rule_broken(
                "R26",
                f"before the cut the round ran {ran[:cut_at]}, {conformance_policy}'s model says "
                f"{want[:cut_at]} (backend order {order})",
            )
        assert ran == want, f"{conformance_policy}: the rest ran out of the order it would have run in"
    assert all(ev.state != READY for b in rec.batches for ev in b)
