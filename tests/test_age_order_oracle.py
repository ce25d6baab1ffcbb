"""Age-based dispatch against a brute-force oracle of its rule (policies/age.py), with Hypothesis.

The rule: before each delivery, if the oldest remaining ``READY`` event of the
round's batch has aged (``now - stamp >= CWIST_REACTOR_TAIL_US``), it runs next,
elevated (ties: backend order); else the next ``READY`` event in backend order
runs, not elevated.  :class:`tailreactor.policies.age.AgeOrder` computes it faster
(the batch sorted by stamp once per round, and a binary search over its
stamps); these tests evaluate the rule itself at each delivery.

* **Unit oracle**: ``AgeOrder`` alone, driven as ``Reactor._dispatch`` drives it,
  over batches in age order, reversed, shuffled and nearly sorted, with ties,
  from round starts where nothing, some or every event has aged;
  taken events are re-stamped in place (the hot re-arm) or cancelled, and
  events join the batch as a harvest adds them (new ones, and ones re-armed
  in place), with ``AgeOrder.add``.
* **Live oracle**: the real reactor on real socketpairs and a ``ManualClock``.
  Each callback checks that it is the event the rule picks now (on a copy of
  the batch, with the events' current states and stamps) and that
  ``dispatch_late()`` says whether it was elevated.  Callbacks move the clock,
  re-arm themselves, arm or disarm other pairs (which may be ``READY`` in the
  same batch), post arms (drained mid-batch with a drain chunk), and raise
  ``KeyboardInterrupt`` (so the next round leads with carried events, which
  under ``AGE_FROM=ready`` keep their older ready stamp); with
  ``CWIST_REACTOR_HARVEST_US`` on, the events they re-arm join the round.

Written from a fresh-eyes review of an earlier age order with two code paths (issue 9).
"""

from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailreactor import READ, Config, Reactor
from tailreactor.backends import create_backend
from tailreactor.clock import ManualClock
from tailreactor.dispatch import NEVER
from tailreactor.events import ARMED, CANCELLED, DONE, READY
from tailreactor.policies.age import AgeOrder
from tailreactor_conformance.harness import RecordingBackend

BACKENDS = ["epoll", pytest.param("io_uring", marks=pytest.mark.io_uring)]  # as tests/conftest.py
T_US = 1000
T_NS = T_US * 1000


def rule(batch: list, stamp, now_ns: int):
    """The rule's pick among ``batch`` (backend order) at ``now_ns``: (event, elevated), or None."""
    remaining = [e for e in batch if e.state == READY]
    if not remaining:
        return None
    pos = {id(e): k for k, e in enumerate(batch)}
    oldest = min(remaining, key=lambda e: (stamp(e), pos[id(e)]))
    if now_ns - stamp(oldest) >= T_NS:
        return oldest, True
    return remaining[0], False


# -- unit oracle ------------------------------------------------------------------------
class Ev:
    __slots__ = ("name", "armed_ns", "ready_ns", "state")

    def __init__(self, name, stamp_ns):
        self.name, self.armed_ns, self.ready_ns, self.state = name, stamp_ns, stamp_ns, READY

    def __repr__(self):
        return f"Ev({self.name}, {self.armed_ns}, state {self.state})"


_GONE = Ev("placeholder", 0)  # what Reactor._harvest leaves where a re-joining event was
_GONE.state = CANCELLED


