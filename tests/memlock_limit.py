"""Run a command under a locked-memory limit that applies, root or not: ``memlock_limit.py KIB -- CMD...``.

Sets ``RLIMIT_MEMLOCK`` (soft and hard) to ``KIB`` KiB and, when it can, drops
``CAP_IPC_LOCK`` from the capability bounding set, then execs ``CMD``.  The
kernel charges an io_uring ring's queues to ``RLIMIT_MEMLOCK`` only for a
process without ``CAP_IPC_LOCK``; root keeps it across exec unless the bounding
set loses it, so without the drop a root CI would never meet the limit its
users meet.  A process that is not root has no ``CAP_IPC_LOCK`` to drop (the
drop then fails with EPERM and is not needed).

Source: prctl(2) PR_CAPBSET_DROP, capabilities(7), io_uring_setup(2) (ENOMEM).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

_PR_CAPBSET_DROP = 24
_CAP_IPC_LOCK = 14


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: memlock_limit.py KIB -- CMD...", file=sys.stderr)
        return 2
    limit = int(argv[0]) * 1024
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_CAPBSET_DROP, _CAP_IPC_LOCK, 0, 0, 0)  # EPERM when not root: nothing to drop
    os.execvp(argv[2], argv[2:])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
