"""The open-loop load client (tailjob.loadgen): schedules, matching, intended-time latency.

Unit tests check the schedules and the flags exactly (seeded, no clock).  The
end-to-end tests run the real client process against the real bench server and
assert counts, order and gross effects only (the machine is shared): every
offered request is answered and matched to its send, and a server stall shows
in the requests scheduled during it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
import tailjob_testdata  # noqa: F401  (puts scripts/ci on sys.path)

from tailjob import loadgen, loadspec
from tailjob.loadspec import ClientClass, LoadSpec, SpecError


# -- schedules (pure) ------------------------------------------------------------
def test_constant_schedule_is_evenly_spaced_and_staggered_across_connections():
    # 4 connections sharing 1000 req/s: each sends every 4 ms, connection i offset by i ms.
    times = [
        list(
            loadspec.intended_times(
                "constant",
                rate=1000,
                connections=4,
                index=i,
                rng=random.Random(0),
                start_ns=0,
                end_ns=20_000_000,
            )
        )
        for i in range(4)
    ]
    assert times[0] == [0, 4_000_000, 8_000_000, 12_000_000, 16_000_000]
    assert times[1][:2] == [1_000_000, 5_000_000]
    merged = sorted(t for ts in times for t in ts)
    assert merged == [k * 1_000_000 for k in range(20)]  # one every ms over the class


def test_poisson_schedule_is_seeded_and_has_the_asked_rate():
    def draw(seed):
        return list(
            loadspec.intended_times(
                "poisson",
                rate=2000,
                connections=1,
                index=0,
                rng=random.Random(seed),
                start_ns=0,
                end_ns=10_000_000_000,
            )
        )

    a, b, c = draw(7), draw(7), draw(8)
    assert a == b and a != c  # reproducible from the seed
    assert 19_000 < len(a) < 21_000  # 2000/s over 10 s: 20000 +- 7 sigma
    assert all(x < y for x, y in zip(a, a[1:]))  # strictly increasing
    assert all(0 <= t < 10_000_000_000 for t in a)


def test_spec_round_trips_through_json_and_rejects_bad_classes():
    spec = LoadSpec(
        classes=(
            ClientClass("interactive", 4, "open", rate=100.0),
            ClientClass("bulk", 8, "closed", depth=16),
        ),
        duration_s=2.0,
        seed=3,
    )
    assert LoadSpec.from_json(spec.to_json()) == spec
    for bad, words in [
        (ClientClass("x", 0, "open", rate=10), "connections"),
        (ClientClass("x", 1, "open", rate=0), "rate"),
        (ClientClass("x", 1, "sideways"), "loop"),
        (ClientClass("x", 1, "open", rate=5, schedule="bursty"), "schedule"),
        (ClientClass("x", 1, "closed", depth=0), "depth"),
        (ClientClass("x", 1, "closed", path="user/"), "path"),
        (ClientClass("x", 1, "closed", think_ms=-1), "think_ms"),
    ]:
        with pytest.raises(SpecError, match=words):
            bad.check()
    with pytest.raises(SpecError, match="twice"):
        LoadSpec(classes=(ClientClass("a", 1, "closed"), ClientClass("a", 1, "closed")), duration_s=1).check()


def test_saturation_flag_at_two_percent_short():
    assert loadspec.saturated(offered=1000, achieved=979) is True
    assert loadspec.saturated(offered=1000, achieved=981) is False
    assert loadspec.saturated(offered=None, achieved=500) is False  # closed loop: nothing offered


# -- the real client against the real bench server ---------------------------------
def _run(server, spec: LoadSpec) -> dict:
    done = subprocess.run(
        loadgen.command(f"http://127.0.0.1:{server.port}/", spec),
        capture_output=True,
        text=True,
        timeout=spec.duration_s + 60,
        env=loadgen.client_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return loadspec.parse_output(done.stdout)


@pytest.fixture
def bench(backend_name):
    """``bench(**CWIST_vars)`` -> a running tailreactor-bench on the parametrized backend."""
    from http_helpers import bench_env, start_bench

    servers = []

    def start(**env):
        srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=backend_name, **env))
        servers.append(srv)
        assert srv.backend == backend_name
        return srv

    yield start
    for s in servers:
        s.stop()


def test_every_offered_request_is_answered_and_matched(bench):
    srv = bench()
    spec = LoadSpec(
        classes=(
            ClientClass("interactive", 3, "open", rate=300.0),
            ClientClass("bulk", 2, "closed", depth=16),
        ),
        duration_s=1.0,
        seed=5,
    )
    out = _run(srv, spec)
    inter, bulk = out["classes"]["interactive"], out["classes"]["bulk"]
    # Every request offered in the window was sent, answered once, and its echo matched.
    assert inter["offered"] == inter["sent"] == inter["answered"] > 0
    assert bulk["sent"] == bulk["answered"] > 16 and bulk["answered"] % 16 == 0  # whole batches
    for c in (inter, bulk):
        assert c["errors"] == dict.fromkeys(loadspec.ERROR_KINDS, 0)
        assert c["latency"]["count"] == c["answered"]
    assert out["all"]["latency"]["count"] == inter["answered"] + bulk["answered"]
    # one process per class (a busy class cannot delay another's timers), merged into one document
    assert [p["classes"] for p in out["processes"]] == [["interactive"], ["bulk"]]
    assert inter["offered_rps"] == pytest.approx(inter["offered"] / 1.0)
    assert [q["p"] for q in inter["latency"]["percentiles"]] == list(loadspec.PERCENTILES)
    # The flags come from the counters (a busy machine may answer late, so not "False" here: the
    # threshold itself is test_saturation_flag_at_two_percent_short's; a closed loop is never saturated).
    assert inter["saturated"] is loadspec.saturated(
        offered=inter["offered_due"], achieved=inter["answered_in_window"]
    )
    assert 0 < inter["offered_due"] <= inter["offered"] and inter["answered_in_window"] <= inter["answered"]
    assert bulk["saturated"] is False


def test_a_closed_class_records_its_turnaround_once_per_batch_it_sends_after_an_answer(bench):
    # The turnaround: from the read that completes a batch's last answer to the write of the next batch,
    # in the client process.  One per batch after the first; an open class (no batches) records none.
    srv = bench()
    spec = LoadSpec(
        classes=(
            ClientClass("interactive", 2, "open", rate=200.0),
            ClientClass("bulk", 2, "closed", depth=8),
        ),
        duration_s=0.5,
        seed=3,
    )
    out = _run(srv, spec)
    inter, bulk = out["classes"]["interactive"], out["classes"]["bulk"]
    batches = bulk["sent"] // 8
    assert bulk["turnaround"]["count"] == batches - 2  # every batch but each connection's first
    assert bulk["turnaround"]["min"] >= 1
    assert [q["p"] for q in bulk["turnaround"]["percentiles"]] == list(loadspec.PERCENTILES)
    assert inter["turnaround"]["count"] == 0
    assert out["all"]["turnaround"]["count"] == bulk["turnaround"]["count"]  # merged over the classes


def test_the_class_processes_start_the_run_only_once_all_are_connected(bench, tmp_path, monkeypatch):
    # A class process that takes 3 s to start (a busy machine: imports, connects) still has the whole
    # run: the run's start is fixed once every process has connected, not ahead of time (with a fixed
    # head start of 1 s this run was over before its processes connected, and nothing was answered in it).
    srv = bench()
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 3\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(slow))
    spec = LoadSpec(
        classes=(
            ClientClass("interactive", 2, "open", rate=200.0),
            ClientClass("bulk", 1, "closed", depth=4),
        ),
        duration_s=0.5,
        seed=5,
    )
    code, out = loadgen._supervise(spec, f"http://127.0.0.1:{srv.port}/")
    assert code == 0, out
    assert isinstance(out, dict)
    starts = {p["start_ns"] for p in out["processes"]}
    assert len(starts) == 1  # one start for the run
    assert all(p["connected_ns"] < p["start_ns"] for p in out["processes"])
    for c in out["classes"].values():
        assert c["answered_in_window"] > 0 and c["errors"] == dict.fromkeys(loadspec.ERROR_KINDS, 0)


def test_a_stall_shows_in_requests_scheduled_during_it(bench):
    # 20 ms stall every 200 ms, open loop at a rate the server sustains: ~10 % of the
    # requests are scheduled during a stall and wait about half of it, so p99 >= 10 ms.
    srv = bench(CWIST_BENCH_STALL_US="20000", CWIST_BENCH_STALL_EVERY_MS="200")
    spec = LoadSpec(classes=(ClientClass("all", 4, "open", rate=400.0),), duration_s=2.0, seed=1)
    c = _run(srv, spec)["classes"]["all"]
    assert c["answered"] == c["offered"] > 400
    p99 = {q["p"]: q["us"] for q in c["latency"]["percentiles"]}[99]
    assert p99 >= 10_000, c["latency"]
    assert c["latency"]["max"] >= 15_000  # a request scheduled at a stall's start waits ~all of it


def test_an_overloaded_server_is_flagged_saturated(bench):
    # 1 ms of service per request: the server answers at most ~1000 req/s; 3000 are offered.
    srv = bench(CWIST_BENCH_DELAY_US="1000")
    spec = LoadSpec(classes=(ClientClass("all", 4, "open", rate=3000.0),), duration_s=1.0, seed=2)
    c = _run(srv, spec)["classes"]["all"]
    assert c["saturated"] is True
    assert c["answered_in_window"] < 0.7 * c["offered"]
    assert c["answered"] + c["errors"]["timeout"] == c["offered"]  # owed answers counted, none lost


def test_client_exits_2_with_one_line_on_a_bad_spec():
    done = subprocess.run(
        [*loadgen.command("http://127.0.0.1:1/", None), "--spec", '{"classes": []}'],
        capture_output=True,
        text=True,
        timeout=300,
        env=loadgen.client_env(),
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "classes" in done.stderr


def test_client_exits_1_when_nothing_listens():
    from tailjob.server import free_port

    spec = LoadSpec(classes=(ClientClass("all", 1, "open", rate=10.0),), duration_s=1.0)
    done = subprocess.run(
        loadgen.command(f"http://127.0.0.1:{free_port()}/", spec),
        capture_output=True,
        text=True,
        timeout=300,
        env=loadgen.client_env(),
        check=False,
    )
    assert done.returncode == 1 and "connect" in done.stderr


def test_parse_output_needs_the_metrics_line():
    with pytest.raises(loadspec.LoadOutputError, match="TAILREACTOR_LOAD"):
        loadspec.parse_output("nothing here\n")
    line = loadspec.OUTPUT_PREFIX + json.dumps({"classes": {}, "all": {}})
    assert loadspec.parse_output("x\n" + line + "\n") == {"classes": {}, "all": {}}