@settings(max_examples=300, deadline=None)  # the reactor-level test below walks the same rule too
@given(data=st.data())
def test_age_order_picks_what_the_rule_picks(data):
    n = data.draw(st.integers(1, 9), label="n")
    age_from = data.draw(st.sampled_from(["arm", "ready"]), label="age_from")
    stamps = data.draw(
        st.lists(st.sampled_from([0, 0, 1, 500, 999, 1000, 1001, 2000, 5000]), min_size=n, max_size=n),
        label="stamps_us",
    )
    shape = data.draw(
        st.sampled_from(["ascending", "descending", "ascending-but-first", "shuffled"]), label="shape"
    )
    idx = sorted(range(n), key=lambda i: stamps[i])
    if shape == "descending":
        idx.reverse()
    elif shape == "ascending-but-first":
        idx = idx[1:] + idx[:1]
    elif shape == "shuffled":
        idx = data.draw(st.permutations(range(n)), label="perm")
    batch = [Ev(i, stamps[i] * 1000) for i in idx]
    at_start = {id(e): e.armed_ns for e in batch}  # a READY event is never re-stamped
    stamp = lambda e: at_start[id(e)]  # noqa: E731
    # The clock at the round's start: from 6000 us on, every event has aged by the first
    # delivery (the whole batch is one run).
    now = data.draw(st.sampled_from([0, 1000, 2000, 6000, 9000]), label="round_start_us") * 1000
    age = AgeOrder(batch, age_from, T_NS)
    # Walk the batch as Reactor._dispatch does: runs first, then backend order.
    run, r, i = [], 0, 0
    joins = 0
    for _ in range(100):
        now += data.draw(st.sampled_from([0, 0, 1, 300, 1000, 3000]), label="advance_us") * 1000
        if r >= len(run) and now >= age.aged_at:
            run, r = age.take_aged(now), 0
            if age.aged_at == NEVER:
                i = n
        if r < len(run):
            ev, late = run[r], True
            r += 1
        elif i < n:
            ev, late = batch[i], False
            i += 1
        else:
            break
        if ev.state != READY:
            continue
        assert (ev, late) == rule(batch, stamp, now), (shape, batch, now)
        ev.state = DONE
        act = data.draw(st.sampled_from(["none", "rearm_in_place", "cancel_another", "join"]), label="act")
        if act == "rearm_in_place":  # Reactor.arm from its own callback: ARMED, stamped now
            ev.armed_ns = ev.ready_ns = now + data.draw(st.sampled_from([0, 1, 400]), label="in_cb_us") * 1000
            ev.state = ARMED
        elif act == "cancel_another":
            others = [e for e in batch if e.state == READY]
            if others:
                data.draw(st.sampled_from(others), label="victim").state = CANCELLED
        elif act == "join" and joins < 3:
            # A harvest (Reactor._harvest): new events armed earlier, and events re-armed in
            # place, join at the end of the batch, stamped ready now; an earlier entry of an
            # event re-armed in place gives way to a placeholder.
            joins += 1
            k = data.draw(st.integers(0, 3), label="joining")
            new = [
                Ev(
                    f"h{joins}.{j}",
                    now - data.draw(st.sampled_from([0, 1, 999, 1000, 5000]), label="armed_ago_us") * 1000,
                )
                for j in range(k)
            ]
            again = [e for e in batch if e.state == ARMED][: data.draw(st.integers(0, 2), label="again")]
            joined = new + again
            for e in joined:
                e.state, e.ready_ns = READY, now
                at_start[id(e)] = e.armed_ns if age_from == "arm" else e.ready_ns
            if joined:
                ids = {id(e) for e in joined}
                batch[:] = [_GONE if id(e) in ids else e for e in batch] + joined
                n = len(batch)
                age.add(joined)
                run, r = [], 0
    assert all(e.state != READY for e in batch), "an event was never handed out"


# -- live oracle ------------------------------------------------------------------------
class Ranked(RecordingBackend):
    """Returns each batch in the order of ``rank`` (fd -> rank): a chosen backend order."""

    rank: dict = {}

    def wait(self, timeout_s):
        got = sorted(self.inner.wait(timeout_s), key=lambda pair: self.rank.get(pair[0].fd, 1 << 30))
        if got:
            self.batches.append([tok for tok, _ in got])
        return got


class OracleReactor(Reactor):
    """The reference reactor, keeping a copy of each round's batch for the oracle."""

    def _dispatch(self, batch, round_start):
        self.round_batch = list(batch)
        self.delivered = set()
        self.round_start = round_start
        ran = super()._dispatch(batch, round_start)
        left = [e for e in self.round_batch if e.state == READY and not self.past_bound(e)]
        if left:
            self.errors.append(f"the round ended with READY events left: {left}")
        return ran

    def past_bound(self, ev) -> bool:
        """A harvested event the round may not run: its bound is spent (dispatch.py, "Harvesting
        mid-round"); it stays READY and leads the next round."""
        due = self._due
        return bool(due.harvest_ns) and ev.ready_ns > self.round_start and due.harvest_left <= 0

    def _harvest(self, age, now, limit):
        took = super()._harvest(age, now, limit)
        # The batch grew (harvest): the rule now runs over the grown batch, and an event
        # that joined again was re-armed in place: a new arming, not a second delivery.
        joined = self._state.batch[len(self.round_batch) :]
        self.round_batch = list(self._state.batch)
        self.delivered -= {id(e) for e in joined}
        return took

    def check(self, ev, stamp) -> None:
        """At the start of ``ev``'s callback: is it the rule's pick, and is it flagged right?"""
        if id(ev) in self.delivered:
            self.errors.append(f"{ev} delivered twice in one round")
        self.delivered.add(id(ev))
        # ev is DONE now; it was READY when the reactor picked it.  Harvested events past the
        # round's bound are not the round's to run: the rule picks among the others.
        skipped = [e for e in self.round_batch if e.state == READY and self.past_bound(e)]
        for e in skipped:
            e.state = DONE
        state, ev.state = ev.state, READY
        want = rule(self.round_batch, stamp, self.clock())
        ev.state = state
        for e in skipped:
            e.state = READY
        got = (ev, self.dispatch_late())
        if want is None or got[0] is not want[0] or got[1] != want[1]:
            self.errors.append(
                f"now {self.clock()}: got {got}, the rule says {want}; batch "
                f"{[(e.fd, stamp(e), e.state) for e in self.round_batch]}"
            )


