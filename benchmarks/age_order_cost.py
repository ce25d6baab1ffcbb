"""Instructions per event of the age order (``dispatch.AgeOrder``), by batch shape, counted by callgrind.

Role
----
What age-based dispatch costs per request at ``wrk -c256`` is about 1 % of a
request's instructions, and ``instructions.py`` counts a whole server under
wrk, whose figure moves by about 500 instructions/request (1.4 %) from run
to run.  This counts the policy's own work exactly: one ``AgeOrder`` per
round over a batch of real :class:`~tailreactor.events.Event` objects, run
under ``valgrind --tool=callgrind`` in a child process, minus a child that
builds the same batch and does nothing with it, divided by rounds x events.

Three cases per shape:

* *nothing aged*: the round's constant cost (sort the events by stamp, copy
  the sorted stamps); every round pays it when ``CWIST_REACTOR_TAIL_US`` > 0;
* *all aged at once*: every event aged at the first delivery, one run;
* *aged in 3 runs*: the round at ``wrk -c256``, where events age one after
  another as they were armed and the reactor takes two or three runs per
  round of about 250 (counted in eight real 4 s runs, four per backend: 1.7
  to 3.2 runs per round; 1 to 26 % of rounds had every event aged at their
  start, the case above).

Shapes of the batch's arm stamps in backend order: *ascending* (io_uring's
batches came so in 1,439 of 1,458 rounds in four 4 s runs at c256), *8 runs* (eight ascending
runs, as epoll's batches came), *shuffled*.  Stamps are monotonic-clock ns
(two-digit ints in CPython, as in the reactor).

Usage: ``python benchmarks/age_order_cost.py [--events 256] [--loops 200]
[--shape ascending ...]``.
Needs ``valgrind`` (``apt-get install valgrind``); says so in one line and
exits 2 without it.  Prints a Markdown table.  Takes one to one and a half
minutes (four valgrind runs per shape, twelve in all: Python starts slowly
under valgrind).
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import time

from tailreactor import READ
from tailreactor.events import Event
from tailreactor.policies.age import AgeOrder

SHAPES = ("ascending", "8 runs", "shuffled")
CASES = ("nothing aged", "all aged at once", "aged in 3 runs")
THRESHOLD_NS = 3_500_000
#: callgrind's summary line on stderr: "==pid== Collected : <instructions>".
COLLECTED = re.compile(r"Collected : (\d+)")


def make_batch(shape: str, n: int) -> list[Event]:
    """``n`` events armed 40 us apart (plus jitter), in backend order of ``shape``; seeded."""
    rng = random.Random(1)
    base = time.monotonic_ns()
    stamps = [base + i * 40_000 + rng.randrange(30_000) for i in range(n)]
    if shape == "8 runs":
        size = max(1, n // 8)
        runs = [stamps[i : i + size] for i in range(0, n, size)]
        rng.shuffle(runs)
        stamps = [s for run in runs for s in run]
    elif shape == "shuffled":
        rng.shuffle(stamps)
    return [Event(fd, READ, None, None, stamp) for fd, stamp in enumerate(stamps)]


def child(shape: str, case: str, n: int, loops: int) -> None:
    """The measured loop (``case`` ``baseline``: the same batch, no age order)."""
    batch = make_batch(shape, n)
    stamps = sorted(ev.armed_ns for ev in batch)
    now = stamps[-1] + THRESHOLD_NS  # every event aged
    # Three runs: the oldest third, the next third, the rest.
    thirds = [stamps[len(stamps) // 3] + THRESHOLD_NS, stamps[2 * len(stamps) // 3] + THRESHOLD_NS, now]
    if case == "baseline":
        for _ in range(loops):
            pass
    elif case == "nothing aged":
        for _ in range(loops):
            AgeOrder(batch, "arm", THRESHOLD_NS)
    elif case == "all aged at once":
        for _ in range(loops):
            AgeOrder(batch, "arm", THRESHOLD_NS).take_aged(now)
    else:
        for _ in range(loops):
            age = AgeOrder(batch, "arm", THRESHOLD_NS)
            for t in thirds:
                age.take_aged(t)


def count(shape: str, case: str, n: int, loops: int) -> int:
    """Instructions of one child process under callgrind."""
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        shape,
        case,
        "--events",
        str(n),
        "--loops",
        str(loops),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    m = COLLECTED.search(out.stderr)
    if out.returncode != 0 or m is None:
        raise RuntimeError(f"callgrind run failed ({' '.join(argv)}): {out.stderr.strip()[-500:]}")
    return int(m[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--events", type=int, default=256, help="events per batch, >= 8 (default 256, as at c256)"
    )
    ap.add_argument("--loops", type=int, default=200, help="rounds counted per case, >= 1 (default 200)")
    ap.add_argument("--shape", action="append", choices=SHAPES, help="repeatable; default: all")
    ap.add_argument("--child", nargs=2, metavar=("SHAPE", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.events < 8:
        ap.error(f"--events must be >= 8, got {args.events}")
    if args.loops < 1:
        ap.error(f"--loops must be >= 1, got {args.loops}")
    if args.child:
        child(*args.child, args.events, args.loops)
        return 0
    if shutil.which("valgrind") is None:
        print(
            "age_order_cost: valgrind is not on PATH; install it: apt-get install valgrind", file=sys.stderr
        )
        return 2
    per_event = args.events * args.loops
    print(
        f"Instructions per event of `AgeOrder` (callgrind), {args.events} events per batch, "
        f"{args.loops} rounds, Python {sys.version.split()[0]}:\n"
    )
    print("| Stamps in backend order | " + " | ".join(CASES) + " |")
    print("|---|" + "---:|" * len(CASES))
    for shape in args.shape or SHAPES:
        try:
            base = count(shape, "baseline", args.events, args.loops)
            cells = [(count(shape, case, args.events, args.loops) - base) / per_event for case in CASES]
        except RuntimeError as exc:
            print(f"age_order_cost: {exc}", file=sys.stderr)
            return 2
        print(f"| {shape} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
