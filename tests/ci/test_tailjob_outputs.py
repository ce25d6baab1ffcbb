"""The job's outputs from a finished job: Markdown report, history line, result JSON, plot."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from tailjob_testdata import ROOT

from tailjob import history, plot, report, runner, stats
from tailreactor.config import KNOBS


def test_verdicts_of_the_synthetic_slowdown(synthetic_job):
    verdicts = {c.metric.key: c.verdict for c in synthetic_job.legs[0].comparisons}
    assert verdicts == dict.fromkeys(verdicts, "regression")


def test_report_table_has_the_seed_shape_with_ratio_ci_and_verdict(synthetic_job):
    text = report.render(synthetic_job, runs=False)
    lines = text.splitlines()
    header = "| Metric | A | B | B/A | Joint 95% CI | Min. effect | Detectable | Pairs needed | Verdict |"
    i = lines.index(header)
    rows = lines[i + 2 : i + 9]
    assert [r.split(" | ")[0] for r in rows] == [
        "| Requests/s",
        "| Server CPU us/request",
        "| p50 ms",
        "| p99 ms",
        "| p99.9 ms",
        "| p99.99 ms",
        "| p99.999 ms",
    ]
    assert all(r.endswith("| **regression** |") for r in rows)  # bold: what fails --gate
    assert "## epoll, c64: `wrk -t2 -c64 -d2s`, medians over 8 runs per arm" in lines
    for row in rows:  # the verdict follows from the row's own ratio, interval and minimum effect
        cells = [c.strip() for c in row.strip("|").split("|")]
        ratio, (lo, hi) = float(cells[3]), map(float, cells[4].split("–"))
        e = float(cells[5].rstrip("%")) / 100
        better_up = cells[0] == "Requests/s"
        assert (
            cells[8].strip("*")
            == stats.verdict(ratio, (lo, hi), min_effect=e, higher_is_better=better_up).verdict
        )
        assert cells[6].startswith("±") and cells[6].endswith("%")
        assert int(cells[7]) >= stats.MIN_PAIRS
    # median p50 of A: runs 1000 + 10 t + position over t = 0..7 -> about 1035 us
    assert 1.030 <= float(rows[2].split(" | ")[1]) <= 1.040
    assert rows[0].split(" | ")[1] == "40,350"  # median A req/s: 40000 + 100 x 3.5
    assert rows[5].split(" | ")[1].endswith("(100)")  # samples behind p99.99 (median of the runs)
    assert rows[6].split(" | ")[2].endswith("(10)")


def test_report_header_names_the_arms_schedule_and_machine(synthetic_job):
    text = report.render(synthetic_job, runs=False)
    assert "**A** `(defaults)`; **B** `CWIST_BENCH_DELAY_US=200`" in text
    assert "RMIT, seed 1" in text and "not pinned" in text
    assert "Test CPU, 2 CPUs" in text and "commit 000000000000." in text
    assert "- epoll, c64: **regression** on 7: Requests/s (-49.6%), Server CPU us/request (+98.6%)" in text


def test_report_names_the_command_that_reruns_it(synthetic_job):
    """Every figure traceable: the live report names its command as it was typed (quoted as a shell
    reads it, ``--out`` kept: pasted back, it writes where the first run did), as the sim report and
    calibrate's do."""
    text = report.render(replace(synthetic_job, argv=[*synthetic_job.argv, "--out", "/tmp/x"]), runs=False)
    line = next(ln for ln in text.splitlines() if ln.startswith("- Command: "))
    assert "`scripts/tail-latency.sh --a '' --b CWIST_BENCH_DELAY_US=200 --out /tmp/x`" in line, line
    assert "started 2026-11-29T21:00:00+00:00" in line


def _c(key, v, ratio=1.0, ci=(0.9, 1.1), reason="", detectable=0.1):
    return stats.Comparison(
        stats.metric(key),
        8,
        1.0,
        ratio,
        ratio,
        ci,
        stats.metric(key).min_effect,
        v,
        reason,
        detectable=detectable,
        pairs_needed=8,
    )


