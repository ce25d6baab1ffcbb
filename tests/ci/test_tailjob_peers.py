"""peers: servers, schedule, summary and ratios, report, README section, options.

The real run (every server under real wrk) is in test_tailjob_e2e.py.
"""

from __future__ import annotations

import os
import stat

import pytest
from tailjob_testdata import record

from tailjob import peers, peersjob, peersreport
from tailjob.cli import main
from tailjob.measure import Settings
from tailjob.plan import Leg, rmit_schedule, shuffled_schedule
from tailjob.server import CommandServer, answers
from tailreactor.extras import install_command


# -- servers ------------------------------------------------------------------------------------
def test_servers_are_the_bench_server_on_each_backend_then_the_peers():
    keys = [s.key for s in peers.servers(nginx="/usr/sbin/nginx")]
    assert keys == ["tailreactor-io_uring", "tailreactor-epoll", "asyncio", "uvloop", "nginx"]
    assert [s.key for s in peers.servers(nginx=None)] == keys[:-1]
    assert peers.REFERENCES == ("asyncio", "uvloop", "nginx")


def test_a_peer_is_a_server_command_that_answers_and_its_runs_name_it():
    [asyncio] = [p for p in peers.servers(nginx=None) if p.key == "asyncio"]
    server = peers.make_server(asyncio, ambient=os.environ, host="127.0.0.1", cpus=None)
    assert isinstance(server, CommandServer)
    with server:
        assert server.port and answers("127.0.0.1", server.port, "/", timeout_s=5)
        assert server.backend == "asyncio"  # the runs' Backend column names the peer
    assert not server.alive()


def test_the_ceiling_is_the_own_server_nginx_example_with_one_worker():
    [nginx] = [p for p in peers.servers(nginx="/opt/nginx") if p.key == "nginx"]
    server = peers.make_server(nginx, ambient={}, host="127.0.0.1", cpus="0", nginx="/opt/nginx")
    server.port = 40123
    assert server.argv() == ["taskset", "-c", "0", str(peers.NGINX_SCRIPT), "40123"]
    assert (server.env["NGINX"], server.env["NGINX_WORKERS"]) == ("/opt/nginx", "1")


def test_find_nginx_looks_on_path_then_in_sbin(tmp_path):
    assert peers.find_nginx(path=str(tmp_path), fallbacks=()) is None
    fake = tmp_path / "nginx"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert peers.find_nginx(path=str(tmp_path), fallbacks=()) == str(fake)
    assert peers.find_nginx(path="", fallbacks=(str(fake),)) == str(fake)


def test_missing_nginx_message_is_one_line_with_the_install_command():
    assert "\n" not in peers.NGINX_MISSING
    assert "no ceiling row" in peers.NGINX_MISSING
    assert "scripts/bootstrap.sh --nginx" in peers.NGINX_MISSING and "apt-get install" in peers.NGINX_MISSING


# -- schedule -----------------------------------------------------------------------------------
def test_shuffled_schedule_runs_every_server_once_per_trial_in_random_order():
    keys = ["a", "b", "c", "d", "e"]
    schedule = shuffled_schedule(keys, 30, seed=3)
    assert len(schedule) == 30 and all(sorted(t) == keys for t in schedule)
    assert len({tuple(t) for t in schedule}) > 5  # the order changes between trials
    assert schedule == shuffled_schedule(keys, 30, seed=3)  # and is reproducible
    assert rmit_schedule(12, seed=5) == shuffled_schedule(["A", "B"], 12, seed=5)


# -- summary and ratios -------------------------------------------------------------------------
SERVERS = peers.servers(nginx=None)


@pytest.fixture
def peers_job():
    """One leg, 8 trials; each server has ``scale`` x the CPU and latency of asyncio (scale 1)."""
    scale = {"tailreactor-io_uring": 0.5, "tailreactor-epoll": 0.8, "asyncio": 1.0, "uvloop": 0.6}
    leg = Leg(0, None, 1, 64, 2, 3, label="c64")
    schedule = shuffled_schedule([s.key for s in SERVERS], 8, seed=1)
    runs = [record(0, -1, 0, schedule[0][0], warmup=True)]
    for t, order in enumerate(schedule):
        for pos, key in enumerate(order):
            runs.append(record(0, t, pos, key, scale=scale[key]))
    lr = peersjob.PeersLegResult(leg=leg, servers=[s.key for s in SERVERS], schedule=schedule, runs=runs)
    lr.summary = peersjob.summarize(lr.runs, lr.servers)
    lr.ratios = peersjob.ratios(lr.summary)
    lr.intervals = peersjob.ratio_intervals(lr.runs, lr.servers, seed=1)
    return peersjob.PeersJobResult(
        argv=["--peers"],
        profile="quick",
        servers=SERVERS,
        settings=Settings(seed=1, workers=1, server_cpus="0", wrk_cpus="1"),
        legs=[lr],
        provenance={
            "git_commit": "1" * 40,
            "git_dirty": False,
            "cpu_model": "Test CPU",
            "cpus": 2,
            "kernel": "6.18",
            "python": "3.11.7",
            "wrk_version": "wrk 4.1.0",
            "packages": {"uvloop": "0.23.0"},
            "nginx": None,
        },
        started_at="2026-11-29T21:00:00+00:00",
        finished_at="2026-11-29T21:01:00+00:00",
        ceiling_note=peers.NGINX_MISSING,
    )


