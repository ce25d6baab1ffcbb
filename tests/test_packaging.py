"""The distribution as a user gets it: its packages, its extras, its commands (issue 38).

``pip install -e .`` and the wheel hold three top-level packages, ``tailreactor`` (the reference), the
conformance suite ``tailreactor_conformance`` and the tail-latency job ``tailjob``, and the reference
imports neither of the other two (the C ABI adapter is one of its backends).  The base install is the
reference's; each command's own dependencies are an extra named for who needs it (``conformance``,
``job``), and a command whose extra is missing says which ``pip install`` brings it, in one line, exit 3.

The wheel test builds the wheel from this tree, installs it in a clean virtualenv (pip from the index it
is configured with, as scripts/bootstrap.sh installs the project), runs both commands without their
extras, then with them: the conformance suite on epoll and a short sim-tier A/B.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import distribution
from pathlib import Path

import pytest

from wheels import ROOT, build_wheel

PACKAGES = {"tailreactor", "tailreactor_conformance", "tailjob"}
#: Each command, the extra it needs and a distribution of that extra.
COMMANDS = {
    "tailreactor-conformance": ("conformance", "pytest"),
    "tailreactor-tail-latency": ("job", "numpy"),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``, also inside functions."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def test_the_reference_imports_neither_the_suite_nor_the_job():
    upward = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "reference" / "tailreactor").rglob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in PACKAGES - {"tailreactor"}
    ]
    assert not upward, upward


def test_the_installed_project_maps_only_its_three_packages():
    """What ``pip install -e .`` (scripts/bootstrap.sh) made importable at the top level."""
    assert set(distribution("tailreactor").read_text("top_level.txt").split()) == PACKAGES


def _run(*cmd: str | Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, check=False, **kw
    )


def _pip(python: Path, *args: str) -> None:
    """This venv's pip installing into ``python``'s environment (the clean venv has no pip of its own);
    no byte-compiling of every module installed (numpy, scipy, matplotlib): half the test's time."""
    done = _run(
        sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile", *args, timeout=600
    )
    assert done.returncode == 0, f"pip install {' '.join(args)} failed:\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.packaging
def test_the_wheel_in_a_clean_virtualenv_runs_each_command_with_its_extra_and_names_it_without(
    wheel, tmp_path
):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == PACKAGES
    assert "tailreactor_conformance/include/tailreactor_backend.h" in names
    assert "tailjob/tail_latency.lua" in names  # wrk's script: the live tier needs it

    venv = tmp_path / "venv"
    done = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert done.returncode == 0, done.stderr
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    _pip(python, str(wheel))
    out = tmp_path / "out"

    # Without the extras: one line naming the pip install, exit 3, never a traceback.
    for command, (extra, dist) in COMMANDS.items():
        done = _run(bin_dir / command, "--backend", "epoll", cwd=tmp_path)
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-3000:]
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and f"pip install 'tailreactor[{extra}]'" in lines[0], lines
        assert lines[0].startswith(f"{command}: ") and dist in lines[0], lines
    # --help answers without the extras: it tells a user what the command does before they install.
    for command in COMMANDS:
        done = _run(bin_dir / command, "--help", cwd=tmp_path)
        assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr[-3000:]
    # The C ABI's header is package data: printed without the suite's extra.
    done = _run(bin_dir / "tailreactor-conformance", "--header")
    assert done.returncode == 0 and done.stdout.strip().endswith("tailreactor_backend.h"), done.stderr
    assert Path(done.stdout.strip()).is_file()

    # With them: the suite on epoll, and the sim tier's A/B (short: 2 pairs of 1 virtual second).
    _pip(python, f"{wheel}[conformance,job]")
    done = _run(bin_dir / "tailreactor-conformance", "--backend", "epoll", cwd=tmp_path, timeout=600)
    assert done.returncode == 0 and "no clause failed" in done.stdout, (
        done.stdout[-3000:] + done.stderr[-2000:]
    )
    sim = ["--tier", "sim", "--backend", "epoll", "--duration", "1", "--runs", "2", "--connections", "16"]
    done = _run(bin_dir / "tailreactor-tail-latency", *sim, "--out", out, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    [result] = (out / "results").glob("*-quick-tail-sim.json")
    doc = json.loads(result.read_text())
    assert doc["tier"] == "sim" and [leg["backends"]["A"] for leg in doc["legs"]] == ["epoll"]
    # Installed, there is no scripts/tail-latency.sh: the report names the console script.
    report = result.with_suffix(".md").read_text()
    assert f"- Command: `tailreactor-tail-latency {' '.join(sim)} --out {out}`" in report, report[:2000]
    if shutil.which("wrk") is None:
        return  # the live tier needs wrk (scripts/bootstrap.sh --wrk): the rest above ran without it
    # The live tier from the wheel: the bench server and wrk's script come from the installed packages.
    live = ["--backend", "epoll", "--duration", "1", "--runs", "2", "--connections", "16"]
    done = _run(bin_dir / "tailreactor-tail-latency", *live, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    # Installed, the default --out is ./tailreactor-results, not a directory inside the environment.
    [result] = (tmp_path / "tailreactor-results" / "results").glob("*-quick-tail.json")
    assert json.loads(result.read_text())["legs"][0]["backends"]["A"] == "epoll"