def test_verdict_summary_counts_metrics_per_verdict_worst_first():
    cs = [
        _c("rps", "equivalent"),
        _c("cpu_us_per_req", "gain", 0.9),
        _c("p50", "equivalent"),
        _c("p99", "regression", 1.25),
        _c("p99.9", "inconclusive", detectable=0.42),
        _c("p99.99", "inconclusive", detectable=0.815),
        _c("p99.999", "n/a", reason="x"),
    ]
    assert report.verdict_summary(cs) == (
        "**regression** on 1: p99 ms (+25.0%); gain on 1: Server CPU us/request (-10.0%); "
        "**inconclusive** on 2: p99.9 ms (detectable ±42%), p99.99 ms (detectable ±82%); "
        "equivalent on 2: Requests/s, p50 ms; n/a on 1: p99.999 ms"
    )
    assert stats.count_verdicts(c.verdict for c in cs) == {
        "regression": 1,
        "gain": 1,
        "inconclusive": 2,
        "equivalent": 2,
        "n/a": 1,
    }
    every = [_c(k, "equivalent") for k in ("rps", "p50")]
    assert report.verdict_summary(every) == "equivalent on 2: Requests/s, p50 ms"
    none = [_c(k, "n/a", reason="3 paired runs; a verdict needs 8") for k in ("rps", "p50")]
    assert report.verdict_summary(none) == "no verdict (3 paired runs; a verdict needs 8)"


def test_the_report_never_says_neutral(synthetic_job):
    assert "neutral" not in report.render(synthetic_job, runs=True).lower()


def test_a_seed_profile_report_says_how_many_runs_the_seed_pr_used_and_a_verdict_needs(synthetic_job):
    seed = replace(synthetic_job, profile="seed")
    text = report.render(seed, runs=False)
    assert "the seed PR used 3 runs on epoll; a verdict needs 8" in text
    assert "the seed PR used" not in report.render(synthetic_job, runs=False)


def test_report_counts_flagged_runs_and_lists_runs_only_when_asked(synthetic_job):
    short = report.render(synthetic_job, runs=False)
    assert "16 measured runs (+1 warm-up, discarded): 1 polluted" in short
    assert "1 with socket errors" in short
    assert "### Runs" not in short
    full = report.render(synthetic_job, runs=True)
    runs = [ln for ln in full.split("### Runs: epoll, c64")[1].splitlines() if ln.startswith("| ")]
    assert len(runs) == 1 + 17  # header + warm-up + 16 measured
    assert any(r.startswith("| warm-up |") for r in runs)
    assert any("| 4/0 | socket-errors |" in r for r in runs)


def test_verdict_line_says_when_its_runs_were_flagged(synthetic_job):
    """Found by a new user: a bold gain from a leg where 13 of 16 runs were polluted read as
    a result.  The verdict line itself says how many of its runs were flagged."""
    text = report.render(synthetic_job, runs=False)
    line = next(ln for ln in text.splitlines() if ln.startswith("- epoll, c64: "))
    assert line.endswith(
        "; 2 of 16 measured runs flagged (1 polluted, 1 with socket errors): "
        "a verdict from flagged runs may reflect the machine, not the arms"
    ), line
    clean = replace(
        synthetic_job,
        legs=[replace(lr, runs=[replace(r, flags=()) for r in lr.runs]) for lr in synthetic_job.legs],
    )
    line = next(ln for ln in report.render(clean, runs=False).splitlines() if ln.startswith("- epoll, c64: "))
    assert "flagged" not in line


