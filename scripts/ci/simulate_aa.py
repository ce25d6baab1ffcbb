#!/usr/bin/env python3
"""How often does the verdict rule call a gain or regression between identical arms?

Role
----
Reproduces the numbers behind ``tailjob.stats.MIN_PAIRS`` and the Bonferroni
intervals (docs/en/tail-latency-ci.md, "Why 8 runs").  It simulates A/A legs
-- both arms drawn from the same distribution -- and applies
:func:`tailjob.stats.compare` to the seven metrics, as the job does.

Noise model (per run, log scale): a trial effect shared by A and B of a trial
(0.5 sd), a per-run machine effect shared by the seven metrics (weight
``rho``) and an independent per-metric effect (weight 1 - rho); the spread
per metric is that of a shared 2-core machine (15 % for req/s and p50, 10 %
for CPU per request, 40-50 % for p99 and beyond).

Usage: python scripts/ci/simulate_aa.py [--jobs 200] [--resamples 2000] [--seed 2]
Takes a couple of minutes; no load generator, no server.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tailjob import stats  # noqa: E402

SPREAD = {"rps": 0.15, "cpu_us_per_req": 0.10, "p50": 0.15, "p99": 0.40, "p99.9": 0.40,
          "p99.99": 0.50, "p99.999": 0.50}


def aa_leg(rng: random.Random, n: int, rho: float, confidence: float, resamples: int) -> list[str]:
    """Verdicts of one simulated A/A leg with ``n`` trials."""
    trial = [rng.gauss(0, 1) for _ in range(n)]
    runs = {}
    for arm in "AB":
        runs[arm] = []
        for t in range(n):
            machine = rng.gauss(0, 1)
            runs[arm].append({k: math.exp(sd * (0.5 * trial[t] + rho * machine + (1 - rho) * rng.gauss(0, 1)))
                              for k, sd in SPREAD.items()})
    return [stats.compare(m, [r[m.key] for r in runs["A"]], [r[m.key] for r in runs["B"]],
                          seed=rng.randrange(1 << 30), resamples=resamples, confidence=confidence,
                          min_pairs=1).verdict
            for m in stats.METRICS]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=200, help="simulated legs per cell (200)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--seed", type=int, default=2)
    args = p.parse_args()
    rng = random.Random(args.seed)
    print("| pairs | rho | interval per metric | legs with a spurious verdict | per metric |")
    print("|---:|---:|---|---:|---:|")
    for n in (5, 8):
        for rho in (0.3, 0.7):
            for label, conf in (("95%", 0.95), (f"{stats.CONFIDENCE:.2%} (Bonferroni)", stats.CONFIDENCE)):
                legs = [aa_leg(rng, n, rho, conf, args.resamples) for _ in range(args.jobs)]
                called = [sum(v in ("gain", "regression") for v in leg) for leg in legs]
                any_rate = sum(c > 0 for c in called) / len(legs)
                per_metric = sum(called) / (len(legs) * len(stats.METRICS))
                print(f"| {n} | {rho} | {label} | {any_rate:.0%} | {per_metric:.1%} |", flush=True)


if __name__ == "__main__":
    main()
