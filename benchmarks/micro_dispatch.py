"""Microbenchmark: reactor CPU per dispatched event, by policy setting (not run in CI).

Role
----
wrk A/Bs on a 2-core machine cannot resolve a 1 % difference in server CPU
per request (their confidence intervals are +-10 %).  This isolates the part
of the per-request cost the dispatch policy can change: N socketpairs with
data always pending, each callback re-arming its fd, run for R rounds on one
backend; CPU time (``time.process_time``, this process only) per dispatched
event.  Settings are interleaved in a random order per repetition and the
median is printed, with the ratio to the first setting.

Usage: ``python benchmarks/micro_dispatch.py [--backend epoll|io_uring] [--fds 64]
[--rounds 2000] [--reps 7] [--set 'CWIST_REACTOR_TAIL_US=0' --set ...]``
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import time

from tailreactor import READ, Reactor
from tailreactor.config import load


def one_run(backend: str, env: dict[str, str], fds: int, rounds: int) -> float:
    """CPU microseconds per dispatched event for one setting."""
    cfg = load(env)
    pairs = [socket.socketpair() for _ in range(fds)]
    r = Reactor(backend, config=cfg)
    try:
        for a, b in pairs:
            a.setblocking(False)
            b.send(b"x")  # never read: the fd stays readable, so every re-arm fires next round

        def cb(ev):
            r.arm(ev.fd, READ, cb)

        for a, _ in pairs:
            r.arm(a.fileno(), READ, cb)
        for _ in range(20):  # warm up
            r.run_once(1.0)
        start_events = r.counters.dispatched
        t0 = time.process_time()
        for _ in range(rounds):
            r.run_once(1.0)
        cpu = time.process_time() - t0
        return cpu * 1e6 / (r.counters.dispatched - start_events)
    finally:
        r.close()
        for a, b in pairs:
            a.close()
            b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="epoll")
    ap.add_argument("--fds", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument(
        "--set",
        action="append",
        dest="sets",
        help="a setting as 'K=V K2=V2' (repeatable; default: TAIL_US 0, 3500, 3600000, probe on)",
    )
    args = ap.parse_args()
    sets = args.sets or [
        "CWIST_REACTOR_TAIL_US=0",
        "CWIST_REACTOR_TAIL_US=3500",
        "CWIST_REACTOR_TAIL_US=3600000",
        "CWIST_LATENCY_PROBE=1",
    ]
    envs = {s: dict(kv.split("=", 1) for kv in s.split()) for s in sets}
    results: dict[str, list[float]] = {s: [] for s in sets}
    rng = random.Random(1)
    for _ in range(args.reps):
        order = list(sets)
        rng.shuffle(order)
        for s in order:
            results[s].append(one_run(args.backend, envs[s], args.fds, args.rounds))
    base = statistics.median(results[sets[0]])
    print(
        f"backend {args.backend}, {args.fds} fds x {args.rounds} rounds, {args.reps} interleaved reps; "
        f"CPU us per dispatched event (median, min-max)"
    )
    for s in sets:
        med = statistics.median(results[s])
        print(f"  {s:<36} {med:7.3f}  ({min(results[s]):.3f}-{max(results[s]):.3f})  x{med / base:.3f}")


if __name__ == "__main__":
    main()
