"""The virtual-time tier (tailjob.sim): the real reactor and HTTP code, a virtual clock.

Every figure of a simulated run is a function of (code, knobs, workload, seed,
cost model), so these tests assert exact equalities and thresholds on
*virtual* time: nothing here reads the wall clock.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest
import tailjob_testdata  # noqa: F401  (puts scripts/ci on sys.path)

from tailjob import stats
from tailjob.loadspec import ClientClass, LoadSpec
from tailjob.sim import costs, engine

#: The sim engine drives the real backends, so its io_uring runs need a ring: marked ``io_uring``, they
#: skip with the errno where the kernel refuses one (as tests/conftest.py's IO_URING; tests/ci has its own
#: conftest, so that one is not importable by name).
IO_URING = pytest.param("io_uring", marks=pytest.mark.io_uring)
BACKENDS = ["epoll", IO_URING, "selectors"]


def _open(rate, connections=8, duration_s=1.0, seed=1):
    return LoadSpec(
        classes=(ClientClass("all", connections, "open", rate=rate),),
        duration_s=duration_s,
        seed=seed,
        drain_s=1.0,
    )


def _run(backend, spec, env=None, cost=None):
    return engine.simulate(
        engine.SimRun(
            backend=backend, env=dict(env or {}), spec=spec, costs=cost or costs.for_backend(backend)
        )
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_offered_request_is_answered_and_matched(backend):
    doc = _run(backend, _open(2000))
    c = doc["classes"]["all"]
    assert c["offered"] > 1500 and c["answered"] == c["offered"] == c["sent"]
    assert c["errors"] == dict.fromkeys(c["errors"], 0)
    # The server did the work: a request costs at least the cost model's per-request charge.
    assert doc["server"]["requests"] == c["answered"]
    assert doc["all"]["latency"]["min"] >= costs.for_backend(backend).request_us


@pytest.mark.parametrize("backend", ["epoll", IO_URING])
def test_the_same_run_twice_gives_identical_results(backend):
    spec = LoadSpec(
        classes=(
            ClientClass("interactive", 8, "open", rate=200),
            ClientClass("bulk", 16, "closed", depth=16),
        ),
        duration_s=0.5,
        seed=3,
        drain_s=1.0,
    )
    env = {"CWIST_BENCH_DELAY_US": "20", "CWIST_REACTOR_TAIL_US": "3500"}
    a = json.dumps(_run(backend, spec, env), sort_keys=True)
    b = json.dumps(_run(backend, spec, env), sort_keys=True)
    assert a == b


def test_seeds_change_the_schedule_and_so_the_figures():
    a = _run("epoll", _open(5000, seed=1))
    b = _run("epoll", _open(5000, seed=2))
    assert a["classes"]["all"]["offered"] != b["classes"]["all"]["offered"]


def test_injected_service_time_costs_virtual_time_not_real_time():
    base = _run("epoll", _open(500, connections=2))
    slow = _run("epoll", _open(500, connections=2), env={"CWIST_BENCH_DELAY_US": "1000"})
    p50 = lambda d: next(q["us"] for q in d["all"]["latency"]["percentiles"] if q["p"] == 50)  # noqa: E731
    assert p50(slow) - p50(base) >= 1000 - 5  # one request, one millisecond more (HdrHistogram precision)
    assert slow["server"]["busy_us"] >= 1000 * slow["server"]["requests"] > base["server"]["busy_us"]


@pytest.mark.parametrize("backend", ["epoll", IO_URING])
def test_a_stall_of_20_ms_every_200_ms_puts_open_loop_p99_at_10_ms_or_more(backend):
    env = {"CWIST_BENCH_STALL_US": "20000", "CWIST_BENCH_STALL_EVERY_MS": "200"}
    doc = _run(backend, _open(2000, duration_s=2.0), env)
    p99 = next(q["us"] for q in doc["all"]["latency"]["percentiles"] if q["p"] == 99)
    assert p99 >= 10_000
    assert doc["server"]["stalls"] >= 9
    calm = _run(backend, _open(2000, duration_s=2.0))
    assert next(q["us"] for q in calm["all"]["latency"]["percentiles"] if q["p"] == 99) < 1_000


def test_slow_route_costs_only_its_own_requests():
    spec = LoadSpec(
        classes=(
            ClientClass("fast", 8, "open", rate=1000),
            ClientClass("slow", 2, "open", rate=20, path="/slow/"),
        ),
        duration_s=1.0,
        seed=1,
        drain_s=1.0,
    )
    doc = _run("epoll", spec, {"CWIST_BENCH_SLOW_US": "2000"})
    slow = doc["classes"]["slow"]["latency"]
    fast = doc["classes"]["fast"]["latency"]
    assert slow["min"] >= 2000 and fast["min"] < 2000


def test_age_based_dispatch_runs_in_the_simulation():
    spec = LoadSpec(
        classes=(
            ClientClass("interactive", 8, "open", rate=200),
            ClientClass("bulk", 16, "closed", depth=16),
        ),
        duration_s=0.5,
        seed=1,
        drain_s=1.0,
    )
    off = _run("epoll", spec, {"CWIST_BENCH_DELAY_US": "20", "CWIST_REACTOR_TAIL_US": "3600000"})
    on = _run("epoll", spec, {"CWIST_BENCH_DELAY_US": "20", "CWIST_REACTOR_TAIL_US": "3500"})
    assert off["server"]["counters"]["tail_elevations"] == 0
    assert on["server"]["counters"]["tail_elevations"] > 0


# -- the cost model ----------------------------------------------------------------
def test_cost_constants_are_checked_with_one_line_naming_the_option():
    with pytest.raises(costs.CostError, match=r"--sim-cost request_us=-1: accepted"):
        costs.with_overrides(costs.for_backend("epoll"), "request_us=-1")
    with pytest.raises(costs.CostError, match=r"--sim-cost bogus_us=1: unknown constant; accepted "):
        costs.with_overrides(costs.for_backend("epoll"), "bogus_us=1")
    with pytest.raises(
        costs.CostError, match=r"--sim-cost instruction_ns=-2: accepted 0 to 100000 nanoseconds"
    ):
        costs.with_overrides(costs.for_backend("epoll"), "instruction_ns=-2")
    c = costs.with_overrides(costs.for_backend("epoll"), "request_us=20 wait_us=3")
    assert (c.request_us, c.wait_us) == (20.0, 3.0)


def test_every_cost_constant_says_where_it_came_from():
    for backend in ("epoll", "io_uring", "selectors"):  # the constants only: no ring is set up
        for name, source in costs.for_backend(backend).sources().items():
            assert len(source) > 20, name


# -- verdicts over seeds ------------------------------------------------------------
def _ab(a_env, b_env, *, seeds=8):
    # the sim A/B as `ab --tier sim` runs it: the live trial loop with the sim tier's measure
    from tailjob import runner
    from tailjob.measure import Settings
    from tailjob.plan import Leg, arms_for
    from tailjob.sim.measure import SimMeasure
    from tailjob.workloads import plan_load

    settings = Settings(seed=1, warmup=False, load=plan_load("uniform", "open", "2000", None))
    with SimMeasure(processes=2) as measure:
        [lr] = runner.run_job(
            [Leg(0, "epoll", 1, 16, 1, seeds)],
            arms_for(None, a=a_env, b=b_env),
            settings,
            ambient={},
            tier=measure,
        )
    return lr


def _by_key(comps):
    return {c.metric.key: c for c in comps}


def _samples(r, p):
    return next(q["samples"] for q in r.wrk["percentiles"] if q["p"] == p)


def test_a_a_gives_ratio_exactly_one_and_calls_nothing():
    leg = _ab("", "")
    for c in leg.comparisons:
        if c.ratio is not None:
            assert c.ratio == 1.0 and tuple(c.ci) == (1.0, 1.0), c.metric.key
            assert c.verdict == stats.EQUIVALENT
    for per_class in leg.class_comparisons.values():
        for c in per_class:
            assert c.verdict in (stats.EQUIVALENT, stats.NO_VERDICT)


def test_the_extreme_percentiles_are_pooled_over_the_seeds_as_the_live_job_pools_its_runs():
    # As compare_leg does for live runs: p99.9 and beyond come from each arm's merged histograms
    # (whole run and per class), so 8 seeds bound a percentile no single seed's samples can.
    from tailjob.metrics import POOLED_KEYS

    leg = _ab("", "CWIST_BENCH_DELAY_US=4")
    comps, runs_a = _by_key(leg.comparisons), leg.measured("A")
    for key in POOLED_KEYS:
        c = comps[key]
        assert c.estimator == "pooled", key
        assert c.samples_a == pytest.approx(sum(_samples(r, POOLED_KEYS[key]) for r in runs_a), abs=8)
    # each seed alone has too few samples beyond p99.9 to bound it; the 8 seeds merged have enough
    assert max(_samples(r, 99.9) for r in runs_a) < stats.samples_to_bound(99.9)
    assert comps["p99.9"].verdict != stats.NO_VERDICT
    assert comps["p50"].estimator == "median"


def test_a_ten_percent_per_request_cost_in_arm_b_is_a_p99_regression():
    # 4 us of injected service per request is +10 % of the model's ~37 us (epoll).
    comps = _by_key(_ab("", "CWIST_BENCH_DELAY_US=4").comparisons)
    assert comps["p99"].verdict == stats.REGRESSION
    assert comps["cpu_us_per_req"].verdict == stats.REGRESSION


def test_arms_of_a_pair_share_the_seed():
    leg = _ab("", "CWIST_BENCH_DELAY_US=4", seeds=2)
    a, b = leg.measured("A"), leg.measured("B")
    assert [r.wrk["seed"] for r in a] == [r.wrk["seed"] for r in b] == [1, 2]
    assert [r.wrk["offered"] for r in a] == [r.wrk["offered"] for r in b]


@pytest.mark.parametrize("backend", ["epoll", IO_URING])
def test_harvesting_mid_round_takes_what_arrived_during_the_round(backend):
    spec = LoadSpec(
        classes=(
            ClientClass("interactive", 8, "open", rate=400),
            ClientClass("bulk", 16, "closed", depth=16),
        ),
        duration_s=0.5,
        seed=1,
        drain_s=1.0,
    )
    env = {"CWIST_BENCH_DELAY_US": "20", "CWIST_REACTOR_TAIL_US": "3500"}
    off = _run(backend, spec, env)
    on = _run(backend, spec, {**env, "CWIST_REACTOR_HARVEST_US": "500"})
    assert off["server"]["counters"]["harvests"] == 0
    assert on["server"]["counters"]["harvests"] > 0 and on["server"]["counters"]["harvested"] > 0

    # What was harvested ran in the round it arrived in: the interactive class waits less.
    def p50(doc):
        return next(q["us"] for q in doc["classes"]["interactive"]["latency"]["percentiles"] if q["p"] == 50)

    assert p50(on) < p50(off)


@pytest.mark.parametrize("backend", ["epoll", IO_URING])
@pytest.mark.parametrize("policy", ["age", "oldest", "lifo", "shortest"])
def test_each_policy_is_charged_its_own_counted_cost_per_round_and_per_event(backend, policy, monkeypatch):
    spec = _open(2000, duration_s=0.5)
    knobs = {"CWIST_REACTOR_TAIL_US": "3500"}
    off = _run(backend, spec, {**knobs, "CWIST_REACTOR_POLICY": "backend"})
    sizes: collections.Counter = collections.Counter()  # events per reporting wait -> waits
    wait = engine._Backend._wait

    def counted(self, timeout_s):
        got = wait(self, timeout_s)
        sizes[len(got)] += bool(got)
        return got

    monkeypatch.setattr(engine._Backend, "_wait", counted)
    on = _run(backend, spec, {**knobs, "CWIST_REACTOR_POLICY": policy})
    model = costs.for_backend(backend)
    assert off["server"]["requests"] == on["server"]["requests"]
    extra = on["server"]["busy_us"] - off["server"]["busy_us"]
    # (instructions over backend order's: a round of one event, per round and per event of a
    # larger one) x instruction_ns
    ns = model.instruction_ns / 1000
    one, per_round, per_event = model.policy_us(policy)
    assert (one, per_round, per_event) == pytest.approx(
        tuple(x * ns for x in costs.policy_instructions(policy))
    )
    assert sizes[1] and any(n > 1 and k for n, k in sizes.items())  # both kinds of round
    want = sum(k * max(0.0, one if n == 1 else per_round + n * per_event) for n, k in sizes.items())
    assert extra == pytest.approx(want, rel=0.01)


def test_the_policy_cost_is_fitted_from_rounds_of_one_four_and_sixteen(monkeypatch):
    # A policy adding 1,000 instructions to a round of one event, and 1,600 a round plus 100 an
    # event to a larger one: 1,600/4 + 100 = 500 per request at 4 in flight, 1,600/16 + 100 = 200 at 16.
    assert costs.BATCHES == (1, 4, 16)
    monkeypatch.setitem(costs.COUNTED, "backend", (50_000, 40_000, 37_000))
    monkeypatch.setitem(costs.COUNTED, "x", (51_000, 40_500, 37_200))
    assert costs.policy_instructions("x") == pytest.approx((1000, 1600, 100))
    model = costs.for_backend("epoll")
    ns = model.instruction_ns / 1000
    assert model.policy_us("x") == pytest.approx((1000 * ns, 1600 * ns, 100 * ns))
    assert model.policy_us("module:Class") == (0.0, 0.0, 0.0)  # not counted: nothing extra


def test_the_fitted_counts_are_the_committed_reports():
    # The fit's inputs are the reports in POLICY_COUNT, each total exact: the first "total" row of
    # each policy's count at each batch on epoll, and backend order's at one in flight on both backends,
    # all counted from one tree.
    reports = Path(__file__).resolve().parents[2] / costs.POLICY_COUNT
    trees = {
        re.search(r"from the tree at (\w+)", f.read_text(encoding="utf-8"))[1] for f in reports.glob("*.md")
    }
    assert len(trees) == 1, trees

    def total(name):
        text = (reports / f"{name}.md").read_text(encoding="utf-8")
        return int(re.search(r"^\| \*\*total\*\* \| \*\*([\d,]+)\*\* \|$", text, re.M)[1].replace(",", ""))

    for policy, counted in costs.COUNTED.items():
        assert counted == tuple(total(f"{policy}-bench-epoll-c{n}") for n in costs.BATCHES), policy
    assert costs.TOTAL == {b: total(f"backend-bench-{b}-c1") for b in ("epoll", "io_uring")}


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_the_cost_model_page_quotes_the_fitted_costs(lang):
    # docs/<lang>/sim-tier.md, "The cost model": each policy's row is policy_instructions (rounded) and
    # policy_us at the default instruction_ns, on both backends, and instruction_ns's row is the model's.
    page = (Path(__file__).resolve().parents[2] / "docs" / lang / "sim-tier.md").read_text(encoding="utf-8")
    models = [costs.for_backend(b) for b in ("epoll", "io_uring")]
    for policy in (p for p in costs.COUNTED if p != "backend"):
        counts = [f"{round(x):,}" for x in costs.policy_instructions(policy)]
        cells = [f"{n} ({us:.2f}" for m in models for n, us in zip(counts, m.policy_us(policy))]
        row = re.search(rf"^\| `{policy}` \| (.*) \|$", page, re.M)[1].replace(" us)", ")").split(" | ")
        assert [c.rstrip(")") for c in row] == cells, policy
    ns = re.search(r"^\| `instruction_ns` \| ([\d.]+) \| ([\d.]+) \|", page, re.M)
    assert [float(ns[1]), float(ns[2])] == [m.instruction_ns for m in models]


def test_a_policy_in_backend_order_costs_nothing_extra():
    # age and lifo with TAIL_US=0 are backend order (policies/__init__.py): the reactor asks them nothing.
    spec = _open(2000, duration_s=0.5)
    base = _run("epoll", spec, {"CWIST_REACTOR_POLICY": "backend", "CWIST_REACTOR_TAIL_US": "0"})
    for policy in ("age", "lifo"):
        doc = _run("epoll", spec, {"CWIST_REACTOR_POLICY": policy, "CWIST_REACTOR_TAIL_US": "0"})
        assert doc["server"]["busy_us"] == base["server"]["busy_us"], policy


def test_the_policy_cost_scales_with_instruction_ns():
    # The high bound (instruction_ns at the c256 count): the same instructions, each dearer.
    model = costs.for_backend("epoll")
    top = round(model.request_us * 1000 / costs.LOADED["epoll"], 4)  # 0.4472: bounds.sh's epoll figure
    high = costs.with_overrides(model, f"instruction_ns={top}")
    ratio = top / model.instruction_ns
    assert high.policy_us("lifo") == pytest.approx(tuple(us * ratio for us in model.policy_us("lifo")))
    with pytest.raises(costs.CostError, match=r"policy_round_share=1: unknown constant"):
        costs.with_overrides(model, "policy_round_share=1")


def test_arm_a_runs_the_code_of_a_git_ref(tmp_path):
    # --a-ref: arm A imports tailreactor from a worktree of the ref, arm B from this tree.
    from pathlib import Path

    from tailjob import refcode

    repo = Path(__file__).resolve().parents[2]
    commit = refcode.resolve(repo, "HEAD")
    with refcode.checkout(repo, commit) as tree:
        from tailjob import runner
        from tailjob.measure import Settings
        from tailjob.plan import Leg, arms_for
        from tailjob.sim.measure import SimMeasure
        from tailjob.workloads import plan_load

        settings = Settings(seed=1, warmup=False, load=plan_load("uniform", "open", "1000", None))
        with SimMeasure(code={"A": str(tree / "reference")}, processes=1) as measure:
            [leg] = runner.run_job(
                [Leg(0, "epoll", 1, 8, 1, 2)], arms_for(None, a="", b=""), settings, ambient={}, tier=measure
            )
        assert all(r.code.startswith(str(tree)) for r in leg.measured("A"))
        assert not any(r.code.startswith(str(tree)) for r in leg.measured("B"))
    assert not tree.exists()
    with pytest.raises(refcode.RefError, match=r"--a-ref 'no-such-ref': not a commit of this repository"):
        refcode.resolve(repo, "no-such-ref")


# -- the closed-loop client's turnaround --------------------------------------------
def _closed(connections=32, duration_s=0.3, seed=1):
    return LoadSpec(
        classes=(ClientClass("all", connections, "closed"),), duration_s=duration_s, seed=seed, drain_s=1.0
    )


def _pcts(doc):
    return [q["us"] for q in doc["all"]["latency"]["percentiles"]]


def test_without_a_turnaround_the_closed_loop_is_in_lockstep_and_the_seed_changes_nothing():
    none = costs.with_overrides(costs.for_backend("epoll"), "client_us=0")
    a, b = _run("epoll", _closed(seed=1), cost=none), _run("epoll", _closed(seed=2), cost=none)
    assert _pcts(a) == _pcts(b) and a["server"]["counters"] == b["server"]["counters"]


def test_wrks_closed_loop_turns_around_in_wrk_us_and_the_load_clients_in_client_us():
    # Closed-loop uniform is wrk's loop live, the other closed classes the job's load client's: each
    # client's turnaround is its own constant, and a constant of the other client changes nothing.
    def run(client, text):
        model = costs.with_overrides(costs.for_backend("epoll"), text)
        return engine.simulate(engine.SimRun("epoll", {}, _closed(seed=1), model, client))

    loadgen_200, wrk_200 = run("loadgen", "client_us=200 wrk_us=0"), run("wrk", "wrk_us=200 client_us=0")
    assert _pcts(wrk_200) == _pcts(loadgen_200)
    assert wrk_200["server"]["counters"] == loadgen_200["server"]["counters"]
    lockstep = run("loadgen", "client_us=0 wrk_us=0")
    assert _pcts(run("wrk", "client_us=200 wrk_us=0")) == _pcts(lockstep)
    assert _pcts(run("loadgen", "wrk_us=200 client_us=0")) == _pcts(lockstep)
    assert _pcts(loadgen_200) != _pcts(lockstep)


def test_a_client_turnaround_from_the_seeded_rng_desynchronises_the_closed_loop():
    cost = costs.with_overrides(costs.for_backend("epoll"), "client_us=200")
    tail = {"CWIST_REACTOR_TAIL_US": "3500"}
    a, b = _run("epoll", _closed(seed=1), tail, cost), _run("epoll", _closed(seed=2), tail, cost)
    assert _pcts(a) != _pcts(b)  # the seed now reaches the closed loop
    assert _pcts(a) == _pcts(_run("epoll", _closed(seed=1), tail, cost))  # and it is still deterministic
    lockstep = _run(
        "epoll", _closed(seed=1), tail, costs.with_overrides(costs.for_backend("epoll"), "client_us=0")
    )
    # Rounds hold the connections whose next request arrived in time, not all of them every round.
    assert a["server"]["counters"]["rounds"] > lockstep["server"]["counters"]["rounds"]
    # The turnaround is the client's time: latency runs from the request's send, so it adds none, and
    # fewer requests are in flight at once (a client in its turnaround has none): the median is shorter.
    p50 = lambda d: next(q["us"] for q in d["all"]["latency"]["percentiles"] if q["p"] == 50)  # noqa: E731
    assert p50(a) < p50(lockstep)
