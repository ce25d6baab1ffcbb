"""Options of the tail-latency job (``scripts/tail-latency.sh --help``, ``python -m tailjob.options``).

Apart from :mod:`tailjob.cli` so that ``--help`` needs only the standard
library, :mod:`tailjob.plan`, :mod:`tailjob.workloads` and ``tailreactor.config``: ``scripts/tail-latency.sh
--help`` prints it with the system Python before anything is installed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from . import instructions, ownserver, workloads
from .metrics import METRICS
from .plan import AB_PRESETS, BACKENDS, PROFILES

REPO = Path(__file__).resolve().parents[3]
PROG = "tail_latency"
TIERS = ("wall", "sim", "instructions")
"""``--tier``: what measures a run (wall-clock time, virtual time, instruction counts)."""


def _duration(text: str) -> int:
    m = re.fullmatch(r"(\d+)([smh]?)", text.strip())
    if not m or int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted a positive duration like 3, 3s, 2m")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted a positive integer")
    return int(text)


def _connections(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive(x) for x in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted positive integers separated by commas, e.g. 64 or 512,1024"
        ) from None


def _fraction(text: str) -> float:
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted a fraction like 0.05 or a percentage like 5%")
    return value


def _cores(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted a non-negative number of cores, e.g. 0.1")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, whose errors are one line (``tail_latency: error: argument --tier: invalid choice:
    ...``): the option, the value and what is accepted, without the usage block before it.

    After parsing, ``--workload`` and ``--class`` become the workload (:func:`_traffic`)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        ns, rest = super().parse_known_args(args, namespace)
        if hasattr(ns, "classes"):  # this parser's own namespace (not a subparser's)
            try:
                _traffic(ns)
            except workloads.TrafficError as e:
                self.error(str(e))
        return ns, rest


def _traffic(ns: argparse.Namespace) -> None:
    """``ns.workload``: a workload's name, or the :class:`~tailjob.workloads.Traffic` of a file or of
    the ``--class`` options, checked whole before anything runs; with a traffic, ``ns.connections`` is
    its connections (the leg's), and the options the traffic sets are refused."""
    if ns.classes:
        if ns.workload is not None:
            raise workloads.TrafficError(f"--class describes the traffic: leave out --workload {ns.workload}")
        ns.workload = workloads.parse_classes(ns.classes)
    else:
        ns.workload = workloads.workload_of(ns.workload or "uniform")
    t = ns.workload
    if not isinstance(t, workloads.Traffic):
        return
    given = (
        (ns.connections, "--connections", "connections"),
        (ns.load, "--load", "loop"),
        (ns.rate, "--rate", "rate"),
        (ns.schedule, "--schedule", "schedule"),
    )
    for value, option, what in given:
        if value is not None:
            shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
            raise workloads.TrafficError(
                f"{option} {shown}: the traffic ({t.name}) sets each class's {what}; leave out {option}"
            )
    ns.connections = (t.connections,)


EXIT_CODES = (
    "Exit status: 0 done (any verdicts; with --gate, no regression); 1 --gate and a metric is a "
    "regression; 2 bad input (an option, a combination or a value: one line naming it and what is "
    "accepted); 3 the environment (a tool or kernel feature missing here -- wrk, taskset, valgrind, "
    "io_uring asked for -- or a server that would not start or answer, or a run that failed: one line)."
)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        epilog=EXIT_CODES,
        description="Interleaved A/B of the bench server under wrk, with a bootstrap verdict per metric. "
        "No arguments: quick profile, --ab tail, on io_uring then epoll, then the same A/B with --tier sim "
        "and a table of the sim's verdict beside the live one (any option runs one mode alone). "
        "--peers: the bench server beside asyncio, uvloop and nginx instead.",
    )
    p.add_argument(
        "--tier",
        choices=TIERS,
        default="wall",
        help="wall: the A/B, --calibrate or --peers of the real server under wrk or the load "
        "client, in wall-clock time (default); sim: the same A/B in virtual time "
        "(tailjob.sim: the real reactor and HTTP code, figures a function of code, knobs, "
        "workload and seed); instructions: callgrind's user-space instructions per request "
        "of each server, by component, beside a stored baseline (needs valgrind)",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="quick",
        help="; ".join(f"{k}: {v.description}" for k, v in PROFILES.items()),
    )
    w.add_argument("--threads", type=_positive, help="wrk threads (default: the profile's; 1 with --pin)")
    w.add_argument("--connections", type=_connections, help="wrk connections, e.g. 64 or 512,1024")
    w.add_argument("--duration", type=_duration, help="seconds per run: 3, 3s, 1m")
    w.add_argument("--runs", type=_positive, help="measured runs per arm in each leg")
    w.add_argument("--workers", type=_positive, help="bench server --workers (default: CWIST_WORKERS)")
    w.add_argument(
        "--workload",
        metavar="NAME|FILE.toml",
        help="; ".join(
            f"{k}: {v.description}".replace("%", "%%")  # argparse formats help with %
            for k, v in workloads.WORKLOADS.items()
        )
        + "; default uniform. Or FILE.toml: your own traffic, one table per client class "
        "(keys: " + ", ".join(workloads.TRAFFIC_KEYS) + "; docs/en/tail-latency-ci.md, "
        '"Your own traffic"; example: scripts/ci/workloads/example.toml). Every workload but '
        "closed-loop uniform runs on the job's load client (tailjob.loadgen) and is reported "
        "per client class, with the latency probe on",
    )
    w.add_argument(
        "--class",
        dest="classes",
        action="append",
        metavar="'name=N K=V ...'",
        help="instead of --workload: one client class of your own traffic, the keys of a "
        "traffic file's table (e.g. 'name=bulk connections=16 loop=closed depth=16 "
        "service_us=20'); repeat for each class",
    )
    w.add_argument(
        "--load",
        choices=("closed", "open"),
        help="uniform only: closed (wrk, the default) or open (the load client: requests sent "
        "on a schedule, latency from each request's intended send time)",
    )
    w.add_argument(
        "--rate",
        help="open-loop rate: requests/s (2000) or a fraction of the capacity measured "
        "by a short closed-loop run first (0.7x); default: "
        + ", ".join(f"{w.name} {w.default_rate}" for w in workloads.WORKLOADS.values() if w.default_rate),
    )
    w.add_argument(
        "--schedule",
        choices=("poisson", "constant"),
        help="send times of open-loop classes: poisson (default) or constant gaps",
    )
    arms = p.add_argument_group("arms (A is the baseline, B the treatment; ratios are B/A)")
    arms.add_argument(
        "--ab",
        choices=sorted(AB_PRESETS),
        help="tail: CWIST_REACTOR_TAIL_US 3600000 (A, off) vs 3500 (B, on); "
        "backend: epoll (A) vs io_uring (B); aa: identical arms (control). "
        "Default: tail",
    )
    arms.add_argument("--a", metavar="'K=V ...'", help="arm A's CWIST_* variables (custom A/B)")
    arms.add_argument("--b", metavar="'K=V ...'", help="arm B's CWIST_* variables (custom A/B)")
    arms.add_argument(
        "--a-ref",
        metavar="REF",
        help="on --tier wall (arm A's bench server) or --tier sim (arm A's simulated runs): arm A "
        "runs the reactor and HTTP code of git ref REF (a temporary worktree, removed at the end), "
        "arm B the working tree's; with no --ab/--a/--b both arms' knobs alike",
    )
    arms.add_argument(
        "--backend",
        choices=BACKENDS,
        help="backend for arms that do not set it (default: each backend in turn)",
    )
    run = p.add_argument_group("runs")
    run.add_argument(
        "--pin",
        action="store_true",
        help="pin server and wrk to separate CPUs with taskset (wrk -t1 unless --threads)",
    )
    run.add_argument(
        "--server-cpus", default="0", help="taskset CPU list for the server with --pin or --peers (0)"
    )
    run.add_argument("--wrk-cpus", default="1", help="taskset CPU list for wrk with --pin or --peers (1)")
    run.add_argument("--no-warmup", action="store_true", help="skip the discarded warm-up run per leg")
    run.add_argument("--seed", type=int, default=1, help="seed of the run order and the bootstrap (1)")
    run.add_argument(
        "--pollution-limit",
        type=_cores,
        default=0.10,
        help="CPU of other processes (cores) above which a run is flagged (0.10)",
    )
    run.add_argument(
        "--probe",
        action="store_true",
        help="run every server with CWIST_LATENCY_PROBE=1, gather each worker's probe file "
        "(under <out>/results/<stem>-probe/) and report the probe's figures per arm "
        "and worker",
    )
    verdict = p.add_argument_group("verdict and outputs")
    verdict.add_argument(
        "--min-effect",
        type=_fraction,
        help="minimum effect for every metric, e.g. 5%% (default: per metric, "
        + ", ".join(f"{m.key} {m.min_effect:.0%}" for m in METRICS).replace("%", "%%")
        + ")",
    )
    verdict.add_argument(
        "--gate",
        action="store_true",
        help="exit 1 if any metric is a regression (inconclusive metrics are printed prominently and exit 0)",
    )
    verdict.add_argument(
        "--calibrate",
        type=_positive,
        metavar="K",
        help="instead of one A/B: K rounds of an A/A leg and legs with about +10%% and "
        "+25%% server CPU per request injected (CWIST_BENCH_DELAY_US) on each leg of "
        "the profile; prints per metric the false gain/regression rate, the detection "
        "rates and the median detectable effect",
    )
    verdict.add_argument(
        "--out",
        type=Path,
        default=REPO / "benchmarks",
        help="output directory: <out>/results/ and <out>/tail-latency.jsonl (default: benchmarks/)",
    )
    cmp = p.add_argument_group("peers comparison (instead of an A/B)")
    cmp.add_argument(
        "--peers",
        action="store_true",
        help="run the bench server on io_uring and on epoll, the asyncio and uvloop peers "
        "(benchmarks/peers/) and nginx as the ceiling if installed, interleaved in random "
        "order per trial; pinned (server CPU 0, wrk CPU 1, wrk -t1) unless --no-pin",
    )
    cmp.add_argument("--no-pin", action="store_true", help="with --peers: do not pin")
    cmp.add_argument(
        "--write-readme",
        action="store_true",
        help="with --peers: write the comparison's tables into <out>/README.md "
        "(between its peers-table markers)",
    )
    sim = p.add_argument_group("virtual-time tier (--tier sim)")
    sim.add_argument(
        "--sim-cost",
        metavar="'K=US ...'",
        help="with --tier sim: override cost-model constants (wait_us, harvest_us, callback_us, "
        "age_order_us, request_us, client_us; virtual microseconds)",
    )
    sim.add_argument(
        "--sweep",
        action="store_true",
        help="with --tier sim: instead of one A/B, a grid of A/Bs (backends x load points x "
        "knob settings, each against age-based dispatch off), its report, JSON, heat maps "
        "and history line (tailjob.sim.sweep)",
    )
    sim.add_argument(
        "--grid",
        metavar="default|FILE",
        help="with --sweep: the grid, 'default' (the default) or a TOML file "
        '(docs/en/tail-latency-ci.md, "The sweep")',
    )
    sim.add_argument(
        "--dask",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="with --sweep: run the cells on Dask distributed (the sweep extra): a LocalCluster "
        "of one worker per CPU, or the scheduler at ADDRESS; default: local worker processes",
    )
    val = p.add_argument_group("validation of the sim tier against the live job")
    val.add_argument(
        "--validate",
        action="store_true",
        help="run the A/B of the other options on the live tier, then on the sim tier (the same "
        "profile, arms, backends, workload and load; --pin, --threads, --probe go to the live "
        "run only, --sim-cost to the sim's), and print per leg, scope (whole run, each class) "
        "and metric the live B/A, interval and verdict beside the sim's, and whether they "
        "agree (where the live run resolves the metric); writes "
        "<out>/results/<stem>-validate.md and .json and a line of "
        "<out>/tail-latency-validate.jsonl",
    )
    instructions.add_options(p)
    ownserver.add_server_options(p)
    return p


if __name__ == "__main__":  # scripts/tail-latency.sh --help: the standard library only
    build_parser().parse_args(["--help"])
