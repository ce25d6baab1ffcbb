"""``--tier sim`` of the job's command line: verdicts in virtual time, its files, bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tailjob_testdata  # noqa: F401  (puts scripts/ci on sys.path)

from tailjob import history
from tailjob.cli import main

REPO = Path(__file__).resolve().parents[2]

QUICK = ["--tier", "sim", "--backend", "epoll", "--duration", "1", "--runs", "8"]


def _result(out):
    [path] = (out / "results").glob("*-sim.json")
    return path


def test_mixed_ab_tail_prints_per_class_verdicts_and_writes_every_file(tmp_path, capsys):
    assert main([*QUICK, "--workload", "mixed", "--ab", "tail", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "virtual time" in text
    assert "### Class `interactive`" in text and "### Class `bulk`" in text
    assert "request_us" in text and "Seeds: 1-8" in text
    names = sorted(p.name.split("-", 1)[1] for p in (tmp_path / "results").iterdir())
    assert names == ["quick-tail-sim.json", "quick-tail-sim.md", "quick-tail-sim.png", "quick-tail-sim.svg"]
    [line] = (tmp_path / "tail-latency-sim.jsonl").read_text().splitlines()
    hist = json.loads(line)
    # the one history schema (the live job's line, with its tier): per leg and class, metrics and counts
    assert (hist["schema"], hist["tier"], hist["kind"]) == (history.LINE_SCHEMA, "sim", "ab")
    interactive = hist["legs"][0]["classes"]["interactive"]
    assert set(interactive["metrics"]["p99"]) == set(history.HISTORY_FIELDS)
    assert sum(interactive["verdict_counts"].values()) == len(interactive["metrics"])


def test_the_same_command_twice_gives_byte_identical_result_json(tmp_path):
    argv = [*QUICK, "--runs", "8", "--workload", "slow-route", "--ab", "tail"]
    assert main([*argv, "--out", str(tmp_path / "1")]) == 0
    assert main([*argv, "--out", str(tmp_path / "2")]) == 0
    assert _result(tmp_path / "1").read_bytes() == _result(tmp_path / "2").read_bytes()


def test_gate_fails_on_a_regression_in_virtual_time(tmp_path, capsys):
    argv = [
        *QUICK,
        "--load",
        "open",
        "--rate",
        "2000",
        "--connections",
        "16",
        "--a",
        "",
        "--b",
        "CWIST_BENCH_DELAY_US=4",
        "--gate",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 1
    # the live job's gate lines (tailjob.report.gate_tables), marked as virtual time
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if "REGRESSION" in ln]
    assert line.startswith("!!! REGRESSION in virtual time: ") and " metric" in line and "(+" in line


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tier", "sim", "--sim-cost", "request_us=-1"], "--sim-cost request_us=-1: accepted 0 to"),
        (["--tier", "sim", "--sim-cost", "nope=1"], "--sim-cost nope=1: unknown constant; accepted"),
        # issue 38: a key given twice is refused (the later one silently won); units as each takes
        (["--tier", "sim", "--sim-cost", "request_us=1 request_us=2"], "--sim-cost: request_us set twice"),
        (
            ["--tier", "sim", "--sim-cost", "request_us"],
            "--sim-cost 'request_us': not K=V; accepted wait_us=US, harvest_us=US, callback_us=US, "
            "request_us=US, instruction_ns=NS, client_us=US, wrk_us=US (US: microseconds, NS: nanoseconds)",
        ),
        (
            ["--tier", "sim", "--class", "name=a connections=8 loop=closed name=b"],
            "--class 'name=a connections=8 loop=closed name=b': name set twice",
        ),
        (
            ["--tier", "sim", "--class", "name=a connections=8 connections=9 loop=closed"],
            "connections set twice",
        ),
        (["--sim-cost", "request_us=3"], "--sim-cost applies to --tier sim"),
        (["--tier", "sim", "--pin"], "--pin: the sim tier"),
        (["--tier", "sim", "--workers", "2"], "--workers 2: the sim tier"),
        (["--tier", "sim", "--threads", "2"], "--threads 2: the sim tier"),
        (["--tier", "sim", "--probe"], "--probe: the sim tier"),
    ],
)
def test_bad_sim_options_exit_2_with_one_line(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: ") and message in err
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_backend_the_cost_model_does_not_know_is_refused(monkeypatch, capsys, tmp_path):
    # Every backend the knob registry accepts today is modelled; a plug-in one (module:factory) would not be.
    import tailjob.sim.cli as sim_cli

    monkeypatch.setattr(sim_cli, "MODELLED", ("epoll",))
    assert (
        main(
            [
                "--tier",
                "sim",
                "--backend",
                "epoll",
                "--a",
                "CWIST_REACTOR_BACKEND=selectors",
                "--b",
                "",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err == (
        "tail_latency: error: --a CWIST_REACTOR_BACKEND=selectors: the sim tier models epoll "
        "(its cost model has constants for those only)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_tier_is_refused_naming_what_is_accepted(capsys, tmp_path):
    assert main(["--tier", "cloud", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--tier: invalid choice: 'cloud' (choose from 'wall', 'sim')" in err
    assert err.count("\n") == 1  # the error alone, not argparse's usage block before it
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv, start, accepted",
    [
        # a workload is a name or a traffic file (tests/ci/test_tailjob_traffic.py)
        (
            ["--workload", "burst"],
            "--workload burst: accepted ",
            "uniform, mixed, slow-route, think-time or a traffic file",
        ),
        (["--backend", "asyncio"], "argument --backend: invalid choice: ", "(choose from "),
    ],
)
def test_a_choice_the_sim_cannot_take_is_one_line(argv, start, accepted, capsys, tmp_path):
    assert main(["--tier", "sim", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tail_latency: error: {start}") and accepted in err
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_ref_runs_arm_a_on_a_commit_and_names_it(tmp_path, capsys):
    argv = [
        "--tier",
        "sim",
        "--backend",
        "epoll",
        "--duration",
        "1",
        "--runs",
        "2",
        "--load",
        "open",
        "--rate",
        "1000",
        "--connections",
        "8",
        "--a-ref",
        "HEAD",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "arm A runs `--a-ref HEAD`, commit " in text and "B `working tree`" in text
    doc = json.loads(_result(tmp_path).read_text())
    assert doc["a_ref"]["ref"] == "HEAD" and len(doc["a_ref"]["commit"]) == 40


def test_a_ref_in_the_sim_tier_runs_from_the_installed_command(tmp_path):
    # The console script's spawned workers import its __main__ again: it must not import tailreactor
    # before refcode.use chooses arm A's code (it did: "tailreactor was imported before the --a-ref
    # worker could choose its code", a traceback and exit 3).
    script = Path(sys.executable).with_name("tailreactor-tail-latency")
    assert script.exists(), "reinstall: pip install -e .[test,bench]"
    argv = ["ab", "--tier", "sim", "--backend", "epoll", "--duration", "1", "--runs", "2", "--load", "open"]
    argv += ["--rate", "1000", "--connections", "8", "--a-ref", "HEAD", "--out", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(script), *argv], capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert json.loads(_result(tmp_path).read_text())["a_ref"]["ref"] == "HEAD"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            # on epoll: where io_uring is refused the io_uring leg's skip line would come first
            ["--tier", "sim", "--backend", "epoll", "--a-ref", "no-such-ref"],
            "--a-ref 'no-such-ref': not a commit of this repository",
        ),
        (["count", "--a-ref", "HEAD"], "--a-ref: not an option of count (an option of ab)"),
    ],
)
def test_a_bad_a_ref_is_one_line(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["ab", "validate"])
def test_sim_cost_help_lists_every_constant_of_the_cost_model(command, capsys):
    from tailjob.sim import costs

    assert main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    help_ = text.split("--sim-cost 'K=V ...'")[-1]
    for name in costs.for_backend("epoll").constants:
        assert name in help_, name
    assert f"0 to {costs.LIMIT_US:g}" in help_


def _job_with_open_files(soft: int, argv: list[str]):
    """The job as a user's shell runs it where the soft limit of open files is ``soft`` (a desktop
    session's is 1024; here lower, for a smaller run)."""
    import resource
    import subprocess
    import sys

    from tailjob_testdata import CI_DIR

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return subprocess.run(
        [sys.executable, str(CI_DIR / "tail_latency.py"), *argv],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_leg_of_more_connections_than_the_soft_limit_of_open_files_allows_runs(tmp_path):
    # A socketpair per connection: 300 connections are 600 files; the soft limit (256 here, a shell's
    # 1024 in life, which stopped the high profile's c1024) is raised up to the hard limit.
    argv = ["--tier", "sim", "--backend", "epoll", "--duration", "1", "--runs", "1", "--connections", "300"]
    done = _job_with_open_files(256, [*argv, "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(_result(tmp_path).read_text())["legs"][0]["connections"] == 300


def _sim_job_interrupted(tmp_path, signum: int) -> tuple[int, str]:
    """A sim-tier job given ``signum`` to its whole process group (a terminal's Ctrl-C reaches the
    worker processes too) once its first runs are done: (exit status, what it printed after)."""
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "tailreactor-tail-latency"),
            "--tier",
            "sim",
            "--class",
            "name=a connections=8 loop=closed",
            "--duration",
            "1",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # A shell's background job (and an xdist worker) ignores SIGINT; a terminal's finds the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first progress line: the worker processes are running
            if "runs" in line:
                break
        os.killpg(proc.pid, signum)
        rest = proc.stderr.read()
        return proc.wait(timeout=60), rest  # generous: fails a hang only
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stderr.close()


def test_ctrl_c_in_the_sim_tier_ends_its_workers_with_one_line(tmp_path):
    """Ctrl-C to the job's process group: no worker traceback, one line, exit 130, no hang; the runs
    that finished are written as the full job writes them, marked partial, and the line names them."""
    status, rest = _sim_job_interrupted(tmp_path, signal.SIGINT)
    assert status == 130, rest
    assert "Traceback" not in rest and _kept(tmp_path, rest, "interrupted"), rest


def test_sigterm_in_the_sim_tier_is_one_line_and_exit_143(tmp_path):
    """SIGTERM (a CI timeout): the same, with its own line and 128 + 15."""
    status, rest = _sim_job_interrupted(tmp_path, signal.SIGTERM)
    assert status == 143, rest
    assert "Traceback" not in rest and "Exception ignored" not in rest, rest
    assert _kept(tmp_path, rest, "terminated (SIGTERM)"), rest


def _kept(tmp_path: Path, rest: str, says: str) -> bool:
    """Whether the job's last line (after ``says``) names the partial report and JSON it wrote, with
    the runs they hold (4 at least: a progress line had come) of those planned, as the JSON says."""
    last = rest.strip().splitlines()[-1]
    md, js = sorted((tmp_path / "results").iterdir(), key=lambda p: p.suffix != ".md")
    assert md.name.endswith("-sim-partial.md") and js.name.endswith("-sim-partial.json"), (md, js)
    doc = json.loads(js.read_text())
    finished = sum(len(runs) for leg in doc["legs"] for runs in leg["runs"].values())
    said = re.fullmatch(
        rf"tail_latency: {re.escape(says)} \((\d+) of (\d+) runs finished, kept as partial: (.+)\)", last
    )
    assert said and said[3] == f"{md}, {js}", last
    assert int(said[1]) == finished and 4 <= finished < int(said[2]), last
    assert doc["partial"].startswith(f"{says} after {finished} of {said[2]} runs"), doc["partial"]
    assert md.read_text().splitlines()[2].startswith(f"**Partial: {says} after"), md.read_text()[:500]
    return True


def test_a_relative_traffic_file_is_where_the_user_ran_the_command(tmp_path):
    """scripts/tail-latency.sh runs the job from the repository root and says where the user was in
    TAILJOB_CWD: a relative ``--workload`` (and ``--out``) is relative to that, as in every command.
    Run through the wrapper, from the user's directory."""
    root = Path(__file__).resolve().parents[2]
    example = root / "scripts" / "ci" / "workloads" / "example.toml"
    (tmp_path / "mine.toml").write_text(example.read_text())
    env = {k: v for k, v in os.environ.items() if k != "TAILJOB_CWD"}
    out = subprocess.run(
        [
            str(root / "scripts" / "tail-latency.sh"),
            *QUICK,
            "--workload",
            "mine.toml",
            "--out",
            "out",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert list((tmp_path / "out" / "results").glob("*-sim.json")), out.stderr[-2000:]
