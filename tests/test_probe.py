"""Latency probe (issue 4): exact recording on real sockets, report, JSON file, merge, cost when off.

Delays are made by a :class:`ManualClock` that callbacks advance, so every
recorded value is known in advance.  Values below 2048 us are exact in a
3-significant-digit HdrHistogram; larger ones are compared with
``values_are_equivalent`` (HdrHistogram reports a bucket's highest value).
"""

from __future__ import annotations

import gc
import json
import os
from collections import Counter

import pytest
from hdrh.histogram import HdrHistogram

from tailreactor import Config, ConfigError, Reactor
from tailreactor.config import load, probe_file_path
from tailreactor.probe import HISTOGRAMS, LatencyProbe
from tailreactor.probe_files import load_probe_file, main, merge, probe_file_glob, worker_table

PCTS = ("p50", "p90", "p99", "p99.9")


def recorded(probe: LatencyProbe, name: str) -> Counter:
    """The multiset of values a histogram holds (value -> count).

    Each value is its bucket's lowest equivalent: exact for every value below
    2048 and for the multiples of 4 this file uses up to 8191.
    """
    h = probe.histogram(name)
    return Counter(
        {
            h.get_lowest_equivalent_value(it.value_iterated_to): it.count_at_value_iterated_to
            for it in h.get_recorded_iterator()
        }
    )


def assert_well_formed(snap: dict) -> None:
    """Every percentile ordered, max <= sum, mean inside [p0, max]."""
    for name, h in snap["histograms"].items():
        values = [h[p] for p in PCTS] + [h["max"]]
        assert values == sorted(values), (name, h)
        if h["count"]:
            assert 1 <= h["max"] <= h["sum"], (name, h)
            assert h["mean"] == pytest.approx(h["sum"] / h["count"])
        else:
            assert values == [0] * 5 and h["sum"] == 0 and h["mean"] == 0


# -- recording: exact values on both backends ------------------------------------------------------


