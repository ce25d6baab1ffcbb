"""The project's wheel, built from this tree as pip builds it (setuptools, no network).

A module of its own, not ``conftest``: tests/test_package_data.py and tests/test_packaging.py import it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What the build reads (pyproject.toml's packages, readme, license).  Copied, so that no build/ or
#: egg-info of an earlier build in the checkout can supply a file (or a module since deleted).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "reference", "conformance", "scripts/ci")


def build_wheel(work: Path) -> Path:
    """Build the wheel of a copy of the sources under ``work``; return its path."""
    src, dist = work / "src", work / "dist"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCES:
        path = ROOT / name
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=skip)
        else:
            shutil.copy2(path, src / name)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(src),
        ],
        capture_output=True,
        text=True,
        cwd=work,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = dist.glob("tailreactor-*.whl")
    return wheel