def test_report_says_1_run_not_1_runs(synthetic_job):
    lr = synthetic_job.legs[0]
    runs = [r for r in lr.runs if r.trial <= 0]  # the warm-up and trial 1
    one = replace(lr, runs=runs, schedule=lr.schedule[:1], comparisons=runner.compare_leg(runs, seed=1))
    text = report.render(replace(synthetic_job, legs=[one]), runs=False)
    assert "## epoll, c64: `wrk -t2 -c64 -d2s`, medians over 1 run per arm" in text
    assert "2 measured runs (+1 warm-up, discarded)" in text
    assert report.plural(1, "measured run") == "1 measured run"
    assert report.plural(0, "run") == "0 runs"


def test_other_cpu_is_printed_as_measured_even_when_slightly_negative(synthetic_job):
    # Other CPU is a difference of two /proc samples: accounting noise can make it a little negative.
    lr = synthetic_job.legs[0]
    runs = [replace(r, other_cores=-0.11) if r.trial == 0 else r for r in lr.runs]
    text = report.render(replace(synthetic_job, legs=[replace(lr, runs=runs)]), runs=True)
    assert sum("| -0.11 |" in ln for ln in text.splitlines()) == 2
    assert "can make it slightly negative" in text


def test_history_line_has_provenance_knobs_and_verdicts(synthetic_job, tmp_path):
    line = history.history_line(synthetic_job, result_file="results/x.json")
    assert line["provenance"]["git_commit"] == "0" * 40
    assert (line["profile"], line["ab"], line["pinned"]) == ("quick", "custom", False)
    leg = line["legs"][0]
    assert set(leg["knobs"]["A"]) == {k.name for k in KNOBS}
    assert leg["knobs"]["B"]["CWIST_BENCH_DELAY_US"] == 200
    assert leg["knobs"]["A"]["CWIST_BENCH_DELAY_US"] == 0
    assert leg["knobs"]["A"]["CWIST_REACTOR_BACKEND"] == "epoll"
    assert leg["metrics"]["rps"]["verdict"] == "regression"
    assert set(leg["metrics"]["p99.9"]) >= {"detectable", "pairs_needed", "estimator", "samples_a"}
    assert leg["verdict_counts"] == {"regression": 7}
    assert leg["metrics"]["rps"]["ratio"] < 1
    assert leg["flagged_runs"] == {"polluted": 1, "socket-errors": 1, "non-2xx": 0}
    assert leg["backends"] == {"A": "epoll", "B": "epoll"}  # each arm's backend, as asked
    assert line["regression"] is True
    assert (line["schema"], line["tier"], line["kind"]) == (history.LINE_SCHEMA, "wall", "ab")
    path = history.append_history(line, tmp_path)
    history.append_history(line, tmp_path)
    stored = path.read_text().splitlines()
    assert len(stored) == 2 and json.loads(stored[1]) == json.loads(json.dumps(line))


def test_history_reads_old_lines_and_maps_neutral_by_the_new_rule(synthetic_job, tmp_path):
    line = history.history_line(synthetic_job, result_file="results/x.json")
    old = json.loads(json.dumps(line))
    old["schema"] = 1
    m = old["legs"][0]["metrics"]
    m["rps"].update(ratio=1.02, ci=[0.99, 1.04], verdict="neutral")  # within +-5 %: equivalent
    m["p99"].update(ratio=1.4, ci=[0.5, 2.8], verdict="neutral")  # wide, includes 1
    m["p50"].update(ratio=1.03, ci=[1.01, 1.06], verdict="neutral")  # excluded 1, small effect
    m["p99.9"].update(ci=None, verdict="n/a")
    for k in ("detectable", "pairs_needed", "estimator", "samples_a", "samples_b"):
        for v in m.values():
            v.pop(k, None)
    path = tmp_path / "tail-latency.jsonl"
    path.write_text(json.dumps(old) + "\n" + json.dumps(line) + "\n")
    first, second = history.read_history(path)
    got = first["legs"][0]["metrics"]
    assert got["rps"]["verdict"] == "equivalent" and got["rps"]["verdict_recorded"] == "neutral"
    assert got["p99"]["verdict"] == "inconclusive"
    assert got["p50"]["verdict"] == "inconclusive"
    assert got["p99.9"]["verdict"] == "n/a" and "verdict_recorded" not in got["p99.9"]
    assert got["p99"]["detectable"] == pytest.approx(1.15)
    assert second == json.loads(json.dumps(line))
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1"):
        history.read_history(path)


