"""The command line: bad input is refused before anything runs, with one line naming what failed."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tailjob_testdata import stopped_after_the_first_run

from tailjob.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--a", "CWIST_NOPE=1"], "--a: unknown knob CWIST_NOPE"),
        (["--b", "CWIST_REACTOR_TAIL_US=-5"], "--b: CWIST_REACTOR_TAIL_US='-5' is invalid"),
        (["--ab", "tail", "--a", "CWIST_HTTP_BATCH=4"], "--ab cannot be combined with --a/--b"),
        (["--threads", "8", "--connections", "4"], "at least as many connections as threads"),
        (["--ab", "backend", "--backend", "epoll"], "--backend epoll: both arms set CWIST_REACTOR_BACKEND"),
        (["--pin", "--server-cpus", "4096"], "--server-cpus '4096': CPUs [4096] are not available"),
        (["calibrate", "2", "--ab", "aa"], "--ab: not an option of calibrate (an option of ab, validate)"),
        (["calibrate", "2", "--gate"], "--gate: not an option of calibrate (an option of ab, count)"),
        (["calibrate", "2", "--peers"], "--peers: now a subcommand: scripts/tail-latency.sh peers"),
        (["peers", "--ab", "tail"], "--ab: not an option of peers (an option of ab, validate)"),
        (["--tier", "instructions"], "--tier instructions: now a subcommand: scripts/tail-latency.sh count"),
        (["--requests", "100"], "--requests: not an option of ab (an option of count)"),
        (["nope"], "'nope': not a subcommand; accepted: ab, calibrate, peers, sweep, validate, count"),
        # what a fresh user found accepted, or refused only after the runs (issue 38's review)
        (["--min-effect", "0"], "'0': accepted a fraction above 0"),
        (["--seed", "x"], "--seed: 'x': accepted an integer"),
        (
            ["--tier", "sim", "--pollution-limit", "nan"],
            "'nan': accepted a finite non-negative number of cores",
        ),
        (["--gate", "--runs", "2"], "--gate with --runs 2: a verdict needs 8 paired runs"),
        (["--tier", "sim", "--gate", "--runs", "7"], "--gate with --runs 7: a verdict needs 8 paired runs"),
        (["--server", "bench-epoll"], "--server: not an option of ab (an option of count)"),
        (["count", "--baseline", "{bad_json}"], "--baseline {bad_json}: not a baseline file (JSON)"),
        # unbounded: virtual time (or a live run) without end (issue 38's fresh user, again)
        (
            ["--tier", "sim", "--connections", "999999"],
            "--connections 999999: the sim tier runs at most 4096",
        ),
        (["--tier", "sim", "--connections", "64,4097"], "--connections 4097: the sim tier runs at most 4096"),
        (
            ["--tier", "sim", "--duration", "1000h"],
            "--duration 3600000s: the sim tier runs at most 60 virtual s",
        ),
        (["validate", "--duration", "2m"], "--duration 120s: the sim tier runs at most 60 virtual s"),
        (["--duration", "2h"], "--duration 7200s: a live run lasts at most 3600 s"),
        (["calibrate", "1", "--duration", "1000h"], "--duration 3600000s: a live run lasts at most 3600 s"),
        (
            ["--tier", "sim", "--class", "name=a connections=4096 loop=closed"]
            + ["--class", "name=b connections=1 loop=closed"],
            "--class: the traffic's 4097 connections: the sim tier runs at most 4096",
        ),
        # CPU lists: checked whenever given; without pinning they would do nothing
        (["--server-cpus", "0"], "--server-cpus 0: applies when pinned; add --pin"),
        (
            ["--tier", "sim", "--wrk-cpus", "1"],
            "--wrk-cpus 1: applies when pinned; the sim tier pins nothing",
        ),
        (
            ["peers", "--no-pin", "--wrk-cpus", "1"],
            "--wrk-cpus 1: applies when pinned; drop --no-pin, or leave out --wrk-cpus",
        ),
        (["--server-cpus", "4096"], "--server-cpus '4096': CPUs [4096] are not available"),
        (["--pin", "--wrk-cpus", "x"], "--wrk-cpus 'x': accepted a CPU list like 0 or 0,2 or 0-1"),
        (["--pin", "--wrk-cpus", "1-0"], "--wrk-cpus '1-0': accepted a CPU list like 0 or 0,2 or 0-1"),
        (["peers", "--server-cpus", "0,,1"], "--server-cpus '0,,1': accepted a CPU list"),
        # issue 38's fresh user, the option side: bounds a user would expect, checked before any run
        (
            ["--pin", "--server-cpus", "0-99999999999"],
            "--server-cpus '0-99999999999': CPUs [{past_last_cpu}-99999999999] are not available",
        ),
        (["--tier", "sim", "--seed", "-1"], "--seed: '-1': accepted an integer from 0 to 4294967295"),
        (["--seed", "4294967296"], "--seed: '4294967296': accepted an integer from 0 to 4294967295"),
        (
            ["--workers", "10000"],
            "--workers: '10000': accepted an integer from 1 to 1024 (the bench server's bound)",
        ),
        (["--runs", "100000"], "--runs: '100000': accepted an integer from 1 to 1000"),
        (["--connections", "99999999999999999999999"], "a live leg runs at most {live_connections}"),
        (["ab", "ab"], "'ab': the subcommand is already ab; a subcommand is given once, first"),
        (["--out", ""], "--out: '': empty; accepted a directory path"),
        (["--min-effect", "-5%"], "--min-effect: '-5%': accepted a fraction above 0 and below 1"),
        (["--seed", "-x"], "--seed: '-x': accepted an integer from 0"),
        (["--runs", "²"], "--runs: '²': accepted an integer from 1 to 1000"),  # a digit int() refuses
        (["--min-effect", "--out=x"], "--min-effect: expected one argument"),  # an option, not a value
        (["--duration", "1.5"], "--duration: '1.5': accepted whole seconds like 3, 3s, 2m"),
        (["--duration", "0.5s"], "--duration: '0.5s': accepted whole seconds like 3, 3s, 2m"),
        (["--pollution-limit", "1e309"], "--pollution-limit: '1e309': accepted a finite non-negative number"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, message, capsys, tmp_path, tmp_path_factory):
    bad_json = tmp_path_factory.mktemp("baseline") / "bad.json"
    bad_json.write_text("{ not json")
    argv = [a.format(bad_json=bad_json) for a in argv]
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    message = message.format(
        bad_json=bad_json,
        past_last_cpu=max(os.sched_getaffinity(0)) + 1,
        live_connections=soft - 64 if soft != resource.RLIM_INFINITY else 1_000_000,
    )
    out = [] if "--out" in argv else ["--out", str(tmp_path)]
    assert main([*argv, *out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: ") and message in err
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


@pytest.mark.parametrize("command", [[], ["validate"], ["calibrate", "1"], ["peers"]])
def test_live_connections_are_bounded_by_the_open_files_limit(command, capsys, tmp_path):
    """wrk opens a file per connection: a leg beyond ``ulimit -n`` less 64 is refused up front."""
    from tailjob.options import parse

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        assert main([*command, "--connections", "64,193", "--out", str(tmp_path)]) == 2
        largest = parse([*command, "--connections", "192", "--out", str(tmp_path)])
        assert largest.connections == (192,)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    err = capsys.readouterr().err
    assert "--connections 193: a live leg runs at most 192 connections" in err and "ulimit -n" in err


def test_the_sim_tiers_bounds_cover_every_profile_and_grid_in_the_repo():
    """The bounds of ``ab --tier sim``/``validate`` (connections, virtual seconds per run) are the sweep
    grid's, and every profile and every committed grid lies within them."""
    from tailjob_testdata import CI_DIR

    from tailjob import plan
    from tailjob.sim import grid

    assert (grid.MAX_CONNECTIONS, grid.MAX_DURATION_S) == (plan.SIM_MAX_CONNECTIONS, plan.SIM_MAX_DURATION_S)
    for p in plan.PROFILES.values():
        assert max(p.connections) <= plan.SIM_MAX_CONNECTIONS and p.duration_s <= plan.SIM_MAX_DURATION_S
        assert p.duration_s <= plan.WALL_MAX_DURATION_S
    files = sorted((CI_DIR / "workloads").glob("*.toml"))
    grids = ["default", *(str(f) for f in files if "[[load]]" in f.read_text())]
    loads = [lp for g in grids for lp in grid.load_grid(g).loads]  # GridError if out of bounds
    assert len(grids) >= 3 and max(lp.connections for lp in loads) <= plan.SIM_MAX_CONNECTIONS


