"""Keep every core busy while a command runs: ``python scripts/cpu_hog.py [-n N] -- CMD...``.

Starts ``N`` busy processes (default: one per core), runs ``CMD``, stops them
and exits with ``CMD``'s exit code.  For checking that the test suite holds on
a busy machine (issue 33): ``python scripts/cpu_hog.py -- scripts/test.sh``.
The hogs are separate processes (the GIL would serialise threads) at the
default priority, so they compete with the tests as another user's work would.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

#: Spin while this script (pid formatted in) is the parent: a SIGKILL to it (a timeout, a killed job)
#: skips its cleanup, and the busy processes must not spin on as orphans.  The pid is given, not read
#: by the child at its start: this script may be gone before a child's interpreter has started.
SPIN = "import os\nwhile os.getppid() == {pid}: pass"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "-n",
        "--hogs",
        type=int,
        default=os.cpu_count() or 1,
        help="busy processes (default: one per core, %(default)s)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD...: what runs while they spin")
    args = p.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.hogs < 1:
        print(f"cpu_hog: --hogs {args.hogs}: accepted: an integer of at least 1", file=sys.stderr)
        return 2
    if not cmd:
        print("cpu_hog: no command: accepted: cpu_hog.py [-n N] -- CMD...", file=sys.stderr)
        return 2
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN.format(pid=os.getpid())]) for _ in range(args.hogs)]
    try:
        print(
            f"cpu_hog: {len(hogs)} busy processes (pids {' '.join(str(h.pid) for h in hogs)}) "
            f"while: {' '.join(cmd)}",
            file=sys.stderr,
            flush=True,
        )
        return subprocess.call(cmd)
    finally:
        for h in hogs:
            h.send_signal(signal.SIGKILL)
            h.wait()


if __name__ == "__main__":
    sys.exit(main())