def test_known_sequence_of_100_rearmed_events_records_exact_delays(make_reactor, clock, socketpairs):
    """One readable socket, re-armed inside its callback 99 times.

    Callback i advances the clock by 20 us, re-arms, then advances by
    B(i) = (i % 10 + 1) * 100 us.  So dispatch i+1 waits exactly B(i) since
    its arm; the first waits 7000 us (the test sleeps the clock after arming),
    which is over 5 ms and past the default CWIST_REACTOR_TAIL_US=3500: one
    elevation.  Each round holds one event, reaped at dispatch time, so the
    queue delay since ready is 0 ns, recorded as 1 us (the floor).
    """
    r = make_reactor(clock=clock, latency_probe=True)
    ((a, b),) = socketpairs(1)
    b.send(b"x")  # never read: the fd stays readable, every re-arm fires at once
    seen: list[tuple[int, int]] = []

    def B(i):
        return (i % 10 + 1) * 100

    def cb(ev):
        i = len(seen)
        seen.append((clock() - ev.armed_ns, clock() - ev.ready_ns))
        clock.advance_us(20)
        if i < 99:
            r.arm_read(a.fileno(), cb)
        clock.advance_us(B(i))

    r.arm_read(a.fileno(), cb)
    clock.advance_us(7000)
    for _ in range(1000):
        if len(seen) == 100:
            break
        r.run_once(1.0)
    assert len(seen) == 100

    # What the callbacks observed is the design ...
    expected_arm_us = [7000] + [B(i) for i in range(99)]
    assert [arm // 1000 for arm, _ in seen] == expected_arm_us
    assert all(ready == 0 for _, ready in seen)
    # ... and the probe recorded exactly that.
    p = r.probe
    assert recorded(p, "queue_delay_arm") == Counter(expected_arm_us)
    assert recorded(p, "queue_delay_ready") == Counter({1: 100})
    svc = Counter(20 + B(i) for i in range(100))
    assert recorded(p, "svc") == svc
    assert recorded(p, "round_time") == svc  # one event per round, nothing else runs
    assert recorded(p, "batch_size") == Counter({1: 100})
    assert p.histogram("post_delay").get_total_count() == 0

    snap = p.snapshot()
    json.dumps(snap)
    assert_well_formed(snap)
    q = snap["histograms"]["queue_delay_arm"]
    # Sorted: 100..900 x10 each, 1000 x9, 7000 x1.
    assert (q["count"], q["p50"], q["p90"], q["p99"]) == (100, 500, 900, 1000)
    assert p.histogram("queue_delay_arm").values_are_equivalent(q["p99.9"], 7000)
    assert p.histogram("queue_delay_arm").values_are_equivalent(q["max"], 7000)
    assert q["sum"] == sum(expected_arm_us) == 61000 and q["mean"] == 610.0
    c = snap["counters"]
    assert c["dispatched"] == 100 == r.counters.dispatched
    assert c["over_5ms"] == 1 and c["over_5ms_ready"] == 0
    assert c["tail_elevations"] == 1 == r.counters.tail_elevations
    assert c["rounds"] == r.counters.rounds >= 100  # io_uring may reap an empty round
    assert (snap["backend"], snap["worker"], snap["pid"]) == (r.backend_name, 0, os.getpid())


def test_one_batch_records_ready_delay_post_delay_and_elevations(make_reactor, clock, socketpairs):
    """Five readable sockets in one round, 50 us per callback, CWIST_REACTOR_TAIL_US=420.

    All armed at T0 and a post made at T0; the round starts at T0+300 us.
    Whatever order the backend returns, the k-th dispatch (k=0..4) happens at
    T0+300+50k: since arm 300..500 us, since ready 0..200 us.  Ages 450 and
    500 reach 420 us: exactly two elevations.
    """
    r = make_reactor(clock=clock, latency_probe=True, tail_us=420)
    pairs = socketpairs(5)
    ran = []

    def cb(ev):
        ran.append(ev.fd)
        clock.advance_us(50)

    for a, b in pairs:
        b.send(b"x")
        r.arm_read(a.fileno(), cb)
    r.post(ran.append, "post")
    clock.advance_us(300)
    r.run_once(1.0)
    assert len(ran) == 6

    p = r.probe
    assert recorded(p, "post_delay") == Counter({300: 1})
    assert recorded(p, "queue_delay_arm") == Counter([300, 350, 400, 450, 500])
    assert recorded(p, "queue_delay_ready") == Counter([1, 50, 100, 150, 200])
    assert recorded(p, "svc") == Counter({50: 5})
    assert recorded(p, "batch_size") == Counter({5: 1})
    assert recorded(p, "round_time") == Counter({250: 1})
    snap = p.snapshot()
    assert_well_formed(snap)
    assert snap["counters"]["tail_elevations"] == 2 == r.counters.tail_elevations
    assert snap["counters"]["posts"] == 1
    assert snap["counters"]["rounds"] == 1


def test_probe_off_allocates_nothing_and_writes_nothing(make_reactor, clock, socketpairs, tmp_path, capsys):
    """CWIST_LATENCY_PROBE=0: no probe, no histogram, no report, no file -- even with a file set."""
    gc.collect()
    before = sum(isinstance(o, HdrHistogram) for o in gc.get_objects())
    r = make_reactor(clock=clock, latency_probe=False, latency_probe_file=str(tmp_path / "probe.json"))
    ((a, b),) = socketpairs(1)
    b.send(b"x")
    n = []

    def cb(ev):
        n.append(1)
        clock.advance_us(6000)  # would be over 5 ms and elevated if anything recorded it
        if len(n) < 100:
            r.arm_read(a.fileno(), cb)

    r.arm_read(a.fileno(), cb)
    for _ in range(1000):
        if len(n) == 100:
            break
        r.run_once(1.0)
    r.post(lambda _: None)
    r.close()
    gc.collect()
    assert r.probe is None
    assert r.counters.dispatched == 100  # the reactor ran; only the probe is absent
    assert sum(isinstance(o, HdrHistogram) for o in gc.get_objects()) == before
    assert "latency-probe" not in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_probe_that_recorded_nothing_reads_zero():
    p = LatencyProbe(backend="epoll", worker=2)
    snap = p.snapshot()
    assert set(snap["histograms"]) == set(HISTOGRAMS)
    assert all(v == 0 for v in snap["counters"].values())
    assert_well_formed(snap)
    assert "count=0" in p.report()


def test_values_are_ns_rounded_up_to_us_and_clamped():
    p = LatencyProbe(backend="epoll")
    for ns in (0, -5, 1, 999, 1000, 1001, 61_000_000_000):
        p.dispatch(ns, ns, ns, False)
    got = recorded(p, "queue_delay_arm")
    h = p.histogram("queue_delay_arm")
    assert got[1] == 5  # 0, -5 (clamped), 1, 999, 1000 ns
    assert got[2] == 1  # 1001 ns
    top = [v for v in got if v > 2]
    assert len(top) == 1 and h.values_are_equivalent(top[0], 60_000_000)  # 61 s clamped to 60 s
    p.round(0, 5000)  # a round that reaped nothing: counted, not a batch
    p.round(2_000_000, 5000)
    assert p.snapshot()["counters"]["rounds"] == 2
    assert p.histogram("batch_size").get_total_count() == 1
    assert p.histogram("batch_size").values_are_equivalent(
        p.histogram("batch_size").get_max_value(), 1_000_000
    )


# -- report, file, merge ----------------------------------------------------------------------------


def test_close_writes_tagged_stderr_block_and_json_file_that_round_trips(
    backend_name, clock, socketpairs, tmp_path, capsys
):
    template = str(tmp_path / "probe-{pid}-w{worker}.json")
    cfg = Config.default().replace(latency_probe=True, latency_probe_file=template)
    r = Reactor(backend_name, config=cfg, clock=clock, worker=3)
    pairs = socketpairs(3)
    left = [40]

    def cb(ev):
        r.post(lambda _: None)  # runs next round, after this round's remaining callbacks
        clock.advance_us(ev.data)
        left[0] -= 1
        if left[0] > 0:
            r.arm_read(ev.fd, cb, ev.data * 7 % 9000 + 3)  # spreads values past 2048 us too

    for k, (a, b) in enumerate(pairs):
        b.send(b"x")
        r.arm_read(a.fileno(), cb, 100 * (k + 1))
    for _ in range(1000):
        if left[0] <= 0:
            break
        r.run_once(1.0)
    r.close()  # also runs the posts queued by the last round
    live = r.probe.snapshot()

    block = capsys.readouterr().err
    tag = f"[latency-probe] pid={os.getpid()} worker=3 backend={backend_name}"
    assert block.count(tag) == len(block.strip().splitlines()) >= len(HISTOGRAMS) + 2
    for name in HISTOGRAMS:
        assert f" {name} " in block
    assert f"tail_elevations={r.counters.tail_elevations}" in block

    path = tmp_path / f"probe-{os.getpid()}-w3.json"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    raw = json.loads(path.read_text())
    assert raw["histograms"]["svc"]["hdr"].startswith("HISTF")  # HdrHistogram V2 compressed base64
    doc = load_probe_file(str(path))
    assert doc["reactor"] == r.counters.as_dict()
    assert (doc["pid"], doc["worker"], doc["backend"]) == (os.getpid(), 3, backend_name)
    for name in HISTOGRAMS:
        plain = doc["histograms"][name]
        assert {k: plain[k] for k in live["histograms"][name]} == live["histograms"][name]
        h = doc["decoded"][name]
        assert h.get_total_count() == plain["count"] > 0
        decoded = h.get_percentile_to_value_dict([50.0, 90.0, 99.0, 99.9])
        assert [decoded[x] for x in (50.0, 90.0, 99.0, 99.9)] == [plain[p] for p in PCTS]
        assert h.get_max_value() == plain["max"]


def test_merge_adds_histograms_and_counters_and_tables_workers(tmp_path, capsys):
    template = str(tmp_path / "probe.json")  # no placeholders: .{pid}.{worker} is appended
    cfg = Config.default().replace(latency_probe=True, latency_probe_file=template)
    w0 = LatencyProbe(backend="epoll", worker=0, config=cfg)
    w1 = LatencyProbe(backend="epoll", worker=1, config=cfg)
    for _ in range(9):
        w0.dispatch(100_000, 10_000, 5_000, False)
    w0.dispatch(7_000_000, 6_000_000, 5_000, True)
    for _ in range(10):
        w1.dispatch(200_000, 20_000, 5_000, False)
    p0, p1 = w0.finish({"dispatched": 10}), w1.finish({"dispatched": 10})
    capsys.readouterr()
    pid = os.getpid()
    assert sorted([p0, p1]) == [f"{template}.{pid}.0", f"{template}.{pid}.1"]
    assert sorted(str(p) for p in tmp_path.iterdir()) == sorted([p0, p1])

    docs = [load_probe_file(p) for p in sorted(tmp_path.glob("probe.json.*"))]
    m = merge(docs)
    q = m["histograms"]["queue_delay_arm"]
    # 100 x9, 200 x10, 7000 x1 -> 20 samples.
    assert (q["count"], q["p50"], q["p90"], q["sum"]) == (20, 200, 200, 900 + 2000 + 7000)
    assert m["decoded"]["queue_delay_arm"].values_are_equivalent(q["max"], 7000)
    assert m["counters"]["tail_elevations"] == 1 and m["counters"]["over_5ms"] == 1
    assert m["counters"]["over_5ms_ready"] == 1 and m["counters"]["dispatched"] == 20
    assert m["workers"] == 2
    assert_well_formed(m)

    table = worker_table(docs)
    lines = table.splitlines()
    assert "tail_elevations" in lines[0] and "over_5ms" in lines[0]
    assert lines[1].split()[:4] == [str(pid), "0", "epoll", "1"]
    assert lines[2].split()[:4] == [str(pid), "1", "epoll", "0"]
    assert lines[-1].split()[0] == "all"
    assert m["reactor"] == {"dispatched": 20}

    # The command-line view: the template finds both files.
    assert main([template]) == 0
    assert capsys.readouterr().out == table + "\n"
    assert main([str(tmp_path / "other-{pid}.json")]) == 1
    assert "no latency probe files" in capsys.readouterr().err


def test_file_path_template_and_its_glob():
    assert probe_file_path("/d/p.json", pid=12, worker=3) == "/d/p.json.12.3"
    assert probe_file_path("/d/p-{pid}-{worker}.json", pid=12, worker=3) == "/d/p-12-3.json"
    assert probe_file_path("/d/p-{worker}.json", pid=12, worker=3) == "/d/p-3.json.12"
    assert probe_file_glob("/d/p.json") == "/d/p.json.*.*"
    assert probe_file_glob("/d/p-{pid}-{worker}.json") == "/d/p-*-*.json"
    assert probe_file_glob("/d/p-{worker}.json") == "/d/p-*.json.*"


def test_bad_file_directory_and_bad_file_fail_with_one_line_errors(tmp_path):
    missing = str(tmp_path / "nope" / "probe.json")
    cfg = Config.default().replace(latency_probe=True, latency_probe_file=missing)
    with pytest.raises(ConfigError) as info:
        LatencyProbe(backend="epoll", config=cfg)
    assert "CWIST_LATENCY_PROBE_FILE" in str(info.value) and "\n" not in str(info.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError) as info:
        load_probe_file(str(bad))
    assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_probe_file_knob_is_a_path_default_unset():
    assert load({}).latency_probe_file is None
    assert (
        load({"CWIST_LATENCY_PROBE_FILE": "/tmp/p-{worker}.json"}).latency_probe_file
        == "/tmp/p-{worker}.json"
    )
    assert load({"CWIST_LATENCY_PROBE_FILE": "  "}).latency_probe_file is None
