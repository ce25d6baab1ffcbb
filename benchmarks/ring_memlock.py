"""What one io_uring ring costs in locked memory: open rings until the kernel says ENOMEM.

    python tests/memlock_limit.py 8192 -- python benchmarks/ring_memlock.py 256 4096

For each size (``CWIST_URING_ENTRIES``) it opens rings of that size, holding
them, until ``io_uring_setup`` fails, and prints how many fit under
``RLIMIT_MEMLOCK`` and what that makes one ring cost.  The limit applies only
without ``CAP_IPC_LOCK`` (a user other than root, or root under
``tests/memlock_limit.py``); with it the count would only stop at the cap, so
the script refuses.  The limit is per user: other processes of the same user
holding rings make fewer fit.
"""

from __future__ import annotations

import argparse
import resource
import sys

from tailreactor.backends import IoUringBackend, IoUringUnavailable
from tailreactor.backends.io_uring import ring_kib

CAP_IPC_LOCK = 14
CAP = 100_000


def has_ipc_lock() -> bool:
    with open("/proc/self/status") as f:
        eff = next(line for line in f if line.startswith("CapEff:")).split()[1]
    return bool(int(eff, 16) >> CAP_IPC_LOCK & 1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("entries", nargs="+", type=int, help="ring sizes to count")
    args = p.parse_args(argv)
    if has_ipc_lock():
        print(
            "ring_memlock: this process has CAP_IPC_LOCK, so rings are not charged to RLIMIT_MEMLOCK; "
            "run it as a normal user or under tests/memlock_limit.py KIB --",
            file=sys.stderr,
        )
        return 2
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    for entries in args.entries:
        held = []
        try:
            while len(held) < CAP:
                held.append(IoUringBackend(entries))
            why = f"stopped at {CAP}"
        except IoUringUnavailable as exc:
            why = f"then errno {exc.errno}"
        finally:
            for b in held:
                b.close()
        each = soft / 1024 / len(held) if held else float("nan")
        print(
            f"entries {entries}: {len(held)} rings fit under RLIMIT_MEMLOCK {soft // 1024} KiB ({why}): "
            f"at most {each:.1f} KiB each; formula (ring_kib) {ring_kib(entries)} KiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
