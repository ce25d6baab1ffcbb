"""The command line of the tail-latency job: one subcommand per job, each with only its own options.

``ab`` (the default: no subcommand is ``ab``), ``calibrate``, ``peers``, ``sweep``, ``validate``,
``count``.  The option groups two subcommands share are written once (the ``_*_options`` helpers).
:func:`parse` returns the namespace; :mod:`tailjob.cli` turns it into the records the jobs take.

Apart from :mod:`tailjob.cli` so that ``--help`` needs only the standard library,
:mod:`tailjob.plan`, :mod:`tailjob.workloads` and ``tailreactor.config``: ``scripts/tail-latency.sh
--help`` prints it with the system Python before anything is installed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from . import PROG, REPO, fail, instructions, ownserver, workloads  # noqa: F401  (the job's name and one-line error, re-exported)
from .metrics import METRICS
from .plan import AB_PRESETS, BACKENDS, PROFILES
from .sim import costs

TIERS = ("wall", "sim")
"""``ab --tier``: what measures a run (wall-clock time, virtual time; instruction counts are ``count``)."""
COMMANDS = ("ab", "calibrate", "peers", "sweep", "validate", "count")
EXIT_CODES = """exit codes:
  0  done, whatever the verdicts
  1  --gate and a metric is a regression
  2  bad input: one line naming the option, the value and what is accepted
  3  the environment: a tool or kernel feature missing here (wrk, taskset, valgrind, io_uring asked
     for), a server that would not start or answer, or a run that failed: one line"""


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
    ...``): the option, the value and what is accepted, without the usage block before it."""

    def error(self, message: str):
        self.exit(2, f"{PROG}: error: {message}\n")


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


# -- option groups, each written once and given to the subcommands that take it -------------------


def _profile_options(p, *, workers: bool = True) -> None:
    g = p.add_argument_group("profile (the legs: connections, duration, runs)")
    g.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="quick",
        help="; ".join(f"{k}: {v.description}" for k, v in PROFILES.items()),
    )
    g.add_argument(
        "--threads", type=_positive, metavar="N", help="wrk threads (default: the profile's; 1 with --pin)"
    )
    g.add_argument(
        "--connections", type=_connections, metavar="N[,N...]", help="one leg per count, e.g. 64 or 512,1024"
    )
    g.add_argument("--duration", type=_duration, metavar="T", help="per run: seconds or 3s, 2m, 1h")
    g.add_argument("--runs", type=_positive, metavar="N", help="measured runs per arm in each leg")
    if workers:
        g.add_argument(
            "--workers", type=_positive, metavar="N", help="bench server --workers (default: CWIST_WORKERS)"
        )


def _traffic_options(p) -> None:
    g = p.add_argument_group("workload")
    g.add_argument(
        "--workload",
        metavar="NAME|FILE.toml",
        help=", ".join(workloads.WORKLOADS) + " (default uniform; docs/en/workloads.md), or FILE.toml: "
        "your own traffic, one table per client class (keys: " + ", ".join(workloads.TRAFFIC_KEYS) + "; "
        "docs/en/own-traffic.md, scripts/ci/workloads/example.toml)",
    )
    g.add_argument(
        "--class",
        dest="classes",
        action="append",
        metavar="'name=N K=V ...'",
        help="instead of --workload: one client class, name= and a traffic file's keys; repeat per class",
    )
    g.add_argument("--load", choices=("closed", "open"), help="uniform only: closed (wrk) or open loop")
    g.add_argument(
        "--rate",
        help="open-loop rate: requests/s (2000) or a multiple of the measured capacity (0.7x); default: "
        + ", ".join(f"{w.name} {w.default_rate}" for w in workloads.WORKLOADS.values() if w.default_rate),
    )
    g.add_argument("--schedule", choices=("poisson", "constant"), help="open-loop send times (poisson)")


def _arm_options(p, *, a_ref: bool = True) -> None:
    g = p.add_argument_group("arms (A is the baseline, B the treatment; ratios are B/A)")
    g.add_argument(
        "--ab",
        choices=sorted(AB_PRESETS),
        help="tail (the default): CWIST_REACTOR_TAIL_US 3600000 (A, off) vs 3500 (B); "
        "backend: epoll (A) vs io_uring (B); aa: identical arms (control)",
    )
    g.add_argument("--a", metavar="'K=V ...'", help="arm A's environment: CWIST_* knobs (custom A/B)")
    g.add_argument("--b", metavar="'K=V ...'", help="arm B's environment: CWIST_* knobs (custom A/B)")
    if a_ref:
        g.add_argument(
            "--a-ref",
            metavar="REF",
            help="arm A runs the reactor and HTTP code of git ref REF (a branch, tag or commit; a "
            "temporary worktree), arm B the working tree's",
        )
    _backend_option(g)


