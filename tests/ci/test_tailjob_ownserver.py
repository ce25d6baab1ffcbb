"""Your own server under the job (``--server-cmd``, ``--a-cmd``/``--b-cmd``): real processes, real wrk,
Debian's nginx; and the job's exit codes and GitHub Actions' job summary."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tailjob_testdata import CI_DIR, ROOT

from tailjob import peers, stepsummary
from tailjob.cli import main
from tailjob.options import build_parser

NGINX = ROOT / "examples" / "own-server" / "nginx-server.sh"
FORKING = Path(__file__).with_name("forking_server.py")
TINY = ["--threads", "1", "--connections", "8", "--duration", "1", "--runs", "1", "--no-warmup"]
NGINX_MISSING = "nginx not found (scripts/bootstrap.sh --nginx installs it: apt-get install nginx)"


def job(
    tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """The job as a user runs it, writing under ``tmp_path/out``; its server commands' temporary
    files go to ``tmp_path/tmp`` (TMPDIR), which a test can check is empty afterwards."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, str(CI_DIR / "tail_latency.py"), *args, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp"), **(env or {})},
    )


def result(tmp_path: Path) -> dict:
    return json.loads(next((tmp_path / "out" / "results").glob("*.json")).read_text())


def errors(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stderr.splitlines() if "error:" in line]


def nginx_or_skip() -> str:
    nginx = peers.find_nginx()
    if nginx is None:
        pytest.skip(NGINX_MISSING)
    return nginx


# -- a server nobody here wrote: nginx ----------------------------------------------------------------