def test_result_json_keeps_every_run(synthetic_job, tmp_path):
    path = history.write_result(synthetic_job, tmp_path / "results", "stem")
    data = json.loads(path.read_text())
    assert len(data["legs"][0]["runs"]) == 17
    assert data["legs"][0]["comparisons"][0]["metric"] == "rps"
    assert data["legs"][0]["backends"] == {"A": "epoll", "B": "epoll"}


def test_result_stem_is_time_profile_and_ab(synthetic_job):
    assert history.result_stem(synthetic_job) == "20261129T210000Z-quick-custom"


def test_provenance_of_this_checkout():
    p = history.provenance(ROOT, wrk_version="wrk 4.1.0")
    assert len(p["git_commit"]) == 40 and p["git_dirty"] in (True, False)
    assert p["wrk_version"] == "wrk 4.1.0"
    assert p["cpus"] >= 1 and p["kernel"] and p["cpu_model"]


def test_plot_writes_svg_and_png(synthetic_job, tmp_path):
    svg, png = plot.plot_job(synthetic_job, tmp_path / "plot")
    assert svg.read_text().lstrip().startswith("<?xml")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_output_of_the_job_is_ignored_by_git():
    # Smoke runs must not show up as changes; deliberate measurements are added with `git add -f`
    # (benchmarks/README.md).  peers.jsonl was missing from .gitignore.
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    outputs = [
        "benchmarks/tail-latency.jsonl",
        "benchmarks/peers.jsonl",
        "benchmarks/results/20261129T210000Z-quick-tail.json",
    ]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *outputs], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    assert ignored == outputs
    kept = subprocess.run(
        ["git", "check-ignore", "--no-index", "benchmarks/results/.gitkeep"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert kept.returncode == 1  # not ignored


def _with_verdicts(job, verdicts):
    lr = job.legs[0]
    cs = [replace(c, verdict=verdicts.get(c.metric.key, "equivalent")) for c in lr.comparisons]
    return replace(job, legs=[replace(lr, comparisons=cs)])


def test_the_gate_fails_on_a_regression_only_and_names_inconclusive_metrics_prominently(synthetic_job):
    mixed = _with_verdicts(synthetic_job, {"p99.9": "inconclusive", "p99.99": "inconclusive"})
    code, lines = report.gate(mixed)
    assert code == 0
    assert lines[0].startswith("INCONCLUSIVE: 2 metrics")
    assert "epoll, c64: p99.9 ms" in lines[0] and "not a pass" in lines[0]
    code, lines = report.gate(_with_verdicts(synthetic_job, {"p99": "regression", "p50": "inconclusive"}))
    assert code == 1
    assert lines[0].startswith("REGRESSION: 1 metric ") and lines[1].startswith("INCONCLUSIVE: 1 metric ")
    assert report.gate(_with_verdicts(synthetic_job, {})) == (0, [])


def test_the_plots_bold_curve_is_the_arms_runs_pooled_when_they_have_histograms(synthetic_job):
    from tailjob import pooled

    runs = synthetic_job.legs[0].measured("A")
    what, points = plot.arm_curve(runs)
    assert what == "median of 8 runs"  # the synthetic runs carry no histogram
    with_hist = []
    for i, r in enumerate(runs):
        h = pooled.encode(pooled.histogram_of([(1000 + i, 90), (5000 + 100 * i, 10)]))
        with_hist.append(replace(r, wrk={**r.wrk, "histogram": h}))
    what, points = plot.arm_curve(with_hist)
    assert what == "pooled over 8 runs"
    hists = [r.wrk["histogram"] for r in with_hist]
    for p, us in points:
        assert us == pooled.pooled_percentile(hists, p).us
    assert points[0][1] < points[-1][1]


# -- per-class verdicts (issue 30 item 3) ---------------------------------------------------
def _with_class_verdicts(job, klass, verdicts):
    """The job with every whole-run metric equivalent and one client class's verdicts set."""
    job = _with_verdicts(job, {})
    lr = job.legs[0]
    cs = [
        replace(c, verdict=verdicts.get(c.metric.key, "equivalent"))
        for c in lr.comparisons
        if c.metric.per_class
    ]
    return replace(
        job,
        legs=[
            replace(lr, class_comparisons={klass: cs, "bulk": [replace(c, verdict="equivalent") for c in cs]})
        ],
    )


def test_the_gate_fails_on_a_regression_of_any_class_and_names_the_class(synthetic_job):
    job = _with_class_verdicts(synthetic_job, "interactive", {"p99": "regression", "p50": "inconclusive"})
    assert all(c.verdict == "equivalent" for c in job.legs[0].comparisons)  # the whole run would pass
    code, lines = report.gate(job)
    assert code == 1
    assert lines[0].startswith("REGRESSION: 1 metric ") and "class interactive: p99 ms" in lines[0]
    assert lines[1].startswith("INCONCLUSIVE: 1 metric ") and "class interactive: p50 ms" in lines[1]
    assert report.gate(_with_class_verdicts(synthetic_job, "interactive", {})) == (0, [])


def test_the_history_line_carries_the_per_class_verdicts(synthetic_job):
    job = _with_class_verdicts(synthetic_job, "interactive", {"p99": "regression"})
    leg = history.history_line(job, result_file="results/x.json")["legs"][0]
    assert set(leg["classes"]) == {"interactive", "bulk"}
    interactive = leg["classes"]["interactive"]
    assert interactive["metrics"]["p99"]["verdict"] == "regression"
    assert interactive["verdict_counts"] == {"regression": 1, "equivalent": 5}
    assert set(interactive["metrics"]["p99"]) >= {"ratio", "ci", "detectable", "samples_a", "needs_samples"}
    assert history.history_line(job, result_file="x")["regression"] is True
    plain = history.history_line(synthetic_job, result_file="x")["legs"][0]
    assert plain["classes"] == {}


def test_the_verdict_line_counts_every_kind_of_flag(synthetic_job):
    """A server that ignored SIGTERM flags its runs ``server-stop-timeout``; the summary and the verdict
    line count that kind too, not only the pollution kinds."""
    lr = synthetic_job.legs[0]
    runs = [replace(r, flags=("server-stop-timeout", "server-exit-3")) for r in lr.runs]
    job = replace(synthetic_job, legs=[replace(lr, runs=runs)])
    text = report.render(job, runs=False)
    line = next(ln for ln in text.splitlines() if ln.startswith("- epoll, c64: "))
    assert "; 16 of 16 measured runs flagged (16 server-stop-timeout, 16 server-exit-3): " in line, line
    assert "16 server-stop-timeout (the server did not stop on SIGTERM and was killed)" in text


def test_a_written_file_has_the_mode_the_umask_gives_any_new_file(tmp_path):
    """The report and JSON are read by others (a CI artifact, a shared results folder): written through
    a temporary file, they still get the mode open() would give them under the process's umask (0644
    under 022), not the temporary file's 0600."""
    import os

    from tailjob.outputs import write_atomic

    old = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "report.md", "text")
        (tmp_path / "plain").write_text("text")
    finally:
        os.umask(old)
    assert path.read_text() == "text"
    assert oct(path.stat().st_mode & 0o777) == oct((tmp_path / "plain").stat().st_mode & 0o777) == "0o644"