@pytest.mark.parametrize("argv", [["--tier", "sim", "--duration", "1m"], ["--duration", "1h"]])
def test_the_largest_duration_each_tier_takes_is_accepted(argv):
    from tailjob.options import parse

    assert parse(argv).duration in (60, 3600)


def test_an_invalid_ambient_knob_is_refused_too(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("CWIST_HTTP_BATCH", "0")
    assert main(["--out", str(tmp_path)]) == 2
    assert "CWIST_HTTP_BATCH='0' is invalid" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--runs", "1"], ["--ab", "backend"], ["peers"]])
def test_an_invalid_ambient_knob_is_refused_even_when_every_arm_overrides_it(
    argv, monkeypatch, capsys, tmp_path
):
    # A user's report: CWIST_REACTOR_TAIL_US=abc ran and exited 0 because --ab tail sets it in both arms
    # (and CWIST_REACTOR_BACKEND=nope because --ab backend and --peers set the backend).
    name = "CWIST_REACTOR_BACKEND" if argv != ["--runs", "1"] else "CWIST_REACTOR_TAIL_US"
    monkeypatch.setenv(name, "abc")
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tail_latency: error: environment: {name}='abc' is invalid")
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--duration", "3x"],
        ["--runs", "0"],
        ["--min-effect", "150%"],
        ["calibrate", "0"],
        ["--connections", "64,"],
        ["--profile", "huge"],
    ],
)
def test_malformed_values_are_argparse_errors(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: argument") and err.count("\n") == 1


@pytest.mark.parametrize("command", ["calibrate", "peers"])
def test_a_live_only_subcommands_help_gives_no_virtual_time_bounds(command, capsys):
    assert main([command, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "virtual" not in out and "at most ulimit -n less 64" in out


@pytest.mark.parametrize("command", ["", "ab", "calibrate", "peers", "sweep", "validate", "count"])
def test_each_subcommand_has_a_short_help_and_the_exit_codes(command, capsys):
    """Every help ends in the same exit codes: a CI step branches on them (130 and 143: a job stopped
    by Ctrl-C or a CI timeout's SIGTERM, which keeps the runs it finished)."""
    assert main([command, "--help"] if command else ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: scripts/tail-latency.sh {command}".rstrip())  # what the user runs
    assert len(out.splitlines()) < 135  # with the exit codes (10 lines); the one flat parser's was 220
    codes = [c for c in out.split("exit codes:\n")[1].splitlines() if c[2:3].isdigit()]
    assert [c.split()[0] for c in codes] == ["0", "1", "2", "3", "130", "143"], out
    assert "--gate" in codes[1] and "bad input" in codes[2] and "environment" in codes[3]
    assert "SIGINT" in codes[4] and "SIGTERM" in codes[5] and "marked partial" in " ".join(out.split())


def test_no_subcommand_is_ab():
    from tailjob.options import parse

    assert parse([]).command == "ab" and parse(["--ab", "aa"]).ab == "aa"
    assert parse(["calibrate", "3"]).rounds == 3 and parse(["count"]).command == "count"


def test_the_installed_console_script_is_the_job(tmp_path):
    # pyproject.toml's [project.scripts]: the job without scripts/ci on sys.path.
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("tailreactor-tail-latency")
    assert script.exists(), "reinstall: pip install -e .[test,bench]"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(script), "--runs", "1", "--a", "CWIST_NOPE=1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert out.returncode == 2 and out.stderr.startswith("tail_latency: error: --a: unknown knob CWIST_NOPE")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["", "ab", "calibrate", "peers", "sweep", "validate", "count"])
def test_no_help_names_a_flat_spelling_or_a_page_whose_sections_moved(command, capsys):
    # the one-parser spellings are subcommands now; tail-latency-ci.md is an index of the split pages
    assert main([command, "--help"] if command else ["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for old in (
        "--peers",
        "--calibrate",
        "--validate",
        "--sweep",
        "--tier instructions",
        "tail-latency-ci.md",
    ):
        assert old not in text, old


@pytest.mark.parametrize("command", [[], ["--tier", "sim"], ["sweep"], ["count"], ["calibrate", "1"]])
@pytest.mark.parametrize("where", ["a-file", "under-proc"])
def test_an_out_that_cannot_be_a_directory_is_refused_before_anything_runs(command, where, capsys, tmp_path):
    """--out names a file, or a place no directory can be made: one line and exit 2 at once, not a
    traceback after the runs."""
    out = tmp_path / "afile" if where == "a-file" else Path("/proc/tailreactor-nope")
    if where == "a-file":
        out.write_text("")
    assert main([*command, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tail_latency: error: --out {out}: ") and err.count("\n") == 1, err


def test_peers_arguments_are_checked_before_its_setup_installs_nginx(tmp_path):
    """scripts/tail-latency.sh peers sets up nginx (apt-get) for its ceiling row: a bad argument is
    one line and exit 2 before that, so nothing is installed for a command that cannot run."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [str(root / "scripts" / "tail-latency.sh"), "peers", "--runs", "0", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "tail_latency: error: argument --runs: '0': accepted an integer from 1 to 1000 (runs per arm; the profiles run 8)"
    ]


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["calibrate", "--bogus"],  # K missing too: the unknown option is the mistake to name first
            "tail_latency: error: --bogus: not an option of calibrate (see scripts/tail-latency.sh calibrate --help)",
        ),
        (
            ["calibrate", "--gate"],
            "tail_latency: error: --gate: not an option of calibrate (an option of ab, count)",
        ),
        (["calibrate"], "tail_latency: error: the following arguments are required: K"),
    ],
    ids=["unknown", "another-subcommands", "k-missing"],
)
def test_an_unknown_option_is_named_before_a_missing_argument(argv, line, tmp_path):
    """As the wrapper is run (its early check of the options, before any setup), from a user's directory."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [str(root / "scripts" / "tail-latency.sh"), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
        check=False,
    )
    assert (done.returncode, done.stderr.splitlines()) == (2, [line])


def test_the_command_a_report_names_reads_back_as_the_arguments_given():
    """A report's "Command:" line, pasted into a shell, runs the same job: empty and spaced
    arguments keep their quotes (a fresh user's calibrate report had lost them)."""
    import shlex

    from tailjob import history

    argv = ["--a", "", "--b", "CWIST_BENCH_DELAY_US=200", "--server-cmd", "python3 -m http.server {port}"]
    line = history.command(argv)
    assert line.startswith("scripts/tail-latency.sh ") and shlex.split(line)[1:] == argv
    assert history.command([]) == "scripts/tail-latency.sh"


def test_installed_the_command_a_report_names_is_the_console_script(monkeypatch):
    """From a wheel there is no scripts/tail-latency.sh: reports and rerun lines name the console script
    of pyproject.toml's [project.scripts] (tailjob.CHECKOUT tells the two apart)."""
    import tomllib
    from tailjob_testdata import ROOT

    import tailjob
    from tailjob import history

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tailreactor-tail-latency"] == "tailjob.__main__:main"
    assert tailjob.CHECKOUT and tailjob.COMMAND == "scripts/tail-latency.sh"
    monkeypatch.setattr(tailjob, "COMMAND", "tailreactor-tail-latency")
    assert history.command(["ab", "--tier", "sim"]) == "tailreactor-tail-latency ab --tier sim"


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (scripts/bootstrap.sh --wrk)")
@pytest.mark.parametrize(
    "signum, status, says",
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_is_one_line_and_exit_130_keeping_the_finished_runs(tmp_path, signum, status, says):
    """Ctrl-C (or a CI timeout's SIGTERM) during the live runs: the server and wrk are stopped, the
    runs that finished are written as a report and JSON marked partial, and one line says so and
    names them, exit 130 (143)."""
    cmd = [
        str(Path(sys.executable).parent / "tailreactor-tail-latency"),
        "--backend",
        "epoll",
        "--duration",
        "2",
        "--runs",
        "8",
        "--no-warmup",
        "--out",
        str(tmp_path),
    ]
    code, rest = stopped_after_the_first_run(cmd, signum, cwd=Path(__file__).resolve().parents[2])
    assert code == status, rest
    last = rest.strip().splitlines()[-1]
    assert "Traceback" not in rest and last.startswith(f"tail_latency: {says} ("), rest
    md, js = sorted((tmp_path / "results").iterdir(), key=lambda p: p.suffix != ".md")
    assert md.name.endswith("-partial.md") and js.name.endswith("-partial.json"), (md, js)
    doc = json.loads(js.read_text())
    finished = len(doc["legs"][0]["runs"])
    assert last.endswith(f"({finished} of 16 runs finished, kept as partial: {md}, {js})"), last
    assert doc["partial"].startswith(f"{says} after {finished} of 16 runs"), doc["partial"]
    assert md.read_text().splitlines()[2].startswith(f"**Partial: {says} after {finished} of 16 runs")