def _backend_option(p, help: str = "backend for arms that do not set it (default: each in turn)") -> None:
    p.add_argument("--backend", choices=BACKENDS, help=help)


def _run_options(p, *, pin: str = "--pin", probe: bool = True) -> None:
    g = p.add_argument_group("runs")
    if pin == "--pin":
        g.add_argument("--pin", action="store_true", help="pin server and wrk to CPUs with taskset")
    else:
        g.add_argument("--no-pin", action="store_true", help="do not pin (pinned by default)")
    g.add_argument(
        "--server-cpus",
        default="0",
        metavar="CPUS",
        help="the server's taskset CPUs when pinned: 0,2 or 0-1 (0)",
    )
    g.add_argument(
        "--wrk-cpus", default="1", metavar="CPUS", help="wrk's taskset CPUs when pinned: 1 or 1,3 (1)"
    )
    g.add_argument("--no-warmup", action="store_true", help="skip the discarded warm-up run per leg")
    g.add_argument(
        "--seed", type=int, default=1, metavar="N", help="integer seed of the run order and bootstrap (1)"
    )
    g.add_argument(
        "--pollution-limit",
        type=_cores,
        default=0.10,
        metavar="CORES",
        help="CPU of other processes (cores, >= 0) above which a run is flagged (0.10)",
    )
    if probe:
        g.add_argument(
            "--probe",
            action="store_true",
            help="CWIST_LATENCY_PROBE=1 on every server; the probe's figures per arm and worker",
        )


def _min_effect_option(p) -> None:
    p.add_argument(
        "--min-effect",
        type=_fraction,
        metavar="F",
        help="minimum effect for every metric: 0.05 or 5%% (docs/en/statistics.md; default per metric: "
        + ", ".join(f"{m.key} {m.min_effect:.0%}" for m in METRICS).replace("%", "%%")
        + ")",
    )


def _gate_option(p, what: str = "a metric") -> None:
    p.add_argument("--gate", action="store_true", help=f"exit 1 if {what} is a regression")


def _out_option(p) -> None:
    p.add_argument(
        "--out",
        type=Path,
        default=REPO / "benchmarks",
        metavar="DIR",
        help="output directory: <out>/results/ and <out>/*.jsonl (default: benchmarks/)",
    )


def _sim_cost_option(p) -> None:
    p.add_argument(
        "--sim-cost",
        metavar="'K=US ...'",
        help=f"override cost-model constants, 0 to {costs.LIMIT_US:g} virtual microseconds each: "
        f"{', '.join(costs.for_backend('epoll').constants)} (docs/en/sim-tier.md)",
    )


RENAMED = {"--peers": "peers", "--calibrate": "calibrate K", "--validate": "validate", "--sweep": "sweep"}
"""The flat options of the one-parser command line that are subcommands now (said in one line)."""


def _ab(sub) -> None:
    p = sub.add_parser(
        "ab",
        help="interleaved A/B of two arms, a verdict per metric (the default)",
        description="Interleaved A/B of the bench server's two arms, a bootstrap verdict per metric. "
        "No options: the quick profile, --ab tail, on each backend, then the same A/B in virtual time.",
    )
    p.add_argument(
        "--tier",
        choices=TIERS,
        default="wall",
        help="wall: the real server in wall-clock time (default); sim: the same A/B in virtual time",
    )
    _profile_options(p)
    _traffic_options(p)
    _arm_options(p)
    _run_options(p)
    v = p.add_argument_group("verdict and outputs")
    _min_effect_option(v)
    _gate_option(v)
    _out_option(v)
    _sim_cost_option(p.add_argument_group("virtual-time tier (--tier sim)"))
    ownserver.add_server_options(p)


def _calibrate(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="K rounds of A/A and injected slowdowns: what a verdict is worth here",
        description="K rounds of an A/A leg and legs with about +10% and +25% server CPU per request "
        "injected (CWIST_BENCH_DELAY_US) on each leg of the profile; per metric the false "
        "gain/regression rate, the detection rates and the median detectable effect.",
    )
    p.add_argument(
        "rounds",
        type=_positive,
        metavar="K",
        help="rounds, a positive integer (5 in docs/en/inconclusive.md)",
    )
    _profile_options(p)
    _backend_option(p)
    _run_options(p, probe=False)
    _min_effect_option(p)
    _out_option(p)
    ownserver.add_server_options(p)


