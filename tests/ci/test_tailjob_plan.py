"""Planning a job: profiles, arms, legs and the randomised interleaved schedule."""

from __future__ import annotations

import pytest

from tailjob.plan import (
    PROFILES,
    Overrides,
    PlanError,
    arms_for,
    parse_assignments,
    plan_legs,
    rmit_schedule,
    server_env,
)
from tailjob.stats import MIN_PAIRS


def test_profiles_reproduce_the_seed_workloads():
    seed = PROFILES["seed"]
    assert (seed.threads, seed.connections, seed.duration_s) == (4, (256,), 30)
    # the seed PR's runs are kept for the report; the profiles run the pairs a verdict needs
    assert dict(seed.seed_pr_runs) == {"io_uring": 8, "epoll": 3}
    assert seed.runs == MIN_PAIRS
    high = PROFILES["high"]
    assert (high.threads, high.connections, high.runs) == (8, (512, 1024), MIN_PAIRS)
    assert dict(high.seed_pr_runs) == {"*": 3}
    assert PROFILES["quick"].seed_pr_runs is None
    quick = PROFILES["quick"]
    assert quick.duration_s <= 5


def test_ab_presets():
    a, b = arms_for("tail")
    assert a.env == {"CWIST_REACTOR_TAIL_US": "3600000"}  # A: off, the baseline
    assert b.env == {"CWIST_REACTOR_TAIL_US": "3500"}  # B: on, the treatment
    a, b = arms_for("backend")
    assert (a.env, b.env) == ({"CWIST_REACTOR_BACKEND": "epoll"}, {"CWIST_REACTOR_BACKEND": "io_uring"})
    a, b = arms_for("aa")
    assert a.env == b.env == {}


def test_custom_arms():
    a, b = arms_for(None, a="", b="CWIST_BENCH_DELAY_US=200 CWIST_HTTP_BATCH=4")
    assert a.env == {}
    assert b.env == {"CWIST_BENCH_DELAY_US": "200", "CWIST_HTTP_BATCH": "4"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("CWIST_HTTP_BATCH", "not K=V"),
        ("CWIST_NOPE=1", "unknown knob CWIST_NOPE"),
        ("CWIST_HTTP_BATCH=0", "CWIST_HTTP_BATCH='0' is invalid"),
        ("CWIST_HTTP_BATCH=1 CWIST_HTTP_BATCH=2", "set twice"),
    ],
)
def test_bad_assignments_are_one_line_errors(text, message):
    with pytest.raises(PlanError, match=message) as e:
        parse_assignments(text, option="--b")
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("--b:")


def test_default_legs_are_each_backend_in_order():
    legs = plan_legs(PROFILES["quick"], arms_for("tail"), Overrides())
    assert [leg.backend for leg in legs] == ["io_uring", "epoll"]


def test_backend_option_selects_one_leg():
    legs = plan_legs(PROFILES["seed"], arms_for("tail"), Overrides(backend="epoll"))
    assert [(leg.backend, leg.runs) for leg in legs] == [("epoll", MIN_PAIRS)]


def test_arms_that_set_the_backend_make_one_leg():
    legs = plan_legs(PROFILES["quick"], arms_for("backend"), Overrides())
    assert [leg.backend for leg in legs] == [None]
    assert [legs[0].backend_for("A"), legs[0].backend_for("B")] == ["epoll", "io_uring"]
    assert legs[0].name == "epoll (A) vs io_uring (B), c64"


@pytest.mark.parametrize("backend, other", [(None, "auto"), ("io_uring", "io_uring")])
def test_one_arm_setting_the_backend_makes_one_leg_the_other_on_backend_or_auto(backend, other):
    # A user's report: with only A setting it, the job made an "io_uring" leg comparing epoll (A)
    # with io_uring (B) and an "epoll" leg comparing epoll with epoll.
    arms = arms_for(None, a="CWIST_REACTOR_BACKEND=epoll", b="")
    legs = plan_legs(PROFILES["quick"], arms, Overrides(backend=backend))
    assert len(legs) == 1
    leg = legs[0]
    assert (leg.backend_for("A"), leg.backend_for("B")) == ("epoll", other)
    assert leg.name == f"epoll (A) vs {other} (B), c64"
    envs = [server_env({"CWIST_REACTOR_BACKEND": "selectors"}, leg, arm) for arm in arms]
    assert [e["CWIST_REACTOR_BACKEND"] for e in envs] == ["epoll", other]


def test_a_blank_backend_in_an_arm_is_the_default_auto():
    leg = plan_legs(
        PROFILES["quick"],
        arms_for(None, a="CWIST_REACTOR_BACKEND=", b="CWIST_REACTOR_BACKEND=epoll"),
        Overrides(),
    )[0]
    assert (leg.backend_for("A"), leg.backend_for("B")) == ("auto", "epoll")


def test_backend_option_that_no_arm_would_use_is_refused():
    with pytest.raises(PlanError, match="--backend epoll: both arms set CWIST_REACTOR_BACKEND"):
        plan_legs(PROFILES["quick"], arms_for("backend"), Overrides(backend="epoll"))


def test_high_profile_has_a_cell_per_backend_and_connection_count():
    legs = plan_legs(PROFILES["high"], arms_for("tail"), Overrides())
    assert [(leg.backend, leg.connections) for leg in legs] == [
        ("io_uring", 512),
        ("io_uring", 1024),
        ("epoll", 512),
        ("epoll", 1024),
    ]


def test_overrides_and_pinning():
    legs = plan_legs(
        PROFILES["quick"],
        arms_for("tail"),
        Overrides(connections=(32,), duration_s=1, runs=1, backend="io_uring"),
    )
    assert [(leg.threads, leg.connections, leg.duration_s, leg.runs) for leg in legs] == [
        (PROFILES["quick"].threads, 32, 1, 1)
    ]
    pinned = plan_legs(PROFILES["quick"], arms_for("tail"), Overrides(pin=True))
    assert all(leg.threads == 1 for leg in pinned)
    explicit = plan_legs(PROFILES["quick"], arms_for("tail"), Overrides(pin=True, threads=2))
    assert all(leg.threads == 2 for leg in explicit)


def test_more_threads_than_connections_is_refused():
    with pytest.raises(PlanError, match="connections"):
        plan_legs(PROFILES["quick"], arms_for("tail"), Overrides(threads=8, connections=(4,)))


def test_server_env_layers_ambient_leg_and_arm():
    ambient = {"PATH": "/bin", "CWIST_HTTP_BATCH": "32", "CWIST_REACTOR_TAIL_US": "1"}
    a, b = arms_for("tail")
    leg = plan_legs(PROFILES["quick"], (a, b), Overrides())[1]
    env = server_env(ambient, leg, b)
    assert env["PATH"] == "/bin"
    assert env["CWIST_HTTP_BATCH"] == "32"  # ambient knobs apply to both arms
    assert env["CWIST_REACTOR_BACKEND"] == "epoll"  # the leg's backend
    assert env["CWIST_REACTOR_TAIL_US"] == "3500"  # the arm wins


def test_rmit_schedule_runs_each_arm_once_per_trial_in_random_order():
    schedule = rmit_schedule(20, seed=5)
    assert len(schedule) == 20
    assert all(sorted(trial) == ["A", "B"] for trial in schedule)
    assert {tuple(t) for t in schedule} == {("A", "B"), ("B", "A")}
    assert schedule == rmit_schedule(20, seed=5)
