"""The main job's answer: the sim tier's verdict beside how far the live run is from resolving it."""

from __future__ import annotations

import json

import tailjob_testdata  # noqa: F401  (puts scripts/ci on sys.path)

from tailjob import stats
from tailjob.plan import Leg
from tailjob.runner import LegResult
from tailjob.sim.answer import Row, pair, rows


def _c(key, ratio, verdict, detectable=None, n=8):
    m = stats.metric(key)
    return stats.Comparison(
        m, n, 1.0, ratio, ratio, (ratio, ratio), m.min_effect, verdict, "", detectable=detectable
    )


def _leg(backend, *comparisons, connections=64):
    return LegResult(Leg(0, backend, 1, connections, 1, 1), (), {}, {}, [], [], list(comparisons))


def test_a_sim_gain_is_set_against_the_live_detectable_effect_and_the_pairs_it_would_need():
    live = [
        _leg("io_uring", _c("p99", 1.3, stats.GAIN)),
        _leg("epoll", _c("p99", 1.1, stats.INCONCLUSIVE, 0.4)),
    ]
    [row] = rows(pair(live, [_leg("epoll", _c("p99", 0.8, stats.GAIN))]))
    assert row == Row("epoll", "p99 ms", 0.8, stats.GAIN, 1.1, stats.INCONCLUSIVE, 0.4, 0.2, 32)


def test_without_a_sim_effect_the_target_is_the_minimum_effect_and_a_missing_live_leg_is_none():
    live = [_leg("io_uring", _c("p99", 1.1, stats.INCONCLUSIVE, 0.4), connections=128)]  # another leg
    [row] = rows(pair(live, [_leg("io_uring", _c("p99", 1.0, stats.EQUIVALENT))]))
    assert (row.target, row.live_verdict, row.live_pairs_needed) == (0.10, None, None)


def test_the_answer_runs_the_live_options_in_virtual_time_in_memory(tmp_path, capsys):
    # The live A/B's options, replaced (tier sim, one virtual second per run), not re-parsed: the sim's
    # record names the A/B it ran; a backend the live job did not run gets no live figures.
    from tailjob.plan import AbOptions
    from tailjob.sim.answer import beside_live

    live = AbOptions(out=tmp_path, backend="epoll", runs=2, connections=(8,))
    assert beside_live(live, [], 0) == 0
    out = capsys.readouterr().out
    assert "The answer: the sim tier (virtual time) beside the live run" in out
    assert "| epoll | p99 ms |" in out
    [result] = (tmp_path / "results").glob("*-sim.json")
    doc = json.loads(result.read_text())
    assert doc["argv"] == [
        "ab",
        "--tier",
        "sim",
        "--connections",
        "8",
        "--duration",
        "1",
        "--runs",
        "2",
        "--backend",
        "epoll",
    ]


def test_the_main_jobs_sim_report_names_the_command_that_gives_its_figures(tmp_path, capsys):
    # `scripts/tail-latency.sh` with no arguments: after the live A/B, its sim stage.  The sim report's
    # command, pasted into a shell, is the `ab --tier sim ...` that gives the same figures (the sim tier
    # is deterministic: the same command writes the same result document).
    import shlex
    import subprocess
    import sys

    from tailjob_testdata import CI_DIR, ROOT

    from tailjob.cli import _record
    from tailjob.options import parse
    from tailjob.plan import AbOptions
    from tailjob.sim.answer import beside_live

    main_job = _record(AbOptions, parse(["--out", str(tmp_path)]), argv=())  # the main job's options
    assert beside_live(main_job, [], 0) == 0
    capsys.readouterr()
    [md] = (tmp_path / "results").glob("*-sim.md")
    [shown] = [line for line in md.read_text().splitlines() if line.startswith("- Command: `")]
    command = shlex.split(shown.split("`")[1])
    assert command[:4] == ["scripts/tail-latency.sh", "ab", "--tier", "sim"], shown
    rerun = subprocess.run(
        [sys.executable, str(CI_DIR / "tail_latency.py"), *command[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    first, again = sorted((tmp_path / "results").glob("*-sim.json"))  # stems: the start time

    def figures(path):  # the whole document but where it ran (the commit, were one made meanwhile)
        return {k: v for k, v in json.loads(path.read_text()).items() if k != "provenance"}

    assert figures(again) == figures(first)

    def verdicts(path):
        return [line for line in path.with_suffix(".md").read_text().splitlines() if line.startswith("| ")]

    assert verdicts(again) == verdicts(first)