def _peers(sub) -> None:
    p = sub.add_parser(
        "peers",
        help="the bench server on each backend beside asyncio, uvloop and nginx",
        description="The bench server on io_uring and on epoll, the asyncio and uvloop peers "
        "(benchmarks/peers/) and nginx as the ceiling if installed, interleaved per trial, pinned.",
    )
    _profile_options(p, workers=False)
    _run_options(p, pin="--no-pin", probe=False)
    p.add_argument(
        "--write-readme",
        action="store_true",
        help="write the tables into <out>/README.md (between its peers-table markers)",
    )
    _out_option(p)


def _sweep(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="a grid of A/Bs in virtual time (backends x loads x knobs), heat maps",
        description="A grid of A/Bs in virtual time (backends x load points x knob settings, each "
        "against age-based dispatch off): report, JSON, heat maps, history line.",
    )
    p.add_argument(
        "--grid",
        metavar="default|FILE",
        help="'default' (the default grid) or a grid TOML file (docs/en/sweep.md)",
    )
    p.add_argument(
        "--dask",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run on Dask (the sweep extra): a LocalCluster, or the scheduler at ADDRESS (tcp://HOST:8786)",
    )
    _out_option(p)


def _validate(sub) -> None:
    p = sub.add_parser(
        "validate",
        help="the same A/B live and in virtual time, and whether they agree",
        description="The A/B on the live tier, then on the sim tier (--pin, --threads, --probe go to "
        "the live run only, --sim-cost to the sim's): per leg, scope and metric both verdicts "
        "and whether they agree.",
    )
    _profile_options(p, workers=False)
    _traffic_options(p)
    _arm_options(p, a_ref=False)
    _run_options(p)
    _min_effect_option(p)
    _sim_cost_option(p)
    _out_option(p)


def _count(sub) -> None:
    p = sub.add_parser(
        "count",
        help="the instruction tier: callgrind's instructions per request, beside a baseline",
        description="Callgrind's user-space instructions per request of each server, by component, "
        "beside a stored baseline (needs valgrind).",
    )
    p.add_argument(
        "--server",
        action="append",
        choices=instructions.SERVERS,
        help="a server to count (repeatable; default: all, or the bench server on --backend and asyncio)",
    )
    p.add_argument(
        "--requests",
        type=_positive,
        default=instructions.REQUESTS,
        metavar="N",
        help=f"requests per server, a positive integer ({instructions.REQUESTS})",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        default=instructions.BASELINE,
        metavar="FILE",
        help="the baseline JSON file (benchmarks/results/instructions-baseline.json)",
    )
    p.add_argument("--write-baseline", action="store_true", help="store this count as the baseline")
    _backend_option(p, "count the bench server on this backend (and asyncio)")
    _gate_option(p, "a server's instructions per request")
    _out_option(p)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="The tail-latency job. No subcommand is `ab`; no arguments: the quick A/B of "
        "age-based dispatch on each backend, then the same A/B in virtual time.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (_ab, _calibrate, _peers, _sweep, _validate, _count):
        add(sub)
    return p


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def parse(argv: list[str], parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The namespace of ``argv`` (no subcommand: ``ab``); an option of another subcommand is one line
    naming the subcommands it belongs to (exit 2)."""
    parser = parser or build_parser()
    argv = list(argv)
    if "--tier" in argv[:-1] and argv[argv.index("--tier") + 1] == "instructions":
        parser.error(f"--tier instructions: now a subcommand: {PROG} count [options]")
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        argv.insert(0, "ab")
    ns, rest = parser.parse_known_args(argv)
    if rest:
        name = rest[0].split("=", 1)[0]
        if name in RENAMED:
            parser.error(f"{name}: now a subcommand: {PROG} {RENAMED[name]} [options]")
        if not name.startswith("-"):
            parser.error(f"{name!r}: not a subcommand; accepted: {', '.join(COMMANDS)}")
        owners = [c for c, sp in _subparsers(parser).items() if name in sp._option_string_actions]
        where = f"an option of {', '.join(owners)}" if owners else f"see {PROG} {ns.command} --help"
        parser.error(f"{name}: not an option of {ns.command} ({where})")
    if hasattr(ns, "classes"):  # --workload and --class become the workload, checked whole
        try:
            _traffic(ns)
        except workloads.TrafficError as e:
            parser.error(str(e))
    return ns


if __name__ == "__main__":  # scripts/tail-latency.sh --help: the standard library only
    import sys

    parse(sys.argv[1:] or ["--help"])
