#!/usr/bin/env python3
"""How do the job's verdicts behave between identical arms, and which tail estimator to use?

Role
----
Two simulations, no server and no load generator:

``--part verdicts`` reproduces the numbers behind ``tailjob.stats.MIN_PAIRS``
and the Bonferroni intervals (docs/en/statistics.md, "Why 8 runs").  It
simulates A/A legs -- both arms drawn from the same distribution -- and
applies :func:`tailjob.stats.compare` to the seven metrics, as the job does,
counting the legs with a spurious ``gain`` or ``regression`` and the share of
``equivalent`` and ``inconclusive`` verdicts.

Noise model (per run, log scale): a trial effect shared by A and B of a trial
(0.5 sd), a per-run machine effect shared by the seven metrics (weight
``rho``) and an independent per-metric effect (weight 1 - rho); the spread
per metric is that of a shared 2-core machine (15 % for req/s and p50, 10 %
for CPU per request, 40-50 % for p99 and beyond).

``--part tail`` compares the two estimators of an arm's p99.9, p99.99 and
p99.999 (docs/en/statistics.md, "Tail percentiles"): the **median of the
runs' own percentiles** and the **pooled** percentile of the runs' merged
histograms (:mod:`tailjob.pooled`, what the job uses), both with the interval
over whole trials.  Each run draws ``--samples`` latencies: a log-normal body
around 1 ms (sd 0.5 on the log scale) scaled by the run's trial and machine
effects, and stalls -- a share of the requests (about 0.1 %, varying from run
to run by 0.7 sd on the log scale) multiplied by a Pareto factor (alpha 1.5).
It runs A/A legs, and legs where every B latency is 1.25x A's, and prints per
estimator and percentile the samples behind the figure, the A/A legs with a
false call, the A/A legs called equivalent, the median detectable effect, and
the share of 1.25x legs called a regression.

``--part real --result benchmarks/results/<stem>.json`` makes the same
comparison on a real job's runs: per leg and tail percentile, each arm's
figure (with the samples behind it), the ratio, the interval, the detectable
effect and the verdict, by both estimators.

Usage: python scripts/ci/simulate_aa.py [--part verdicts|tail|all] [--jobs 200] [--resamples 2000] [--seed 2]
       python scripts/ci/simulate_aa.py --part real --result RESULT.json
The verdicts part takes a couple of minutes at the defaults; tail about as long with --jobs 100.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tailjob import pooled, stats

SPREAD = {
    "rps": 0.15,
    "cpu_us_per_req": 0.10,
    "p50": 0.15,
    "p99": 0.40,
    "p99.9": 0.40,
    "p99.99": 0.50,
    "p99.999": 0.50,
}


def aa_leg(rng: random.Random, n: int, rho: float, confidence: float, resamples: int) -> list[str]:
    """Verdicts of one simulated A/A leg with ``n`` trials."""
    trial = [rng.gauss(0, 1) for _ in range(n)]
    runs = {}
    for arm in "AB":
        runs[arm] = []
        for t in range(n):
            machine = rng.gauss(0, 1)
            runs[arm].append(
                {
                    k: math.exp(sd * (0.5 * trial[t] + rho * machine + (1 - rho) * rng.gauss(0, 1)))
                    for k, sd in SPREAD.items()
                }
            )
    return [
        stats.compare(
            m,
            [r[m.key] for r in runs["A"]],
            [r[m.key] for r in runs["B"]],
            seed=rng.randrange(1 << 30),
            resamples=resamples,
            confidence=confidence,
            min_pairs=1,
        ).verdict
        for m in stats.METRICS
    ]


def part_verdicts(args, rng: random.Random) -> None:
    print(
        "| pairs | rho | interval per metric | legs with a spurious verdict | per metric "
        "| equivalent | inconclusive |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|")
    for n in (5, 8):
        for rho in (0.3, 0.7):
            for label, conf in (("95%", 0.95), (f"{stats.CONFIDENCE:.2%} (Bonferroni)", stats.CONFIDENCE)):
                legs = [aa_leg(rng, n, rho, conf, args.resamples) for _ in range(args.jobs)]
                called = [sum(v in (stats.GAIN, stats.REGRESSION) for v in leg) for leg in legs]
                cells = len(legs) * len(stats.METRICS)
                any_rate = sum(c > 0 for c in called) / len(legs)
                share = {
                    w: sum(v == w for leg in legs for v in leg) / cells
                    for w in (stats.EQUIVALENT, stats.INCONCLUSIVE)
                }
                print(
                    f"| {n} | {rho} | {label} | {any_rate:.0%} | {sum(called) / cells:.1%} "
                    f"| {share[stats.EQUIVALENT]:.0%} | {share[stats.INCONCLUSIVE]:.0%} |",
                    flush=True,
                )


TAIL = ("p99.9", "p99.99", "p99.999")


def run_samples(nrng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """One run's latencies in us (see the module docstring)."""
    body = np.exp(nrng.normal(math.log(1000.0), 0.5, n))
    stall_share = 0.001 * math.exp(nrng.normal(0, 0.7))
    stalled = nrng.random(n) < stall_share
    body[stalled] *= 1 + nrng.pareto(1.5, stalled.sum()) * 5
    return np.maximum(1, (body * scale).astype(np.int64))


def run_figures(samples: np.ndarray) -> tuple[str, dict[str, int]]:
    """A run's encoded histogram and its own tail percentiles (HdrHistogram's rule on that run alone)."""
    values, counts = np.unique(samples, return_counts=True)
    text = pooled.encode(pooled.histogram_of(zip(values.tolist(), counts.tolist())))
    own = {key: pooled.pooled_percentile([text], p).us for key, p in pooled.POOLED_KEYS.items()}
    return text, own


