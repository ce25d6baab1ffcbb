"""scripts/cpu_hog.py: busy processes for as long as the command runs, its exit code, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HOG = [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "cpu_hog.py")]

# Run under the hog: count the busy children of our parent (the hog), then exit 3.
CHILD = """
import os, sys
me, hog = os.getpid(), os.getppid()
kids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
spinning = 0
for p in kids:
    try:
        stat = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        cmd = open(f"/proc/{p}/cmdline", "rb").read()
    except OSError:
        continue
    if int(stat[1]) == hog and b"getppid" in cmd:
        spinning += 1
print(spinning)
sys.exit(3)
"""


def test_the_hogs_run_while_the_command_runs_and_its_exit_code_is_kept():
    done = subprocess.run(
        [*HOG, "-n", "2", "--", sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "2"
    assert "cpu_hog: 2 busy processes" in done.stderr


def test_bad_input_is_one_line_and_exit_2():
    for args in (["-n", "0", "--", "true"], []):
        done = subprocess.run([*HOG, *args], capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 2
        assert len(done.stderr.strip().splitlines()) == 1 and "accepted" in done.stderr, done.stderr


def test_the_hogs_end_when_the_hog_is_killed_without_a_chance_to_stop_them():
    # SIGKILL to cpu_hog.py (a timeout, a killed CI job) skips its cleanup: its busy processes must
    # still end, not spin on as orphans of init.
    import os
    import signal

    proc = subprocess.Popen(
        [*HOG, "-n", "2", "--", sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # "cpu_hog: 2 busy processes (pids A B) while: ..."
    pids = [int(p) for p in line.split("(pids ", 1)[1].split(")", 1)[0].split()]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()  # the command ends too
    import time

    deadline = time.monotonic() + 60  # a liveness bound (a hog that never ends fails, not hangs)
    for pid in pids:
        while True:  # each hog notices within one loop turn
            assert time.monotonic() < deadline, f"hog {pid} still spins after its parent was killed"
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # exited, not yet reaped
                    break
