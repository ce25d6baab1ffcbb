"""CPU accounting from /proc, on real child processes that burn CPU on command."""

from __future__ import annotations

import subprocess
import sys

from tailjob import procstat

# ``python -c BURNER N``: starts a chain of N more burners below itself, then on each
# "burn" line from stdin every process in the chain burns ~0.2 s of its own CPU time
# (process_time, not wall time) and the top answers "done" when all have finished.
BURNER = r"""
import subprocess, sys, time
depth = int(sys.argv[1])
child = None
if depth > 0:
    child = subprocess.Popen([sys.executable, "-c", f"CODE = {CODE!r}\n{CODE}", str(depth - 1)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
print("ready", flush=True)
for line in sys.stdin:
    if child:
        child.stdin.write("burn\n"); child.stdin.flush()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    if child:
        assert child.stdout.readline() == "done\n"
    print("done", flush=True)
"""


def start_tree():
    """A burner with one child burner; returns the parent's Popen once both are ready."""
    code = f"CODE = {BURNER!r}\n{BURNER}"
    p = subprocess.Popen(
        [sys.executable, "-c", code, "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline() == "ready\n"
    return p


def burn(p):
    p.stdin.write("burn\n")
    p.stdin.flush()
    assert p.stdout.readline() == "done\n"


def test_the_process_tree_includes_children():
    p = start_tree()
    try:
        pids = procstat.process_tree(p.pid)
        assert pids[0] == p.pid
        assert len(pids) == 2
    finally:
        p.stdin.close()
        p.wait()


def test_tree_cpu_grows_with_burned_cpu_in_parent_and_child():
    p = start_tree()
    try:
        child = procstat.process_tree(p.pid)[1]
        before_tree, before_child = procstat.tree_cpu_s(p.pid), procstat.tree_cpu_s(child)
        burn(p)
        after_tree, after_child = procstat.tree_cpu_s(p.pid), procstat.tree_cpu_s(child)
        assert after_child > before_child
        # the tree counts the parent's burn as well as the child's
        assert after_tree - before_tree > after_child - before_child > 0
    finally:
        p.stdin.close()
        p.wait()


def test_machine_busy_time_covers_the_burn():
    p = start_tree()
    try:
        before_sys, before_tree = procstat.system_cpu(), procstat.tree_cpu_s(p.pid)
        burn(p)
        after_sys, after_tree = procstat.system_cpu(), procstat.tree_cpu_s(p.pid)
        busy = after_sys.busy_s - before_sys.busy_s
        assert busy > 0
        # the machine was at least as busy as the burning tree (one tick of slack:
        # both counters advance in whole USER_HZ ticks)
        assert busy + 2 / procstat.CLK_TCK >= after_tree - before_tree
    finally:
        p.stdin.close()
        p.wait()


def test_children_rusage_counts_a_waited_child():
    before = procstat.children_cpu_s()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.1\nwhile time.process_time() < end: pass",
        ],
        check=True,
    )
    assert procstat.children_cpu_s() > before


def test_a_vanished_process_counts_as_zero():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert procstat.tree_cpu_s(p.pid) == 0.0
    assert procstat.process_tree(p.pid) == []
