"""``calibrate`` and ``peers`` stopped early keep the runs they finished, as the A/B does
(test_tailjob_cli.py's Ctrl-C test): real jobs on 127.0.0.1, stopped by a signal sent when the progress
line shows the first run finished, or by a server that really fails; the report and JSON are written
as ``<stem>-partial``, the one line names them, exit 130/143 (signals) or 3 (a failed run)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tailjob_testdata import CI_DIR, stopped_after_the_first_run

pytestmark = pytest.mark.wrk  # skipped without wrk (tests/conftest.py)

FORKING = Path(__file__).with_name("forking_server.py")
TINY = ["--threads", "1", "--connections", "8", "--duration", "1", "--runs", "2", "--no-warmup"]
SIGNALS = pytest.mark.parametrize(
    "signum, status, says",
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    ids=["ctrl-c", "sigterm"],
)


def partial_files(out: Path, kind: str) -> tuple[Path, Path, dict]:
    """The partial report and JSON (and the JSON's document): the only files the job wrote."""
    found = sorted((out / "results").iterdir(), key=lambda p: p.suffix != ".md")
    assert [p.name.split("-quick-")[1] for p in found] == [f"{kind}-partial.md", f"{kind}-partial.json"]
    assert sorted(p.name for p in out.iterdir()) == ["results"]  # no history line, no README
    return found[0], found[1], json.loads(found[1].read_text())


def check_the_line_and_marks(err: str, says: str, md: Path, js: Path, doc: dict, finished: int, total: int):
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith(f"tail_latency: {says}"), err
    assert last.endswith(f" ({finished} of {total} runs finished, kept as partial: {md}, {js})"), last
    assert doc["partial"].startswith(f"{says} after {finished} of {total} runs"), doc["partial"]
    assert md.read_text().splitlines()[2].startswith(f"**Partial: {says} after {finished} of {total} runs")


@SIGNALS
def test_calibrate_stopped_by_a_signal_keeps_its_finished_runs_as_partial(tmp_path, signum, status, says):
    argv = ["calibrate", "1", "--backend", "epoll", *TINY, "--out", str(tmp_path)]
    code, err = stopped_after_the_first_run([sys.executable, str(CI_DIR / "tail_latency.py"), *argv], signum)
    assert code == status, err
    md, js, doc = partial_files(tmp_path, "calibrate")
    legs = doc["legs"]
    assert legs and [leg["kind"] for leg in legs] == ["aa", "slow10", "slow25"][: len(legs)]
    finished = sum(len(leg["leg"]["runs"]) for leg in legs)
    assert finished >= 1
    check_the_line_and_marks(err, says, md, js, doc, finished, 12)  # 3 kinds x 2 trials x 2 arms
    assert "; not reached: " in doc["partial"] and doc["partial"].count("round 1: epoll, c8, slow25") == 1
    assert "| epoll, c8 | Requests/s |" in md.read_text()  # the table, of what ran


def test_calibrate_signalled_again_and_again_while_it_stops_still_keeps_its_runs(tmp_path):
    """SIGTERM sent again and again until the job exits (a CI timeout that signals the job and then
    its process group): the later ones are ignored while the job stops its servers and writes the
    runs it kept, so the partial files and the one line are there, exit 143."""
    argv = ["calibrate", "1", "--backend", "epoll", *TINY, "--out", str(tmp_path)]
    cmd = [sys.executable, str(CI_DIR / "tail_latency.py"), *argv]
    code, err = stopped_after_the_first_run(cmd, signal.SIGTERM, until_it_ends=True)
    assert code == 143, err
    md, js, doc = partial_files(tmp_path, "calibrate")
    finished = sum(len(leg["leg"]["runs"]) for leg in doc["legs"])
    check_the_line_and_marks(err, "terminated (SIGTERM)", md, js, doc, finished, 12)


def test_calibrate_stopped_by_a_failed_run_keeps_the_runs_before_it(tmp_path):
    """The server command exits on its third start: the A/A leg's first trial had finished."""
    script = tmp_path / "flaky.py"
    script.write_text(
        "import os, sys\n"
        f"starts = {str(tmp_path / 'starts')!r}\n"
        "n = int(open(starts).read()) if os.path.exists(starts) else 0\n"
        "open(starts, 'w').write(str(n + 1))\n"
        "if n >= 2:\n    sys.exit(7)\n"
        f"os.execv(sys.executable, [sys.executable, {str(FORKING)!r}, sys.argv[1], '0'])\n"
    )
    out = tmp_path / "out"
    cmd = f"{shlex.quote(sys.executable)} {script} {{port}}"
    done = subprocess.run(
        [sys.executable, str(CI_DIR / "tail_latency.py"), "calibrate", "1", "--server-cmd", cmd, *TINY]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    md, js, doc = partial_files(out, "calibrate")
    says = "stopped by a failed run"
    last = done.stderr.strip().splitlines()[-1]
    assert "exited with status 7 before listening" in last, last
    assert last.endswith(f" (2 of 12 runs finished, kept as partial: {md}, {js})"), last
    assert doc["partial"].startswith(
        f"{says} after 2 of 12 runs; not reached: round 1: server command, c8, slow10"
    )
    [aa] = doc["legs"]
    assert aa["kind"] == "aa" and sorted(r["arm"] for r in aa["leg"]["runs"]) == ["A", "B"]
    assert {c["verdict"] for c in aa["comparisons"]} == {"n/a"}  # one pair: no verdict, said why
    assert md.read_text().splitlines()[2].startswith(f"**Partial: {says} after 2 of 12 runs")


@pytest.mark.bench_extras
@SIGNALS
def test_peers_stopped_by_a_signal_keeps_its_finished_runs_as_partial(tmp_path, signum, status, says):
    argv = ["peers", "--no-pin", "--write-readme", *TINY[2:], "--out", str(tmp_path)]
    code, err = stopped_after_the_first_run([sys.executable, str(CI_DIR / "tail_latency.py"), *argv], signum)
    assert code == status, err
    md, js, doc = partial_files(tmp_path, "peers")  # --write-readme: the README is of finished jobs
    [leg] = doc["legs"]
    finished = len(leg["runs"])
    check_the_line_and_marks(err, says, md, js, doc, finished, 2 * len(doc["servers"]))
    ran = {r["arm"] for r in leg["runs"]}
    assert {k for k, row in leg["summary"].items() if row["runs"]} == ran  # medians of what ran
    if finished <= len(doc["servers"]):  # within the first trial: each server that ran, once
        assert ", medians over 1 run per server" in md.read_text()  # the runs shown, not the servers not run
    # one trial: too few pairs for any interval, a server's against itself too (not 1.000–1.000)
    assert "n/a (needs 8 pairs)" in md.read_text() and "1.000–1.000" not in md.read_text()


@pytest.mark.bench_extras
def test_peers_stopped_by_a_failed_run_keeps_the_runs_before_it(tmp_path):
    """The asyncio and uvloop peers serve on their first start and exit on their second (the second
    trial): the first trial finished."""
    script = tmp_path / "flaky_peer.py"
    script.write_text(
        "import os, sys\n"
        f"starts = {str(tmp_path / 'starts')!r} + ('-uvloop' if '--uvloop' in sys.argv else '')\n"
        "n = int(open(starts).read()) if os.path.exists(starts) else 0\n"
        "open(starts, 'w').write(str(n + 1))\n"
        "if n >= 1:\n    sys.exit(7)\n"
        f"os.execv(sys.executable, [sys.executable, {str(FORKING)!r}, sys.argv[-1], '0'])\n"
    )
    out = tmp_path / "out"
    run = (
        "import sys; from pathlib import Path; from tailjob import peers, cli; "
        f"peers.PEER_SCRIPT = Path({str(script)!r}); sys.exit(cli.main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", run, "peers", "--no-pin", *TINY[2:]] + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=CI_DIR,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    md, js, doc = partial_files(out, "peers")
    [leg] = doc["legs"]
    finished, total = len(leg["runs"]), 2 * len(doc["servers"])
    assert len(doc["servers"]) <= finished < total
    last = done.stderr.strip().splitlines()[-1]
    assert "exited with status 7 before listening" in last, last
    assert last.endswith(f" ({finished} of {total} runs finished, kept as partial: {md}, {js})"), last
    assert doc["partial"].startswith(f"stopped by a failed run after {finished} of {total} runs")
    assert md.read_text().splitlines()[2].startswith("**Partial: stopped by a failed run")
