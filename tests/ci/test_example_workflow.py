"""examples/github-actions/tail-latency.yml: valid YAML, run on pull requests, and every command it runs
exists here and is accepted as written (the job's parser, the server command's program)."""

from __future__ import annotations

import os
import shlex

import pytest
import yaml
from tailjob_testdata import ROOT

from tailjob import ownserver
from tailjob.options import build_parser

WORKFLOW = ROOT / "examples" / "github-actions" / "tail-latency.yml"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def commands() -> list[tuple[str, list[str]]]:
    """(job, argv) of every command line of every ``run:`` step (continuation lines joined)."""
    out = []
    for name, job in workflow()["jobs"].items():
        for step in job["steps"]:
            for line in step.get("run", "").replace("\\\n", " ").splitlines():
                if line.strip():
                    out.append((name, shlex.split(line)))
    return out


def test_it_runs_on_pull_requests_with_a_code_gate_and_a_live_job():
    doc = workflow()
    assert "pull_request" in doc[True]  # YAML 1.1 reads the key `on` as true
    assert set(doc["jobs"]) == {"code-gate", "live"}
    programs = [argv[0] if argv[0] != "source" else argv[1] for _, argv in commands()]
    assert "scripts/gate-code.sh" in programs and "scripts/tail-latency.sh" in programs


def test_every_script_it_runs_exists_and_is_executable():
    for _, argv in commands():
        script = argv[1] if argv[0] == "source" else argv[0]
        assert (ROOT / script).is_file(), script
        if argv[0] != "source":
            assert os.access(ROOT / script, os.X_OK), script
        else:
            assert set(argv[2:]) <= {"--wrk", "--nginx"}, argv


def test_the_jobs_options_are_accepted_and_the_server_command_is_found(monkeypatch):
    monkeypatch.chdir(ROOT)  # as the workflow runs them: from the checkout's root
    parsed = 0
    for job, argv in commands():
        if argv[0] not in ("scripts/tail-latency.sh", "scripts/gate-code.sh"):
            continue
        try:
            args = build_parser().parse_args(argv[1:])
        except SystemExit as e:
            pytest.fail(f"{job}: {' '.join(argv)}: the job's parser refused it (exit {e.code})")
        assert ownserver.refused(args) is None
        if argv[0] == "scripts/tail-latency.sh":
            cmds = ownserver.commands(args)
            assert cmds is not None and ownserver.arms(args, cmds)[0] == "custom"
            assert not args.gate, "wall-clock figures are recorded, never gate"
        parsed += 1
    assert parsed == 2