ACTIONS = st.one_of(
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 300, 999, 1000, 2500])),
    st.just(("rearm_self",)),
    st.tuples(st.just("arm_other"), st.integers(0, 7)),
    st.tuples(st.just("disarm_other"), st.integers(0, 7)),
    st.tuples(st.just("post_arm_other"), st.integers(0, 7)),
    st.just(("interrupt",)),
)


@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_reactor_delivers_what_the_rule_picks(backend_name, data):
    n = data.draw(st.integers(1, 8), label="n")
    age_from = data.draw(st.sampled_from(["arm", "ready"]), label="age_from")
    arm_at = data.draw(
        st.lists(st.sampled_from([0, 0, 1, 400, 999, 1000, 1500, 3000]), min_size=n, max_size=n),
        label="arm_at_us",
    )
    order = data.draw(st.sampled_from(["age", "reverse", "random"]), label="backend_order")
    if order == "random":
        ranked = data.draw(st.permutations(range(n)), label="perm")
    else:
        ranked = sorted(range(n), key=lambda i: arm_at[i], reverse=order == "reverse")
    plans = [data.draw(st.lists(ACTIONS, max_size=3), label=f"plan_{i}") for i in range(n)]
    lag = data.draw(st.sampled_from([0, 1, 500, 1000, 3000]), label="lag_us")
    rounds = data.draw(st.integers(1, 4), label="rounds")
    drain_chunk = data.draw(st.sampled_from([0, 1, 2]), label="drain_chunk")
    # Often cut the first round short, so that the next one leads with carried events.
    cut_first = data.draw(st.booleans(), label="cut_first_round")
    # Harvesting mid-round: events re-armed by the callbacks (their byte is still
    # queued) are ready again and join the round they were re-armed in.
    harvest_us = data.draw(st.sampled_from([0, 0, 1, 500]), label="harvest_us")

    clock = ManualClock()
    rec = Ranked(create_backend(backend_name))
    cfg = Config.default().replace(
        tail_us=T_US, age_from=age_from, drain_chunk=drain_chunk, harvest_us=harvest_us
    )
    r = OracleReactor(rec, config=cfg, clock=clock)
    r.errors = []
    stamp = (lambda e: e.ready_ns) if age_from == "ready" else (lambda e: e.armed_ns)
    pairs = [socket.socketpair() for _ in range(n)]
    fds = [a.fileno() for a, _ in pairs]
    rec.rank = {fds[i]: k for k, i in enumerate(ranked)}
    interrupts = [0]
    delivered = [0]

    def make_cb(i):
        def cb(ev):
            r.check(ev, stamp)
            delivered[0] += 1
            for act in plans[i]:
                kind, j = act[0], (act[1] % n if len(act) > 1 else i)
                if kind == "advance":
                    clock.advance_us(act[1])
                elif kind == "rearm_self":
                    r.arm(ev.fd, READ, cbs[i])
                elif j == i:
                    continue
                elif kind == "arm_other":
                    r.arm(fds[j], READ, cbs[j])
                elif kind == "disarm_other":
                    r.disarm(fds[j], READ)
                elif kind == "post_arm_other":
                    r.post(lambda _data, j=j: r.arm(fds[j], READ, cbs[j]))
                elif kind == "interrupt" and interrupts[0] < 2:
                    interrupts[0] += 1
                    raise KeyboardInterrupt
            if cut_first and delivered[0] == 1:  # after its plan: a re-arm joins the next round
                interrupts[0] += 1
                raise KeyboardInterrupt

        return cb

    cbs = [make_cb(i) for i in range(n)]
    try:
        base = clock()
        for i in sorted(range(n), key=lambda i: arm_at[i]):
            clock.set_ns(base + arm_at[i] * 1000)
            r.arm(fds[i], READ, cbs[i])
            pairs[i][1].send(b"x")
        r.flush()
        clock.advance_us(lag)
        for _ in range(rounds + 2):  # +2: rounds that take over an interrupted one
            try:
                r.run_once(0.001)
            except KeyboardInterrupt:
                pass
            clock.advance_us(data.draw(st.sampled_from([0, 500, 2000]), label="between_rounds_us"))
        assert r.errors == [], "\n".join(r.errors[:5])
    finally:
        r.close()
        for a, b in pairs:
            a.close()
            b.close()