def test_summary_is_the_median_over_measured_runs_per_server(peers_job):
    s = peers_job.legs[0].summary
    assert set(s) == {srv.key for srv in SERVERS}
    assert s["asyncio"]["runs"] == 8
    # record: cpu = 25 x scale + trial / 10, trials 0..7 -> median 25 x scale + 0.35
    assert s["asyncio"]["cpu_us_per_req"] == pytest.approx(25.35)
    assert s["tailreactor-io_uring"]["cpu_us_per_req"] == pytest.approx(12.85)


def test_ratios_divide_each_servers_median_by_each_peers(peers_job):
    r = peers_job.legs[0].ratios
    assert r["asyncio"]["asyncio"]["cpu_us_per_req"] == pytest.approx(1.0)
    assert r["tailreactor-io_uring"]["asyncio"]["cpu_us_per_req"] == pytest.approx(12.85 / 25.35)
    assert r["tailreactor-io_uring"]["uvloop"]["cpu_us_per_req"] == pytest.approx(12.85 / 15.35)
    assert "nginx" not in r["tailreactor-io_uring"]  # no ceiling in this job
    assert set(r["uvloop"]["asyncio"]) == set(peersjob.PEER_METRICS)


def test_cpu_ratio_intervals_pair_runs_by_trial_and_hold_the_ratio(peers_job):
    iv = peers_job.legs[0].intervals
    lo, hi = iv["tailreactor-io_uring"]["asyncio"]
    # Paired trials: io_uring's CPU is 25 x 0.5 + t/10, asyncio's 25 + t/10 (t = 0..7).
    assert lo <= 12.85 / 25.35 <= hi
    assert lo >= 12.5 / 25.7 and hi <= 13.2 / 25.0
    assert iv["asyncio"]["asyncio"] == [1.0, 1.0]
    assert "nginx" not in iv["uvloop"]


def test_cpu_ratio_intervals_need_8_paired_trials_like_a_verdict():
    runs = [
        record(0, t, p, key, scale=sc)
        for t in range(7)
        for p, (key, sc) in enumerate((("asyncio", 1.0), ("uvloop", 0.6)))
    ]
    few = peersjob.ratio_intervals(runs, ["asyncio", "uvloop"], seed=1)
    # A server against itself too: 7 trials are too few for any interval (not a zero-width 1.000–1.000).
    assert few["uvloop"]["asyncio"] is None and few["asyncio"]["asyncio"] is None
    runs += [record(0, 7, 0, "asyncio"), record(0, 7, 1, "uvloop", scale=0.6)]
    eight = peersjob.ratio_intervals(runs, ["asyncio", "uvloop"], seed=1)
    assert eight["uvloop"]["asyncio"] is not None
    assert eight["asyncio"]["asyncio"] == eight["uvloop"]["uvloop"] == [1.0, 1.0]


def test_an_interval_from_too_few_trials_says_what_it_needs_and_no_such_peer_is_a_dash(peers_job):
    lr = peers_job.legs[0]
    lr.runs = [r for r in lr.runs if r.trial < 7]
    lr.intervals = peersjob.ratio_intervals(lr.runs, lr.servers, seed=1)
    rows = _rows(peersreport.render(peers_job, runs=False), "| Server | CPU us/req ÷ asyncio, 95% interval |")
    # asyncio against itself, and the others: 7 trials; no nginx in this job
    assert rows[2] == "| asyncio | n/a (needs 8 pairs) | n/a (needs 8 pairs) | - |", rows
    assert "1.000–1.000" not in "\n".join(rows)


def test_report_gives_the_cpu_ratio_intervals(peers_job):
    text = peersreport.render(peers_job, runs=False)
    rows = _rows(text, "| Server | CPU us/req ÷ asyncio, 95% interval |")
    assert len(rows) == 4
    lo, hi = peers_job.legs[0].intervals["tailreactor-io_uring"]["asyncio"]
    assert rows[0].startswith(f"| tailreactor (io_uring) | {lo:.3f}–{hi:.3f} |")
    assert "No confidence interval" not in text


def test_peers_report_says_1_run_not_1_runs(peers_job):
    lr = peers_job.legs[0]
    lr.runs = [r for r in lr.runs if r.trial <= 0]
    lr.summary = peersjob.summarize(lr.runs, lr.servers)
    assert "## c64: `wrk -t1 -c64 -d2s`, medians over 1 run per server" in peersreport.render(peers_job)