def tail_leg(
    rng: random.Random, nrng: np.random.Generator, n: int, samples: int, effect: float, resamples: int
) -> dict[str, list[stats.Comparison]]:
    """Both estimators' comparisons of the tail percentiles in one leg (B = A x ``effect``)."""
    trial = [rng.gauss(0, 1) for _ in range(n)]
    runs = {"A": [], "B": []}
    for arm in "AB":
        for t in range(n):
            scale = math.exp(0.15 * (0.5 * trial[t] + 0.5 * rng.gauss(0, 1)))
            runs[arm].append(run_figures(run_samples(nrng, samples, scale * (effect if arm == "B" else 1))))
    seed = rng.randrange(1 << 30)
    out = {"median": [], "pooled": []}
    for key in TAIL:
        m = stats.metric(key)
        out["median"].append(
            stats.compare(
                m,
                [own[key] for _, own in runs["A"]],
                [own[key] for _, own in runs["B"]],
                seed=seed,
                resamples=resamples,
            )
        )
        out["pooled"].append(
            pooled.compare_pooled(
                m, [h for h, _ in runs["A"]], [h for h, _ in runs["B"]], seed=seed, resamples=resamples
            )
        )
    return out


def part_tail(args, rng: random.Random) -> None:
    nrng = np.random.default_rng(args.seed)
    aa = [tail_leg(rng, nrng, 8, args.samples, 1.0, args.resamples) for _ in range(args.jobs)]
    slow = [tail_leg(rng, nrng, 8, args.samples, 1.25, args.resamples) for _ in range(args.jobs)]
    print(
        f"{args.jobs} A/A legs and {args.jobs} legs with B = 1.25 x A, 8 pairs, {args.samples:,} samples "
        "per run"
    )
    print()
    print(
        "| estimator | metric | samples behind (per arm) | A/A: false gain/regression | A/A: equivalent "
        "| A/A: median detectable | 1.25x: regression |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for est in ("median", "pooled"):
        for i, key in enumerate(TAIL):
            a = [leg[est][i] for leg in aa]
            s = [leg[est][i] for leg in slow]
            p = pooled.POOLED_KEYS[key]
            behind = (
                stats.median([c.samples_a for c in a])
                if est == "pooled"
                else args.samples - int(p * args.samples / 100 + 0.5) + 1
            )
            false = sum(c.verdict in (stats.GAIN, stats.REGRESSION) for c in a) / len(a)
            equiv = sum(c.verdict == stats.EQUIVALENT for c in a) / len(a)
            det = stats.median([c.detectable for c in a])
            hit = sum(c.verdict == stats.REGRESSION for c in s) / len(s)
            print(
                f"| {est} | {key} | {behind:,.0f} | {false:.0%} | {equiv:.0%} | ±{det:.0%} | {hit:.0%} |",
                flush=True,
            )


def part_real(args) -> None:
    import json

    from tailjob.runner import RunRecord, compare_leg

    data = json.loads(Path(args.result).read_text())
    print(f"{args.result}: `{' '.join(data['argv'])}`, profile {data['profile']}")
    print()
    print("| leg | estimator | metric | A (samples) | B (samples) | B/A | interval | detectable | verdict |")
    print("|---|---|---|---:|---:|---:|:---:|---:|---|")
    for leg in data["legs"]:
        runs = [RunRecord(**r) for r in leg["runs"]]
        pooled_cs = {c.metric.key: c for c in compare_leg(runs, seed=data["settings"]["seed"])}
        plain = [replace_histogram(r) for r in runs]
        median_cs = {c.metric.key: c for c in compare_leg(plain, seed=data["settings"]["seed"])}
        for cs in (median_cs, pooled_cs):  # c.estimator names each
            for key in TAIL:
                c = cs[key]
                sa = "" if c.samples_a is None else f" ({c.samples_a:,})"
                sb = "" if c.samples_b is None else f" ({c.samples_b:,})"
                ci = "-" if c.ci is None else f"{c.ci[0]:.3f}-{c.ci[1]:.3f}"
                det = "-" if c.detectable is None else f"±{c.detectable:.0%}"
                print(
                    f"| {leg['name']} | {c.estimator} | {key} | {c.median_a / 1000:.3f}{sa} "
                    f"| {c.median_b / 1000:.3f}{sb} | {c.ratio:.3f} | {ci} | {det} | {c.verdict} |"
                )


def replace_histogram(record):
    """The run without its histogram: what the job compares when no run has one (medians of the runs)."""
    from dataclasses import replace

    return replace(record, wrk={**record.wrk, "histogram": None})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("verdicts", "tail", "all", "real"), default="all")
    p.add_argument("--result", help="with --part real: a job's result JSON (benchmarks/results/<stem>.json)")
    p.add_argument("--jobs", type=int, default=200, help="simulated legs per cell (200)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument(
        "--samples", type=int, default=20_000, help="latency samples per run, --part tail (20,000)"
    )
    p.add_argument("--seed", type=int, default=2)
    args = p.parse_args()
    rng = random.Random(args.seed)
    if args.part == "real":
        if not args.result:
            p.error("--part real needs --result RESULT.json")
        part_real(args)
        return
    if args.part in ("verdicts", "all"):
        part_verdicts(args, rng)
    if args.part in ("tail", "all"):
        if args.part == "all":
            print()
        part_tail(args, rng)


if __name__ == "__main__":
    main()
