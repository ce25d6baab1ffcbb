"""The command line of the tail-latency job: one subcommand per job, each with only its own options.

``ab`` (the default: no subcommand is ``ab``), ``calibrate``, ``peers``, ``sweep``, ``validate``,
``count``.  Every option is declared once, in :data:`OPTIONS`; each subcommand takes its rows by name
(:data:`SUBCOMMANDS`).  :func:`parse` returns the namespace; :mod:`tailjob.cli` turns it into records.
``--help`` needs only the standard library, :mod:`tailjob.plan`, :mod:`tailjob.workloads` and
``tailreactor.config``: ``scripts/tail-latency.sh --help`` runs this module with the system Python.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import cast

from . import COMMAND, OUT, PROG, REPO, bounds, fail, ownserver, workloads  # noqa: F401  (fail: re-exported)
from .metrics import METRICS
from .plan import (
    AB_PRESETS,
    BACKENDS,
    COUNT_REQUESTS,
    COUNT_SERVERS,
    PROFILES,
    SIM_MAX_CONNECTIONS,
    SIM_MAX_DURATION_S,
    WALL_MAX_DURATION_S,
)
from .sim import costs
from .stats import MIN_PAIRS

TIERS = ("wall", "sim")
"""``ab --tier``: what measures a run (wall-clock time, virtual time; instruction counts are ``count``)."""
COMMANDS = ("ab", "calibrate", "peers", "sweep", "validate", "count")
EXIT_CODES = """exit codes:
  0    done, whatever the verdicts
  1    --gate and a metric is a regression
  2    bad input: one line naming the option, the value and what is accepted
  3    the environment (wrk, taskset, valgrind, io_uring asked for), a server that would not start
       or answer, or a run that failed: one line
  130  interrupted (Ctrl-C, SIGINT): one line
  143  terminated (SIGTERM, a CI timeout): one line
       (3, 130, 143: an A/B (either tier), calibrate or peers first writes the runs it finished,
       a report and JSON marked partial, and its one line names them)"""


def _duration(text: str) -> int:
    m = re.fullmatch(r"(\d+)([smh]?)", text.strip())
    if not m or int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted whole seconds like 3, 3s, 2m, 1h (not 0)")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


SEED_MAX = 2**32 - 1
"""``--seed``'s largest value: a 32-bit seed, what every random-number generator here takes."""
MAX_RUNS = 1000
"""``--runs``' most runs per arm: the profiles run 8; a thousand 2-second pairs already take over an
hour per leg, so more is a typo, not a measurement."""
MAX_WORKERS = 1024
"""``--workers``' most: the bench server's own bound (``tailreactor.http.server --workers``)."""


def _integer(low: int = 1, high: int | None = None, why: str = ""):
    """The type of an integer option from ``low`` to ``high`` (None: no bound; ``why``: the bound's reason)."""

    def check(text: str) -> int:
        if not text.strip().isdecimal() or not low <= int(text) <= (int(text) if high is None else high):
            what = "a positive integer" if high is None else f"an integer from {low} to {high} ({why})"
            raise argparse.ArgumentTypeError(f"{text!r}: accepted {what}")
        return int(text)

    return check


_positive = _integer()


def _connections(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive(x) for x in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted positive integers separated by commas, e.g. 64 or 512,1024"
        ) from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan  # refused by every bound below


def _fraction(text: str) -> float:
    t = text.strip()
    value = _number(t[:-1]) / 100 if t.endswith("%") else _number(t)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted a fraction above 0 and below 1 like 0.05, or a percentage like 5%"
        )
    return value


def _cores(text: str) -> float:
    value = _number(text)
    if not (value >= 0 and math.isfinite(value)):  # nan and inf (1e309) too
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted a finite non-negative number of cores, e.g. 0.1"
        )
    return value


def _directory(text: str) -> Path:
    if not text.strip():  # Path("") is ".": the results would land wherever the job runs
        raise argparse.ArgumentTypeError(f"{text!r}: empty; accepted a directory path")
    return Path(text)


