"""Hypothesis strategies: reactor programs and age-dispatch scenarios.

Role
----
* :func:`steps` / :func:`programs` -- sequences of arm, disarm, write, read,
  close, timer, cancel, clock, post and run steps for :class:`~.driver.Driver`
  (clause R20).  Pair and timer arguments are small integers taken modulo
  what is live, so every program is valid and shrinks to a minimal one.
* :func:`age_scenarios` -- one dispatch round under age-based dispatch: arm
  times, the order the fds become ready, the threshold, the round start and
  how long each callback takes (clauses R10-R13), for comparison with
  :func:`~.model.age_order`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

__all__ = ["steps", "programs", "AgeScenario", "age_scenarios", "policy_scenarios"]

_INDEX = st.integers(0, 7)


def steps() -> st.SearchStrategy[tuple]:
    """One step: ``(name, *int_args)``; see :data:`tailreactor_conformance.driver.STEPS`."""
    return st.one_of(
        st.just(("open",)),
        st.tuples(st.just("arm"), _INDEX),
        st.tuples(st.just("disarm"), _INDEX),
        st.tuples(st.just("write"), _INDEX, st.integers(1, 64)),
        st.tuples(st.just("read"), _INDEX),
        st.tuples(st.just("close_peer"), _INDEX),
        st.tuples(st.just("close"), _INDEX),
        st.tuples(st.just("timer"), st.sampled_from([0, 1, 500, 1000, 2500])),
        st.tuples(st.just("cancel"), _INDEX),
        st.tuples(st.just("advance"), st.sampled_from([1, 499, 500, 1000, 3000])),
        st.tuples(st.just("post"), st.integers(1, 3)),
        st.just(("run",)),
        st.just(("settle",)),
    )


def programs(max_steps: int = 40) -> st.SearchStrategy[list[tuple]]:
    """A program: a few ``open`` steps, then up to ``max_steps`` steps, then ``settle``."""
    return st.builds(
        lambda n_open, body: [("open",)] * n_open + body + [("settle",)],
        st.integers(1, 4),
        st.lists(steps(), max_size=max_steps),
    )


@dataclass(frozen=True)
class AgeScenario:
    """One round of age-based dispatch.

    ``arm_us[i]``: clock (us) when event i is armed (non-decreasing: a
    monotonic clock); ``ready_order``: the order the fds become readable;
    ``tail_us``: CWIST_REACTOR_TAIL_US; ``start_us``: clock at round start
    (>= the last arm); ``slow_us[i]``: how far event i's callback moves the
    clock; ``hints[i]``: event i's ``Event.hint`` (a size-aware policy's key;
    empty: all 0).
    """

    arm_us: tuple[int, ...]
    ready_order: tuple[int, ...]
    tail_us: int
    start_us: int
    slow_us: tuple[int, ...]
    hints: tuple[int, ...] = ()


@st.composite
def age_scenarios(draw, min_events: int = 2, max_events: int = 7, tail_us=None) -> AgeScenario:
    n = draw(st.integers(min_events, max_events))
    gaps = draw(st.lists(st.sampled_from([0, 1, 100, 499, 500, 1000]), min_size=n, max_size=n))
    arm_us, t = [], 0
    for g in gaps:
        t += g
        arm_us.append(t)
    ready_order = draw(st.permutations(range(n)))
    tail = draw(st.sampled_from([1, 500, 1000, 2000]) if tail_us is None else st.just(tail_us))
    start = arm_us[-1] + draw(st.sampled_from([0, 1, 499, 500, 1000, 2500]))
    slow = draw(st.lists(st.sampled_from([0, 0, 1, 300, 1000]), min_size=n, max_size=n))
    return AgeScenario(tuple(arm_us), tuple(ready_order), tail, start, tuple(slow))


@st.composite
def policy_scenarios(draw, min_events: int = 2, max_events: int = 7) -> AgeScenario:
    """An :func:`age_scenarios` round with a hint per event (0, 1 or 16: a new, an
    interactive and a pipelining connection), for every policy's model (clause R26)."""
    sc = draw(age_scenarios(min_events, max_events))
    hints = draw(st.lists(st.sampled_from([0, 1, 1, 16]), min_size=len(sc.arm_us), max_size=len(sc.arm_us)))
    return AgeScenario(sc.arm_us, sc.ready_order, sc.tail_us, sc.start_us, sc.slow_us, tuple(hints))
