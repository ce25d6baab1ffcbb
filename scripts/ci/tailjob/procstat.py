"""CPU accounting from /proc: a server's process tree, the machine, this process and its children.

A run samples these before and after its load generator; CPU used by *other* processes meanwhile =
machine busy - server tree - generator - this process (a run where that exceeds the pollution limit
is flagged).  Seconds; ``/proc`` counts in USER_HZ ticks (:data:`CLK_TCK`, usually 100/s).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    return data[data.rindex(")") + 2 :].split()


def _tree(pid: int) -> list[tuple[int, list[str]]]:
    """``pid`` and its live descendants (``pid`` first, then breadth first), each with its stat fields."""
    stats = {
        int(n): f for n in os.listdir("/proc") if n.isdigit() and (f := _stat_fields(int(n))) is not None
    }
    children: dict[int, list[int]] = {}
    for p, fields in sorted(stats.items()):
        children.setdefault(int(fields[1]), []).append(p)  # fields[1] = ppid
    tree, todo = [], [pid] if pid in stats else []
    while todo:
        p = todo.pop(0)
        tree.append((p, stats[p]))
        todo.extend(children.get(p, ()))
    return tree


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants (``pid`` first); ``[]`` if ``pid`` is gone."""
    return [p for p, _ in _tree(pid)]


def tree_cpu_s(pid: int) -> float:
    """utime + stime (s) of ``pid`` and its live descendants, all threads (and through cutime +
    cstime the exited ones their parent waited for); 0.0 if gone."""
    # stat(5): utime, stime, cutime, cstime are fields 14..17, 11..14 here (no pid and comm)
    return sum(int(x) for _, fields in _tree(pid) for x in fields[11:15]) / CLK_TCK


def listens(pid: int, port: int) -> bool:
    """True when ``pid`` or a descendant holds a TCP socket listening on ``port`` (any address): the
    inodes of ``/proc/net/tcp{,6}``'s LISTEN (``0A``) rows among the tree's ``/proc/PID/fd`` links."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:  # no IPv6
            continue
        for row in rows:
            fields = row.split()  # local address HEXIP:HEXPORT, state, ..., inode (field 9)
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for p in process_tree(pid) if inodes else ():
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:  # exited
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{p}/fd/{fd}") in inodes:
                    return True
            except OSError:  # closed while listed
                continue
    return False


@dataclass(frozen=True)
class SystemCpu:
    """Machine-wide CPU time (s) since boot, from ``/proc/stat``: ``busy_s`` = user + nice + system +
    irq + softirq + steal (irq and softirq too: with tick-based accounting their ticks -- loopback TCP
    runs in softirq -- are also charged to the interrupted task, i.e. to the server and wrk)."""

    busy_s: float
    steal_s: float


def system_cpu() -> SystemCpu:
    with open("/proc/stat") as f:
        first = f.readline().split()
    if first[0] != "cpu":
        raise RuntimeError(f"/proc/stat starts with {first[0]!r}, expected 'cpu'")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return SystemCpu(busy_s=(user + nice + system + irq + softirq + steal) / CLK_TCK, steal_s=steal / CLK_TCK)


def children_cpu_s() -> float:
    """User + system CPU (s) of this process's children that have been waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_cpu_s() -> float:
    """User + system CPU (s) of this process (all its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