@pytest.mark.wrk
def test_nginx_ab_of_two_environment_settings_on_the_wall_tier(tmp_path):
    nginx_or_skip()
    out = job(
        tmp_path,
        "--server-cmd",
        f"{NGINX} {{port}}",
        "--a",
        "NGINX_WORKERS=1",
        "--b",
        "NGINX_WORKERS=2",
        *TINY,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"against the server command `{NGINX} {{port}}`" in out.stdout
    assert "server command, c8: no verdict (1 paired run; a verdict needs 8)" in out.stdout
    [leg] = result(tmp_path)["legs"]
    assert leg["env"] == {"A": {"NGINX_WORKERS": "1"}, "B": {"NGINX_WORKERS": "2"}}
    assert sorted(r["arm"] for r in leg["runs"]) == ["A", "B"]
    for r in leg["runs"]:
        assert r["wrk"]["requests"] > 0 and r["wrk"]["errors"]["status"] == 0
        # the script and nginx's master wait; the workers serve: their CPU is the server's
        assert r["metrics"]["cpu_us_per_req"] > 0
        assert not [f for f in r["flags"] if f.startswith("server-")], r["flags"]
    assert list((tmp_path / "tmp").iterdir()) == [], "a run's nginx directory was left behind"


@pytest.mark.wrk
def test_a_b_of_two_commands_appends_the_verdicts_to_the_step_summary(tmp_path):
    nginx_or_skip()
    summary = tmp_path / "summary.md"
    summary.write_text("# an earlier step's summary\n")
    out = job(
        tmp_path,
        "--a-cmd",
        f"{NGINX} {{port}}",
        "--b-cmd",
        f"env NGINX_KEEPALIVE_REQUESTS=100 {NGINX} {{port}}",
        *TINY,
        env={stepsummary.VARIABLE: str(summary)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = summary.read_text()
    assert text.startswith("# an earlier step's summary\n# Tail-latency job: `--ab custom`")
    assert "## Verdicts" in text and "| Metric | A | B | B/A |" in text
    assert "(A) and `env NGINX_KEEPALIVE_REQUESTS=100" in text
    assert "## What the numbers are" not in text
    assert f"- {summary} (the verdicts appended: GITHUB_STEP_SUMMARY)" in out.stdout


# -- the process tree: a server that forks a worker doing the work ------------------------------------


@pytest.mark.wrk
def test_server_cpu_is_the_whole_process_trees(tmp_path):
    # forking_server.py's parent only waits; its child listens and spends 2 ms of CPU per request.
    # Counting the parent alone would give about 0 us per request.
    out = job(
        tmp_path,
        "--server-cmd",
        f"{shlex.quote(sys.executable)} {FORKING} {{port}} 2000",
        "--ab",
        "aa",
        *TINY[:2],
        "--connections",
        "1",
        *TINY[4:],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for r in result(tmp_path)["legs"][0]["runs"]:
        assert r["wrk"]["requests"] > 0
        assert r["metrics"]["cpu_us_per_req"] >= 1500, r["metrics"]


def _tree(pid: int, marker: bytes) -> list[int]:
    """Pids of ``pid``'s descendants whose command line contains ``marker``."""
    from tailjob.procstat import process_tree

    found = []
    for p in process_tree(pid)[1:]:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if marker in f.read():
                    found.append(p)
        except OSError:
            continue
    return found


@pytest.mark.wrk
def test_sigterm_to_the_job_stops_the_server_commands_whole_tree(tmp_path):
    """A CI timeout on the job must leave neither the command nor the worker it forked running."""
    import select
    import signal
    import time

    job = subprocess.Popen(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            "--server-cmd",
            f"{sys.executable} {FORKING} {{port}} 0",
        ]
        + ["--ab", "aa", "--threads", "1", "--connections", "1", "--duration", "30", "--runs", "1"]
        + ["--no-warmup", "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        servers: list[int] = []
        loads: list[int] = []
        # No event marks "wrk started": look until the command, its worker and wrk are there or the
        # job is gone (as test_tailjob_e2e's SIGTERM test does for the bench server).
        while not (len(servers) == 2 and loads) and job.poll() is None:
            servers, loads = _tree(job.pid, b"forking_server"), _tree(job.pid, b"wrk")
            time.sleep(0.05)
        assert len(servers) == 2 and loads, f"the job exited {job.returncode} before a measured run"
        pidfds = [os.pidfd_open(p) for p in servers]
        try:
            job.send_signal(signal.SIGTERM)
            assert job.wait(120) != 0  # (hang guards, not bounds)
            for fd in pidfds:
                assert select.select([fd], [], [], 60)[0], "a process of the server command outlived the job"
        finally:
            for fd in pidfds:
                os.close(fd)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


# -- readiness: an answer within the bound, else one line and exit 3 ----------------------------------


def test_a_server_that_listens_but_never_answers_ends_in_one_line_and_exit_3(tmp_path):
    pidfile = tmp_path / "pid"
    out = job(
        tmp_path,
        "--server-cmd",
        f"{shlex.quote(sys.executable)} {FORKING} {{port}} silent {pidfile}",
        "--ab",
        "aa",
        "--ready-timeout",
        "1",
        *TINY,
        timeout=120,
    )
    assert out.returncode == 3, out.stderr[-2000:]
    [line] = errors(out)
    assert "server command did not answer GET / on port" in line and "within 1 s" in line, line
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):  # stopped with its process group, never left running
        os.kill(pid, 0)


def test_an_answer_from_another_process_on_the_port_is_not_readiness(tmp_path):
    # Another server took the port (the race of a port chosen a moment ago); the command, which
    # cannot bind it, stays up.  The other server's answer must not make the command "ready".
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    from tailjob.server import CommandServer, ServerError, answers

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Ok) as other:
        Thread(target=other.serve_forever, daemon=True).start()
        port = other.server_address[1]
        assert answers("127.0.0.1", port, "/", timeout_s=5)
        lost = CommandServer(
            f"{shlex.quote(sys.executable)} -c 'import time, sys; time.sleep(60)' {{port}}",
            {},
            port=port,
            start_timeout_s=1,
        )
        with pytest.raises(ServerError, match=f"did not answer GET / on port {port} within 1 s"):
            lost.start()
        other.shutdown()
    assert lost.proc is not None and lost.proc.poll() is not None, "the command was left running"


def test_a_server_command_whose_port_was_taken_is_started_again_on_a_fresh_port():
    # The race of a port chosen a moment ago: the first port is taken when the command binds it; its
    # worker fails with EADDRINUSE, the command exits, and ServerProcess.start tries a fresh port.
    import socket

    from tailjob.server import CommandServer, answers

    class Offered(CommandServer):
        def choose_port(self) -> int:
            return offered.pop(0)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            fresh = s.getsockname()[1]
        offered = [taken.getsockname()[1], fresh]
        with Offered(f"{shlex.quote(sys.executable)} {FORKING} {{port}} 0", {}) as server:
            assert offered == [] and server.port == fresh
            assert answers("127.0.0.1", fresh, "/", timeout_s=5)


def test_a_server_command_that_is_not_found_is_exit_3(tmp_path, capsys):
    assert (
        main(["--server-cmd", "no-such-server-here --port {port}", "--ab", "aa", "--out", str(tmp_path)]) == 3
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "tail_latency: error: --server-cmd: no-such-server-here not found (not an executable file, not on PATH)"
    ]


def test_a_server_command_that_exits_says_its_status_and_the_command_to_paste(tmp_path):
    """It exited before listening: its exit status, and its command quoted as a shell takes it."""
    cmd = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(5)' {{port}}"
    out = job(tmp_path, "--server-cmd", cmd, "--ab", "aa", *TINY, timeout=120)
    assert out.returncode == 3, out.stderr[-2000:]
    [line] = errors(out)
    assert "server command exited with status 5 before listening:" in line, line
    assert f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(5)' " in line, line


def test_a_server_script_that_is_not_executable_says_so(tmp_path, capsys):
    script = tmp_path / "server.py"
    script.write_text("print('hi')\n")
    script.chmod(0o644)
    assert main(["--server-cmd", f"{script} {{port}}", "--ab", "aa", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"tail_latency: error: --server-cmd: {script} is not executable "
        f"(chmod +x {script}, or run it with its interpreter)"
    ]


def test_a_server_that_answers_only_errors_is_a_failed_run(tmp_path):
    """Every answer a 500: nothing was served, so nothing to measure -- exit 3, naming the status."""
    cmd = f"{shlex.quote(sys.executable)} {FORKING} {{port}} 0:500"
    out = job(tmp_path, "--server-cmd", cmd, "--ab", "aa", *TINY, timeout=120)
    assert out.returncode == 3, out.stderr[-2000:]
    [line] = errors(out)
    assert "every answer was an error" in line and "status 500" in line, line


@pytest.mark.wrk
@pytest.mark.parametrize("closes", [True, False], ids=["connection-close", "keep-alive"])
def test_a_server_that_closes_every_connection_has_its_runs_flagged(tmp_path, closes):
    """A server that answers `Connection: close`: wrk opens a connection for every request and says
    nothing of it (no error), so the figures are of reconnects; every run is flagged, as pollution is."""
    cmd = f"{shlex.quote(sys.executable)} {FORKING} {{port}} 0"
    env = {"FORKING_NO_KEEP_ALIVE": "1"} if closes else {}
    out = job(tmp_path, "--server-cmd", cmd, "--ab", "aa", *TINY, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    [leg] = result(tmp_path)["legs"]
    assert [("no-keep-alive" in r["flags"]) for r in leg["runs"]] == [closes, closes], leg["runs"]
    assert all(r["wrk"]["errors"]["read"] == 0 for r in leg["runs"])  # wrk itself says nothing
    said = "2 no-keep-alive (the server closed the connection after its answer"
    assert (said in out.stdout) == closes, out.stdout


def test_a_failed_run_keeps_the_runs_that_finished_as_a_partial_result(tmp_path):
    """The server command exits on its third start: two runs had finished.  They are written as the
    full job writes them (report and JSON), marked partial, and the one line names the files."""
    script = tmp_path / "flaky.py"
    script.write_text(
        "import os, sys\n"
        f"starts = {str(tmp_path / 'starts')!r}\n"
        "n = int(open(starts).read()) if os.path.exists(starts) else 0\n"
        "open(starts, 'w').write(str(n + 1))\n"
        "if n >= 2:\n    sys.exit(7)\n"
        f"os.execv(sys.executable, [sys.executable, {str(FORKING)!r}, sys.argv[1], '0'])\n"
    )
    cmd = f"{shlex.quote(sys.executable)} {script} {{port}}"
    tiny = [*TINY[: TINY.index("--runs")], "--runs", "2", "--no-warmup"]
    out = job(tmp_path, "--server-cmd", cmd, "--ab", "aa", *tiny, timeout=120)
    assert out.returncode == 3, out.stderr[-2000:]
    [line] = errors(out)
    assert "exited with status 7 before listening" in line, line
    assert line.endswith(
        " (2 of 4 runs finished, kept as partial: " + ", ".join(partial_files(tmp_path)) + ")"
    )
    doc = result(tmp_path)
    assert doc["partial"].startswith("stopped by a failed run after 2 of 4 runs"), doc["partial"]
    [leg] = doc["legs"]
    assert [(r["trial"], r["arm"]) for r in leg["runs"]] == [(0, "A"), (0, "B")] or [
        (r["trial"], r["arm"]) for r in leg["runs"]
    ] == [(0, "B"), (0, "A")]
    # one pair: every comparison says why it has no verdict
    assert {c["verdict"] for c in leg["comparisons"]} == {"n/a"}, leg["comparisons"]
    report = next((tmp_path / "out" / "results").glob("*.md")).read_text().splitlines()
    assert report[2].startswith("**Partial: stopped by a failed run after 2 of 4 runs"), report[:4]
    assert not (tmp_path / "out" / "tail-latency.jsonl").exists()  # the history is of finished jobs


def partial_files(tmp_path: Path) -> list[str]:
    """The partial result's report and JSON, as the one line names them."""
    found = sorted((tmp_path / "out" / "results").iterdir())
    assert [p.name.endswith("-partial.json") or p.name.endswith("-partial.md") for p in found] == [True] * 2
    return [str(p) for p in sorted(found, key=lambda p: p.suffix != ".md")]


def test_the_nginx_example_without_nginx_says_how_to_install_it(tmp_path):
    out = job(
        tmp_path,
        "--server-cmd",
        f"{NGINX} {{port}}",
        "--ab",
        "aa",
        *TINY,
        env={**os.environ, "NGINX": str(tmp_path / "no-nginx-here")},
        timeout=120,
    )
    assert out.returncode == 3, out.stderr[-2000:]
    [line] = errors(out)
    assert "exited with status 127 before listening" in line, line
    assert "no-nginx-here not found (scripts/bootstrap.sh --nginx installs it" in out.stderr, out.stderr


def test_identical_arms_run_with_a_hint_to_name_the_control(tmp_path):
    cmd = f"{shlex.quote(sys.executable)} {FORKING} {{port}} 0"
    out = job(tmp_path, "--server-cmd", cmd, "--a", "X=1", "--b", "X=1", *TINY, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tail_latency: note: arms A and B are the same (X=1): an A/A control; --ab aa names it so" in (
        out.stderr
    ), out.stderr


def test_a_server_that_dies_during_a_run_says_its_status_and_trial(tmp_path):
    cmd = f"{shlex.quote(sys.executable)} {FORKING} {{port}} 0"
    out = job(
        tmp_path,
        "--server-cmd",
        cmd,
        "--ab",
        "aa",
        *TINY,
        env={"FORKING_EXIT_AFTER": "50"},
        timeout=120,
    )
    assert out.returncode == 3, out.stderr[-2000:]
    [line] = errors(out)
    assert ", trial 1: server command died with status 5 during the run" in line, line


# -- what cannot apply to a server command: one line, exit 2 ------------------------------------------

CMD = ["--server-cmd", f"{sys.executable} -m http.server {{port}}"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--tier", "sim", "--ab", "aa"], "--tier sim simulates the project's own reactor"),
        (["--probe", "--ab", "aa"], "--probe reads the bench server's latency probe"),
        (["--a-ref", "HEAD"], "--a-ref runs the project's code of a git ref"),
        (["--backend", "epoll", "--ab", "aa"], "--backend is the bench server's"),
        (["--workers", "2", "--ab", "aa"], "--workers is the bench server's"),
        (["--ab", "tail"], "--ab tail sets CWIST_* knobs"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_what_only_the_bench_server_has_is_refused_in_one_line(args, says, tmp_path, capsys):
    assert main([*CMD, *args, "--out", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tail_latency: error: ") and says in line and "--server-cmd" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, says",
    [
        ([*CMD], "--server-cmd runs both arms: say how the arms differ with --a/--b"),
        (
            ["--a-cmd", f"{sys.executable} -m http.server {{port}}", "--b-cmd", CMD[1]],
            "--a-cmd and --b-cmd are the same command: say how the arms differ with --a/--b",
        ),
        (["--server-cmd", "server --port 8080", "--ab", "aa"], "no {port} in it"),
        (["--server-cmd", "server '{port}", "--ab", "aa"], "No closing quotation"),
        (["--a-cmd", "server {port}"], "--b-cmd missing: --a-cmd and --b-cmd go together"),
        ([*CMD, "--a-cmd", "server {port}", "--b-cmd", "x {port}"], "--server-cmd runs both arms"),
        ([*CMD, "--a", "1BAD=2"], "--a: '1BAD=2' is not K=V"),
        ([*CMD, "--ab", "aa", "--a", "X=1"], "--ab cannot be combined with --a/--b"),
        ([*CMD, "--ab", "aa", "--workload", "mixed"], "request the bench server's service route"),
        (
            [*CMD, "--ab", "aa", "--ready-timeout", "0"],
            "--ready-timeout: '0': accepted a positive number of seconds",
        ),
        (["--ab", "aa", "--ready-timeout", "5"], "--ready-timeout 5 applies to a server command"),
        # a bound that never ends would wait for ever on a server that never answers
        (
            [*CMD, "--ab", "aa", "--ready-timeout", "inf"],
            "'inf': accepted a positive number of seconds up to 600",
        ),
        (
            [*CMD, "--ab", "aa", "--ready-timeout", "nan"],
            "'nan': accepted a positive number of seconds up to 600",
        ),
        ([*CMD, "--ab", "aa", "--ready-timeout", "1e300"], "'1e300': accepted a positive number of seconds"),
        (
            [*CMD, "--ab", "aa", "--ready-timeout", "601"],
            "'601': accepted a positive number of seconds up to 600",
        ),
    ],
    ids=lambda v: "-".join(v[-2:]) if isinstance(v, list) else None,
)
def test_bad_server_options_are_one_line_and_exit_2(args, says, tmp_path, capsys):
    try:
        code = main([*args, "--out", str(tmp_path)])
    except SystemExit as e:  # argparse's own check of a value
        code = e.code
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert says in line, line


def test_arms_of_a_server_command_take_any_variable_but_the_bench_servers_only_knobs(capsys, tmp_path):
    from tailjob.plan import PlanError, arms_for

    a, b = arms_for(None, a="WORKERS=4 MODE='fast path'", b="", knobs=False)
    assert dict(a.env) == {"WORKERS": "4", "MODE": "fast path"} and dict(b.env) == {}
    with pytest.raises(PlanError, match="unknown knob WORKERS"):
        arms_for(None, a="WORKERS=4")


# -- exit codes, written in --help ----------------------------------------------------------------------


@pytest.mark.wrk
def test_gate_on_a_regressed_build_is_exit_1(tmp_path):
    # Two "builds" of one server: B spends 3 ms of CPU per request, A none; 8 paired runs (a verdict).
    server = f"{shlex.quote(sys.executable)} {FORKING} {{port}}"
    out = job(
        tmp_path,
        "--a-cmd",
        f"{server} 0",
        "--b-cmd",
        f"{server} 3000",
        "--gate",
        "--threads",
        "1",
        "--connections",
        "1",
        "--duration",
        "1",
        "--runs",
        "8",
        "--no-warmup",
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert errors(out) == ["tail_latency: error: --gate: a metric regressed (see the verdicts above)"]
    verdicts = {c["metric"]: c["verdict"] for c in result(tmp_path)["legs"][0]["comparisons"]}
    assert verdicts["rps"] == verdicts["cpu_us_per_req"] == "regression", verdicts


@pytest.mark.wrk
def test_calibrate_a_server_command_that_spends_the_injected_delay(tmp_path):
    out = job(
        tmp_path,
        "calibrate",
        "1",
        "--server-cmd",
        f"{shlex.quote(sys.executable)} {FORKING} {{port}} 200",
        *TINY[:2],
        "--connections",
        "1",
        "--duration",
        "1",
        "--runs",
        "2",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "the slowdown legs set CWIST_BENCH_DELAY_US (us) in arm B" in out.stderr
    doc = json.loads(next((tmp_path / "out" / "results").glob("*-calibrate.json")).read_text())
    assert [(leg["kind"], leg["backend"]) for leg in doc["legs"]] == [
        (kind, "server command, c1") for kind in ("aa", "slow10", "slow25")
    ]
    slow25 = doc["legs"][2]
    cpu = next(c for c in slow25["comparisons"] if c["metric"] == "cpu_us_per_req")
    assert slow25["delay_us"] > 0 and cpu["ratio"] > 1.1, cpu  # the server spent it: CPU, not wall clock


def test_calibrate_runs_one_server_not_two_builds(tmp_path, capsys):
    # calibrate's --help does not offer what it would refuse; given, they are ab's options
    assert main(["calibrate", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--server-cmd" in text and "--ready-timeout" in text
    assert "--a-cmd" not in text and "--b-cmd" not in text
    argv = ["calibrate", "1", "--a-cmd", "a {port}", "--b-cmd", "b {port}", "--out", str(tmp_path)]
    assert main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == "tail_latency: error: --a-cmd: not an option of calibrate (an option of ab)"
    assert list(tmp_path.iterdir()) == []


def test_the_largest_ready_timeout_is_accepted():
    from tailjob.options import parse

    assert parse([*CMD, "--ab", "aa", "--ready-timeout", "600"]).ready_timeout == 600


@pytest.mark.parametrize("command", ["count", "validate", "peers", "sweep"])
def test_the_subcommands_of_the_projects_own_servers_take_no_server_command(command, tmp_path, capsys):
    assert main([command, *CMD, "--out", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert (
        line == f"tail_latency: error: --server-cmd: not an option of {command} (an option of ab, calibrate)"
    )
    assert list(tmp_path.iterdir()) == []


def test_help_says_every_exit_code():
    text = build_parser().format_help()
    for code in ("0 done", "1 --gate and a metric is a regression", "2 bad input", "3 the environment"):
        assert code in " ".join(text.split()), code


def test_wrk_missing_is_the_environment_exit_3(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no wrk here
    assert main(["--ab", "aa", "--backend", "epoll", "--out", str(tmp_path / "out")]) == 3
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "'wrk' not found" in line and "scripts/bootstrap.sh --wrk" in line


def test_taskset_missing_is_the_environment_exit_3(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["--ab", "aa", "--backend", "epoll", "--pin", "--out", str(tmp_path / "out")]) == 3
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--pin needs taskset" in line


# -- GitHub Actions' job summary -------------------------------------------------------------------------


def test_step_summary_is_the_report_up_to_its_explanation_appended(tmp_path):
    target = tmp_path / "summary.md"
    report = "# Job\n\n## Verdicts\n\n| Metric | Verdict |\n|---|---|\n| p99 ms | gain |\n\n## What the numbers are\n\n- x\n"
    assert stepsummary.append(report, {}) is None and not target.exists()
    assert stepsummary.append(report, {"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert stepsummary.append(report, {"GITHUB_STEP_SUMMARY": str(target)}) == target
    part = "# Job\n\n## Verdicts\n\n| Metric | Verdict |\n|---|---|\n| p99 ms | gain |\n\n"
    assert target.read_text() == part * 2


def test_the_sim_tier_appends_its_verdicts_to_the_step_summary(tmp_path, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv(stepsummary.VARIABLE, str(summary))
    argv = [
        "--tier",
        "sim",
        "--backend",
        "epoll",
        "--connections",
        "4",
        "--duration",
        "1",
        "--runs",
        "8",
        "--ab",
        "aa",
    ]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    text = summary.read_text()
    assert text.startswith("# Tail-latency job in virtual time (`--tier sim`): `--ab aa`")
    assert "| Verdict |" in text and "equivalent" in text
    assert f"- {summary} (the verdicts appended: GITHUB_STEP_SUMMARY)" in capsys.readouterr().out


def test_an_unwritable_step_summary_is_one_line_and_the_job_goes_on(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "dir" / "summary.md"
    assert stepsummary.append("# Job\n", {"GITHUB_STEP_SUMMARY": str(missing)}) is None
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "cannot append the verdicts" in line and str(missing) in line
