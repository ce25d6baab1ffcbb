"""benchmarks/age_order_cost.py: callgrind's instructions per event of the age order, by batch shape.

No figure is asserted (figures are benchmarks); this keeps the tool working:
a small real run prints one plausible count per shape and case, and a
missing valgrind or a bad argument gets one clear line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "age_order_cost.py"


def run(*args: str, env=None, timeout=1800) -> subprocess.CompletedProcess:  # 4 valgrind runs: slow, loaded
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_small_run_prints_a_count_per_shape_and_case():
    res = run("--events", "32", "--loops", "20", "--shape", "8 runs")
    assert res.returncode == 0, res.stderr
    rows = re.findall(
        r"^\| (ascending|8 runs|shuffled) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|$", res.stdout, re.M
    )
    assert [row[0] for row in rows] == ["8 runs"], res.stdout
    assert "| nothing aged | all aged at once | aged in 3 runs |" in res.stdout
    for cell in rows[0][1:]:
        # A few list operations per event: tens to a few thousand instructions, never nothing.
        assert 10 < int(cell.replace(",", "")) < 20_000, res.stdout
    assert "32 events per batch, 20 rounds" in res.stdout


def test_missing_valgrind_is_named_with_how_to_install():
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    res = run(env=env, timeout=300)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == "age_order_cost: valgrind is not on PATH; install it: apt-get install valgrind\n"


def test_bad_arguments_get_one_clear_error():
    res = run("--events", "1", timeout=300)
    assert res.returncode == 2 and "--events must be >= 8, got 1" in res.stderr
    res = run("--loops", "0", timeout=300)
    assert res.returncode == 2 and "--loops must be >= 1, got 0" in res.stderr
