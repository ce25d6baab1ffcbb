"""``--a-ref REF`` on the live tier: arm A's bench server runs the code of a git ref, from a temporary
worktree that is gone when the job is, however it ends.  Real job, real bench servers, real wrk."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tailjob_testdata import CI_DIR, ROOT

from tailjob.cli import main


def _tiny(duration: int = 1) -> list[str]:
    """The smallest live A/B: epoll, one wrk thread, 4 connections, one run per arm."""
    return [
        "--backend",
        "epoll",
        "--threads",
        "1",
        "--connections",
        "4",
        "--duration",
        str(duration),
        "--runs",
        "1",
    ]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def _worktrees() -> set[str]:
    return {
        line.split(" ", 1)[1]
        for line in _git("worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    }


def _job(tmp_path: Path, *argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(CI_DIR / "tail_latency.py"), *argv, "--out", str(tmp_path)], **kw
    )


@pytest.mark.wrk  # skipped without wrk (tests/conftest.py)
def test_arm_a_serves_from_a_worktree_of_the_ref_and_the_result_names_its_commit(tmp_path):
    job = _job(
        tmp_path, "--a-ref", "HEAD", *_tiny(), "--no-warmup", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = job.communicate(timeout=600)
    assert job.returncode == 0, err.decode()[-2000:]
    head = _git("rev-parse", "HEAD").strip()
    result = json.loads(next((tmp_path / "results").glob("*-quick-aref.json")).read_text())
    assert result["a_ref"] == {"ref": "HEAD", "commit": head}
    assert result["ab"] == "aref"
    assert result["arms"]["A"]["env"] == result["arms"]["B"]["env"] == {}  # the same knobs: the code differs
    runs = {r["arm"]: r for r in result["legs"][0]["runs"]}
    # Each server said where the tailreactor it imported lives: arm A the worktree's, arm B this tree's.
    import tailreactor  # what this interpreter imports is the working tree's, for the job as for us

    own = tailreactor.__path__[0]
    assert runs["B"]["code"] == own
    a_code = Path(runs["A"]["code"])
    assert a_code != Path(own) and a_code.parts[-2:] == ("reference", "tailreactor")
    assert "tailjob-a-ref-" in str(a_code)
    assert not a_code.exists()  # the worktree was removed ...
    assert str(a_code.parents[1]) not in _worktrees()  # ... and unregistered
    report = next((tmp_path / "results").glob("*-quick-aref.md")).read_text()
    assert f"arm A runs `--a-ref HEAD`, commit {head}, arm B the working tree" in report
    assert f"arm A runs `--a-ref HEAD`, commit {head}" in out.decode()
    line = json.loads((tmp_path / "tail-latency.jsonl").read_text())
    assert line["a_ref"] == {"ref": "HEAD", "commit": head}


@pytest.mark.wrk
def test_sigterm_mid_run_removes_the_worktree(tmp_path):
    """A CI timeout or Ctrl-C during arm A's run leaves no worktree behind (nor a server)."""
    # The warm-up is arm A's: the first server is the one importing the worktree's code.
    job = _job(
        tmp_path,
        "--a-ref",
        "HEAD",
        *_tiny(30),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        server, path = None, None
        # No event marks "the server started": look until it is there or the job is gone (no deadline
        # of ours: a busy machine may take long to get there; the run itself then lasts 30 s).
        while path is None and job.poll() is None:
            for kid in _children(job.pid):
                env = _environ(kid)
                if "tailjob-a-ref-" in env.get("PYTHONPATH", ""):
                    server, path = kid, Path(env["PYTHONPATH"].split(":")[0])
            time.sleep(0.05)
        assert path is not None, f"the job exited {job.returncode} before arm A's server started"
        assert path.parts[-1] == "reference" and path.is_dir()
        assert str(path.parent) in _worktrees()
        fd = os.pidfd_open(server)
        try:
            job.send_signal(signal.SIGTERM)
            assert job.wait(120) != 0  # (a hang guard, not a bound: the job stops at once)
            assert select.select([fd], [], [], 60)[0], "arm A's server outlived the job"
        finally:
            os.close(fd)
        assert not path.exists()
        assert str(path.parent) not in _worktrees()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def _children(pid: int) -> list[int]:
    found = []
    for kid in os.listdir("/proc"):
        if not kid.isdigit():
            continue
        try:
            stat = open(f"/proc/{kid}/stat").read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(kid))
    return found


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return {}
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw.split(b"\0") if e)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--a-ref", "no-such-ref"],
            "--a-ref 'no-such-ref': not a commit of this repository (accepted a branch, tag, commit id "
            "or an expression like HEAD~1)",
        ),
        (["count", "--a-ref", "HEAD"], "--a-ref: not an option of count (an option of ab)"),
        (["peers", "--a-ref", "HEAD"], "--a-ref: not an option of peers (an option of ab)"),
        (["calibrate", "1", "--a-ref", "HEAD"], "--a-ref: not an option of calibrate (an option of ab)"),
    ],
)
def test_a_bad_a_ref_on_the_live_tier_is_one_line(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.wrk
def test_a_server_that_imported_other_code_fails_the_run_and_the_worktree_goes(tmp_path):
    """In a clone, REF is a commit without ``reference/tailreactor``: arm A's server falls through to
    the clone's own, says so, and the job stops (exit 3) naming both, with the worktree removed."""
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run([*git, "checkout", "-q", "-b", "no-reactor"], check=True)
    subprocess.run([*git, "rm", "-r", "-q", "reference/tailreactor"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "scratch: no reactor"], check=True)
    subprocess.run([*git, "checkout", "-q", "-"], check=True)
    env = {**os.environ, "PYTHONPATH": f"{repo / 'scripts' / 'ci'}:{repo / 'reference'}"}
    done = subprocess.run(
        [sys.executable, str(repo / "scripts" / "ci" / "tail_latency.py"), "--a-ref", "no-reactor", *_tiny()]
        + ["--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert "arm A: asked for the tailreactor of " in line
    asked = Path(line.split("asked for the tailreactor of ", 1)[1].split(",", 1)[0])
    assert f"the server imported {repo / 'reference' / 'tailreactor'}" in done.stderr
    assert asked.parts[-1] == "reference" and not asked.parent.exists()
    listed = subprocess.run([*git, "worktree", "list"], capture_output=True, text=True, check=True).stdout
    assert str(asked.parent) not in listed