def test_a_leg_cut_short_counts_the_runs_its_medians_are_over_not_the_servers_not_run(peers_job):
    """Stopped in trial 2 (a server not run at all shows "-"): the heading gives the runs behind the
    figures shown, a range when the servers that ran differ."""
    lr = peers_job.legs[0]
    first = lr.schedule[0][0]
    lr.runs = [r for r in lr.runs if not r.warmup and r.trial == 0 and r.arm == first]
    lr.summary = peersjob.summarize(lr.runs, lr.servers)
    assert "## c64: `wrk -t1 -c64 -d2s`, medians over 1 run per server" in peersreport.render(peers_job)
    lr.runs += [record(0, 1, 0, first)] + [record(0, 0, p, k) for p, k in enumerate(lr.schedule[0][1:2], 1)]
    lr.summary = peersjob.summarize(lr.runs, lr.servers)
    assert "## c64: `wrk -t1 -c64 -d2s`, medians over 1–2 runs per server" in peersreport.render(peers_job)


# -- report and README --------------------------------------------------------------------------
def _rows(text: str, header_start: str) -> list[str]:
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith(header_start))
    out = []
    for ln in lines[i + 2 :]:
        if not ln.startswith("| "):
            break
        out.append(ln)
    return out


def test_report_has_a_row_per_server_and_says_there_is_no_ceiling(peers_job):
    text = peersreport.render(peers_job, runs=False)
    rows = _rows(text, "| Server | Requests/s |")
    assert [r.split(" | ")[0] for r in rows] == [
        "| tailreactor (io_uring)",
        "| tailreactor (epoll)",
        "| asyncio",
        "| uvloop",
    ]
    ratio_rows = _rows(text, "| Server | Req/s ÷ asyncio |")
    assert len(ratio_rows) == 4
    io_uring = ratio_rows[0].split(" | ")
    assert io_uring[4] == f"{12.85 / 25.35:.3f}" and io_uring[6].rstrip(" |") == "-"  # no ceiling
    assert peers.NGINX_MISSING in text
    assert "pinned with taskset: server on CPU 0, wrk on CPU 1" in text


def test_readme_section_is_written_between_markers_and_replaced_in_place(peers_job, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nIntro.\n")
    peersreport.write_readme(peers_job, readme, result_file="results/x.json")
    first = readme.read_text()
    assert first.startswith("# Benchmarks\n\nIntro.\n")
    assert first.count(peersreport.BEGIN) == 1 and first.count(peersreport.END) == 1
    assert len(_rows(first, "| Server | Requests/s |")) == 4
    readme.write_text(first + "\nAfter.\n")
    peersreport.write_readme(peers_job, readme, result_file="results/y.json")
    second = readme.read_text()
    assert second.count(peersreport.BEGIN) == 1 and second.endswith("\nAfter.\n")
    assert "results/y.json" in second and "results/x.json" not in second


def test_readme_is_created_when_missing(peers_job, tmp_path):
    readme = tmp_path / "new" / "README.md"
    peersreport.write_readme(peers_job, readme, result_file="results/x.json")
    assert peersreport.BEGIN in readme.read_text()


# -- options ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, message",
    [
        (["peers", "--ab", "tail"], "--ab: not an option of peers (an option of ab, validate)"),
        (["peers", "--a", "CWIST_HTTP_BATCH=4"], "--a: not an option of peers (an option of ab, validate)"),
        (
            ["peers", "--backend", "epoll"],
            "--backend: not an option of peers (an option of ab, calibrate, validate, count)",
        ),
        (["peers", "--workers", "2"], "--workers: not an option of peers (an option of ab, calibrate)"),
        (["peers", "--probe"], "--probe: not an option of peers (an option of ab, validate)"),
        (["peers", "--gate"], "--gate: not an option of peers (an option of ab, count)"),
        (["--write-readme"], "--write-readme: not an option of ab (an option of peers)"),
        (["--no-pin"], "--no-pin: not an option of ab (an option of peers)"),
        (["peers", "--pin"], "--pin: not an option of peers (an option of ab, calibrate, validate)"),
    ],
)
def test_bad_peers_options_exit_2_with_one_line(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: ") and message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_peers_mode_needs_uvloop(monkeypatch, capsys, tmp_path):
    # a Python without uvloop: the same check the job makes, pointed at a module that does not exist
    monkeypatch.setattr(peers, "UVLOOP_MODULE", "uvloop_not_installed_here")
    assert main(["peers", "--out", str(tmp_path)]) == 3  # the environment: uvloop missing here
    err = capsys.readouterr().err
    assert "peers needs uvloop" in err and install_command("bench") in err
    assert os.listdir(tmp_path) == []


def test_installed_the_uvloop_hint_names_the_projects_extra(monkeypatch):
    # from a wheel there is no checkout to `pip install -e .`: the hint names the distribution's extra
    from tailjob_testdata import installed_from_a_wheel

    installed_from_a_wheel(monkeypatch)
    monkeypatch.setattr(peers, "UVLOOP_MODULE", "uvloop_not_installed_here")
    line = peers.uvloop_missing()
    assert "pip install 'tailreactor[bench]'" in line and "-e" not in line.split("pip install")[1]


def test_benchmarks_readme_has_the_markers_once():
    from tailjob_testdata import ROOT

    text = (ROOT / "benchmarks" / "README.md").read_text()
    assert text.count(peersreport.BEGIN) == 1 and text.count(peersreport.END) == 1
    assert text.index(peersreport.BEGIN) < text.index(peersreport.END)