class _Parser(argparse.ArgumentParser):
    """argparse, whose errors are one line (``tail_latency: error: argument --tier: invalid choice:
    ...``): the option, the value and what is accepted, without the usage block before it."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # --server is count's option, not ab's --server-cmd
        super().__init__(*args, **kwargs)
        self.missing: list[str] | None = None  # set by parse: a missing argument is said after the rest

    def error(self, message: str):
        # argparse says a missing argument (calibrate's K) before it returns the options it did not
        # know; an unknown option (calibrate --bogus) is the first mistake, so parse says that first.
        if self.missing is not None and message.startswith("the following arguments are required"):
            self.missing.append(message)  # argparse goes on, and returns what it did not know
            return
        self.exit(2, f"{PROG}: error: {message}\n")

    def format_help(self) -> str:
        """argparse's help, then the exit codes (every subcommand's: a CI step branches on them)."""
        return f"{super().format_help()}\n{EXIT_CODES}\n"


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


# -- every option once; a subcommand takes its rows by name (SUBCOMMANDS) ------------------------

OPTIONS: dict[str, dict] = {
    "--tier": dict(
        choices=TIERS,
        default="wall",
        help="wall: live (default); sim: in virtual time",
    ),
    "rounds": dict(
        type=_positive, metavar="K", help="rounds, a positive integer (5 in docs/en/inconclusive.md)"
    ),
    # the profile
    "--profile": dict(
        choices=sorted(PROFILES),
        default="quick",
        help="; ".join(f"{k}: {v.description}" for k, v in PROFILES.items()),
    ),
    "--threads": dict(type=_positive, metavar="N", help="wrk threads (default: the profile's; 1 with --pin)"),
    "--connections": dict(
        type=_connections,
        metavar="N[,N...]",
        help="one leg per count, e.g. 64 or 512,1024 (at most ulimit -n less 64 live, "
        f"{SIM_MAX_CONNECTIONS} in virtual time)",
    ),
    "--duration": dict(
        type=_duration,
        metavar="T",
        help=f"per run: seconds or 3s, 2m, 1h; at most {WALL_MAX_DURATION_S // 3600}h live, "
        f"{SIM_MAX_DURATION_S} s in virtual time",
    ),
    "--runs": dict(
        type=_integer(1, MAX_RUNS, "runs per arm; the profiles run 8"),
        metavar="N",
        help="measured runs per arm in each leg",
    ),
    "--workers": dict(
        type=_integer(1, MAX_WORKERS, "the bench server's bound"),
        metavar="N",
        help="bench server --workers (default: CWIST_WORKERS)",
    ),
    # the workload
    "--workload": dict(
        metavar="NAME|FILE.toml",
        help=", ".join(workloads.WORKLOADS) + " (default uniform; docs/en/workloads.md), or FILE.toml: "
        "your own traffic, one table per client class (keys: " + ", ".join(workloads.TRAFFIC_KEYS) + "; "
        "docs/en/own-traffic.md, scripts/ci/workloads/example.toml)",
    ),
    "--class": dict(
        dest="classes",
        action="append",
        metavar="'name=NAME K=V ...'",
        help="instead of --workload: one client class, name= and a traffic file's keys; repeat per class",
    ),
    "--load": dict(choices=("closed", "open"), help="uniform only: closed (wrk) or open loop"),
    "--rate": dict(
        help="open-loop rate: requests/s (2000) or a multiple of the measured capacity (0.7x); default: "
        + ", ".join(f"{w.name} {w.default_rate}" for w in workloads.WORKLOADS.values() if w.default_rate),
    ),
    "--schedule": dict(choices=("poisson", "constant"), help="open-loop send times (poisson)"),
    # the arms
    "--ab": dict(
        choices=sorted(AB_PRESETS),
        help="tail (the default): CWIST_REACTOR_TAIL_US 3600000 (A, off) vs 3500 (B); "
        "backend: epoll (A) vs io_uring (B); aa: identical arms (control)",
    ),
    "--a": dict(metavar="'K=V ...'", help="arm A's environment: CWIST_* knobs (custom A/B)"),
    "--b": dict(metavar="'K=V ...'", help="arm B's environment: CWIST_* knobs (custom A/B)"),
    "--a-ref": dict(
        metavar="REF",
        help="arm A runs the reactor and HTTP code of git ref REF (a branch, tag or commit; a "
        "temporary worktree), arm B the working tree's",
    ),
    "--backend": dict(choices=BACKENDS, help="backend for arms that do not set it (default: each in turn)"),
    # the runs
    "--pin": dict(action="store_true", help="pin server and wrk to CPUs with taskset"),
    "--no-pin": dict(action="store_true", help="do not pin (pinned by default)"),
    "--server-cpus": dict(metavar="CPUS", help="the server's taskset CPUs when pinned: 0,2 or 0-1 (0)"),
    "--wrk-cpus": dict(metavar="CPUS", help="wrk's taskset CPUs when pinned: 1 or 1,3 (1)"),
    "--no-warmup": dict(action="store_true", help="skip the discarded warm-up run per leg"),
    "--seed": dict(
        type=_integer(0, SEED_MAX, "a 32-bit seed"),
        default=1,
        metavar="N",
        help="integer seed of the run order and bootstrap (1)",
    ),
    "--pollution-limit": dict(
        type=_cores,
        default=0.10,
        metavar="CORES",
        help="CPU of other processes (cores, >= 0) above which a run is flagged (0.10)",
    ),
    "--probe": dict(
        action="store_true",
        help="CWIST_LATENCY_PROBE=1 on every server; the probe's figures per arm and worker",
    ),
    # the verdict and the outputs
    "--min-effect": dict(
        type=_fraction,
        metavar="F",
        help="minimum effect for every metric: 0.05 or 5%% (docs/en/statistics.md; default per metric: "
        + ", ".join(f"{m.key} {m.min_effect:.0%}" for m in METRICS).replace("%", "%%")
        + ")",
    ),
    "--gate": dict(action="store_true", help="exit 1 if a metric is a regression"),
    "--out": dict(
        type=_directory,
        default=OUT,
        metavar="DIR",
        help="output directory: <out>/results/ and <out>/*.jsonl "
        "(default: benchmarks/ in a checkout, ./tailreactor-results where installed)",
    ),
    "--sim-cost": dict(
        metavar="'K=V ...'",
        help=f"override cost-model constants: virtual microseconds, 0 to {costs.LIMIT_US:g}, for "
        + ", ".join(c for c in costs.for_backend("epoll").constants if c.endswith("_us"))
        + "; instruction_ns in nanoseconds (docs/en/sim-tier.md)",
    ),
    # peers, sweep, count
    "--write-readme": dict(
        action="store_true", help="write the tables into <out>/README.md (between its peers-table markers)"
    ),
    "--grid": dict(
        metavar="default|FILE", help="'default' (the default grid) or a grid TOML file (docs/en/sweep.md)"
    ),
    "--dask": dict(
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run on Dask (the sweep extra): a LocalCluster, or the scheduler at ADDRESS (tcp://HOST:8786)",
    ),
    "--server": dict(
        action="append",
        choices=COUNT_SERVERS,
        help="a server to count (repeatable; default: all, or the bench server on --backend and asyncio)",
    ),
    "--requests": dict(
        type=_positive,
        default=COUNT_REQUESTS,
        metavar="N",
        help=f"requests per server, a positive integer ({COUNT_REQUESTS})",
    ),
    "--in-flight": dict(
        type=_positive,
        default=1,
        metavar="N",
        help="requests in flight: N connections, one request each, a round holds the N (1)",
    ),
    "--baseline": dict(
        type=Path,
        metavar="FILE",
        help="the baseline JSON file, compared whenever given (default: "
        "benchmarks/results/instructions-baseline.json, compared where the counts match)",
    ),
    "--write-baseline": dict(action="store_true", help="store this count as the baseline"),
}
"""Every option of every subcommand: ``add_argument``'s keywords by the option's name."""


_PROFILE = (
    "profile (the legs: connections, duration, runs)",
    (
        "--profile",
        "--threads",
        "--connections",
        "--duration",
        "--runs",
        "--workers",
    ),
)
_WORKLOAD = "workload", ("--workload", "--class", "--load", "--rate", "--schedule")
_ARMS = (
    "arms (A is the baseline, B the treatment; ratios are B/A)",
    ("--ab", "--a", "--b", "--a-ref", "--backend"),
)
_RUNS = (
    "runs",
    ("--pin", "--server-cpus", "--wrk-cpus", "--no-warmup", "--seed", "--pollution-limit", "--probe"),
)


def _less(group: tuple[str, tuple], *names: str) -> tuple[str, tuple]:
    """A shared group without the rows ``names`` (what one subcommand has not)."""
    return group[0], tuple(n for n in group[1] if n not in names)


SUBCOMMANDS: dict[str, tuple[str, str, tuple]] = {
    "ab": (
        "interleaved A/B of two arms, a verdict per metric (the default)",
        "A/B of two arms (the bench server's or --server-cmd's), a verdict per metric; no "
        "options: --ab tail, quick profile, each backend, live then virtual time.",
        (
            (None, ("--tier",)),
            _PROFILE,
            _WORKLOAD,
            _ARMS,
            _RUNS,
            ("verdict and outputs", ("--min-effect", "--gate", "--out")),
            ("virtual-time tier (--tier sim)", ("--sim-cost",)),
        ),
    ),
    "calibrate": (
        "K rounds of A/A and injected slowdowns: what a verdict is worth here",
        "K rounds of an A/A leg and legs with about +10% and +25% server CPU per request "
        "injected (CWIST_BENCH_DELAY_US) on each leg of the profile; per metric the false "
        "gain/regression rate, the detection rates and the median detectable effect.",
        (
            (None, ("rounds",)),
            _PROFILE,
            (None, ("--backend",)),
            _less(_RUNS, "--probe"),
            (None, ("--min-effect", "--out")),
        ),
    ),
    "peers": (
        "the bench server on each backend beside asyncio, uvloop and nginx",
        "The bench server on io_uring and on epoll, the asyncio and uvloop peers "
        "(benchmarks/peers/) and nginx as the ceiling if installed, interleaved per trial, pinned.",
        (
            _less(_PROFILE, "--workers"),
            ("runs", ("--no-pin", *_less(_RUNS, "--pin", "--probe")[1])),
            (None, ("--write-readme", "--out")),
        ),
    ),
    "sweep": (
        "a grid of A/Bs in virtual time (backends x loads x knobs), heat maps",
        "A grid of A/Bs in virtual time (backends x load points x knob settings, each "
        "against age-based dispatch off): report, JSON, heat maps, history line.",
        ((None, ("--grid", "--dask", "--sim-cost", "--out")),),
    ),
    "validate": (
        "the same A/B live and in virtual time, and whether they agree",
        "The A/B on the live tier, then on the sim tier (--pin, --threads, --probe go to "
        "the live run only, --sim-cost to the sim's): per leg, scope and metric both verdicts "
        "and whether they agree.",
        (
            _less(_PROFILE, "--workers"),
            _WORKLOAD,
            _less(_ARMS, "--a-ref"),
            _RUNS,
            (None, ("--min-effect", "--sim-cost", "--out")),
        ),
    ),
    "count": (
        "the instruction tier: callgrind's instructions per request, beside a baseline",
        "Callgrind's user-space instructions per request of each server, by component, "
        "beside a stored baseline (needs valgrind).",
        (
            (
                None,
                (
                    "--server",
                    "--requests",
                    "--in-flight",
                    "--baseline",
                    "--write-baseline",
                    "--backend",
                    "--gate",
                    "--out",
                ),
            ),
        ),
    ),
}
"""Per subcommand: its one-line help, its description, and its options: ``(group title, rows)`` in
order (title None: the parser's own ``options``).  ``ab`` and ``calibrate`` take a server command's
options too (:func:`tailjob.ownserver.add_server_options`)."""

_LIVE = {
    "--connections": "one leg per count, e.g. 64 or 512,1024 (at most ulimit -n less 64)",
    "--duration": f"per run: seconds or 3s, 2m, 1h; at most {WALL_MAX_DURATION_S // 3600}h",
}
"""``--connections`` and ``--duration`` where every run is live (no virtual-time bounds to give)."""

HELP = {
    **{(c, row): text for c in ("calibrate", "peers") for row, text in _LIVE.items()},
    ("calibrate", "--backend"): "the backend of every leg (default: each in turn)",
    ("count", "--backend"): "count the bench server on this backend (and asyncio)",
    ("count", "--gate"): "exit 1 if a server's instructions per request is a regression",
}
"""A row's help where one subcommand's meaning differs from :data:`OPTIONS`'."""

RENAMED = {"--peers": "peers", "--calibrate": "calibrate K", "--validate": "validate", "--sweep": "sweep"}
"""The flat options of the one-parser command line that are subcommands now (said in one line)."""


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=COMMAND,
        description="The tail-latency job. No subcommand is `ab`; no arguments: the quick A/B of "
        "age-based dispatch on each backend, then the same A/B in virtual time.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command, (summary, description, groups) in SUBCOMMANDS.items():
        sp = sub.add_parser(command, help=summary, description=description)
        for title, rows in groups:
            g = sp if title is None else sp.add_argument_group(title)
            for row in rows:
                spec = dict(OPTIONS[row])
                if (command, row) in HELP:
                    spec["help"] = HELP[command, row]
                g.add_argument(row, **spec)
        if command in ("ab", "calibrate"):  # calibrate runs one server: not two builds
            ownserver.add_server_options(sp, two_builds=command == "ab")
    return p


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _check_out(parser: argparse.ArgumentParser, out: Path) -> None:
    """A bad ``--out`` is one line before any run: a directory, or one that can be made (tried, then
    removed again: bad input writes nothing)."""
    if out.exists():
        if not out.is_dir():
            parser.error(
                f"--out {out}: not a directory; accepted a directory, or a path where one can be made"
            )
        return
    missing = []
    while not out.exists():
        missing.append(out)
        out = out.parent
    made: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
    except OSError as e:
        parser.error(f"--out {missing[0]}: {e.strerror or e}; accepted a directory that can be made")
    finally:
        for d in reversed(made):
            d.rmdir()


def _glued(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with a value that starts with ``-`` glued to its option (``--min-effect -5%`` ->
    ``--min-effect=-5%``): argparse would take it for an option and say only "expected one argument",
    where the option's own check names the value and what is accepted."""
    actions = {o: a for sp in _subparsers(parser).values() for o, a in sp._option_string_actions.items()}
    out: list[str] = []
    for arg in argv:
        prev = out[-1] if out else ""
        option = arg.split("=", 1)[0] in actions  # --out=DIR is an option, -5% is not
        if arg.startswith("-") and not option and prev in actions and actions[prev].nargs is None:
            out[-1] = f"{prev}={arg}"
            continue
        out.append(arg)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    """The namespace of ``argv`` (no subcommand: ``ab``); an option of another subcommand is one line
    naming the subcommands it belongs to (exit 2)."""
    parser, argv = build_parser(), list(argv)
    if "--tier" in argv[:-1] and argv[argv.index("--tier") + 1] == "instructions":
        parser.error(f"--tier instructions: now a subcommand: {COMMAND} count [options]")
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        argv.insert(0, "ab")
    missing: list[str] = []
    for sp in _subparsers(parser).values():
        cast(_Parser, sp).missing = missing
    ns, rest = parser.parse_known_args(_glued(parser, argv))
    if rest:
        name = rest[0].split("=", 1)[0]
        if name in RENAMED:
            parser.error(f"{name}: now a subcommand: {COMMAND} {RENAMED[name]} [options]")
        if not name.startswith("-"):
            if name in COMMANDS:
                parser.error(
                    f"{name!r}: the subcommand is already {ns.command}; a subcommand is given once, first"
                )
            parser.error(f"{name!r}: not a subcommand; accepted: {', '.join(COMMANDS)}")
        owners = [c for c, sp in _subparsers(parser).items() if name in sp._option_string_actions]
        where = f"an option of {', '.join(owners)}" if owners else f"see {COMMAND} {ns.command} --help"
        parser.error(f"{name}: not an option of {ns.command} ({where})")
    if missing:
        parser.error(missing[0])
    if getattr(ns, "gate", False) and (getattr(ns, "runs", None) or MIN_PAIRS) < MIN_PAIRS:
        parser.error(
            f"--gate with --runs {ns.runs}: a verdict needs {MIN_PAIRS} paired runs, so the gate "
            f"could decide nothing; accepted --runs {MIN_PAIRS} or more"
        )
    if getattr(ns, "out", None) is not None:
        _check_out(parser, ns.out)
    if hasattr(ns, "classes"):  # --workload and --class become the workload, checked whole
        try:
            _traffic(ns)
        except workloads.TrafficError as e:
            parser.error(str(e))
    for check in (bounds.check_bounds, bounds.check_cpus):
        bad = check(ns) if hasattr(ns, "duration") else None  # the options of a run (not sweep, count)
        if bad:
            parser.error(bad)
    return ns


if __name__ == "__main__":  # scripts/tail-latency.sh --help: the standard library only
    import sys

    parse(sys.argv[1:] or ["--help"])
