"""Your own server under the job: ``--server-cmd``, ``--a-cmd``/``--b-cmd``, ``--ready-timeout``.

``--server-cmd 'CMD ... {port}'``: both arms run one command and differ by environment variables
(``--a``/``--b``, any variables, not only ``CWIST_*``) or not at all (``--ab aa``);
``--a-cmd``/``--b-cmd``: the arms differ by command (two builds of one server).  The job puts a free
port where ``{port}`` is and starts the command for every run (:class:`tailjob.server.CommandServer`);
what only the project's own server has is refused in one line (:func:`refused`: the job's one table
of options refused where they were given).  Only the command line (:mod:`tailjob.options`,
:mod:`tailjob.cli`) calls this; below it the commands travel in :attr:`tailjob.measure.Settings.commands`.  Docs: docs/en/own-server.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
from dataclasses import replace

from .plan import (
    AB_PRESETS,
    AbOptions,
    Arm,
    Leg,
    Overrides,
    PlanError,
    Profile,
    Unavailable,
    arms_for,
    peer_legs,
)

READY_TIMEOUT_S = 30.0
"""How long a server command has, by default, to answer its first request."""
READY_TIMEOUT_MAX_S = 600.0
"""The most ``--ready-timeout`` takes: a server that has not answered in ten minutes is not starting
(``inf`` would wait for ever)."""

#: Printed once by ``calibrate K --server-cmd``: what its slowdown legs ask of the server.
CALIBRATE_NOTE = (
    "calibrate with a server command: the slowdown legs set CWIST_BENCH_DELAY_US (us) in arm B, "
    "which your server must spend as CPU on every request, as the bench server does; a server that "
    "ignores it detects nothing (CPU/request B/A near 1 in the table)"
)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= READY_TIMEOUT_MAX_S:  # not nan, not inf
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted a positive number of seconds up to {READY_TIMEOUT_MAX_S:g}, e.g. 30 or 2.5"
        )
    return value


def add_server_options(parser: argparse.ArgumentParser, *, two_builds: bool = True) -> None:
    """The options of a server command (an A/B or a calibration of the live tier); ``two_builds``:
    ``--a-cmd``/``--b-cmd`` too (an A/B's; a calibration runs one server)."""
    g = parser.add_argument_group(
        "your own server (instead of the bench server; docs/en/own-server.md)",
        "The job puts a free port where {port} is, starts the command for every run, and waits "
        "until it answers one request of the workload's path. The command is split like a shell "
        "line and run without a shell (for pipes or cd: sh -c '...').",
    )
    g.add_argument(
        "--server-cmd",
        metavar="'CMD ... {port}'",
        help=(
            "both arms run this server; they differ by --a/--b 'NAME=VALUE ...' (any environment "
            "variables), or not at all with --ab aa"
            if two_builds
            else "the server the calibration runs in every arm, in place of the bench server"
        ),
    )
    if two_builds:
        g.add_argument(
            "--a-cmd", metavar="'CMD ... {port}'", help="arm A's server (with --b-cmd: two builds)"
        )
        g.add_argument("--b-cmd", metavar="'CMD ... {port}'", help="arm B's server (with --a-cmd)")
    g.add_argument(
        "--ready-timeout",
        type=_seconds,
        default=READY_TIMEOUT_S,
        metavar="S",
        help="seconds a server command has to answer its first request, else exit 3 "
        f"({READY_TIMEOUT_S:g}; at most {READY_TIMEOUT_MAX_S:g})",
    )


def given(args: AbOptions | argparse.Namespace) -> bool:
    return any(getattr(args, name, None) is not None for name in ("server_cmd", "a_cmd", "b_cmd"))


_SIM = (
    ": the sim tier runs one reactor in virtual time, with no processes to pin or count, no wrk "
    "threads, no probe files; leave it out or use --tier wall"
)


def refused(args: argparse.Namespace) -> str | None:
    """The one line for the first option that cannot apply where it was given (None: all apply):
    what only the bench server has, asked of a server command; what means processes on a machine,
    asked of the sim tier; ``--sim-cost`` off it."""
    v = vars(args).get
    own, sim = given(args), v("tier") == "sim"
    cmd = "--server-cmd" if v("server_cmd") is not None else "--a-cmd/--b-cmd"
    bench = (
        f", not a server command's ({cmd}): leave it out, or leave out {cmd} "
        "(a server command runs on --tier wall; its arms differ by --a/--b or --a-cmd/--b-cmd)"
    )
    timeout = v("ready_timeout", READY_TIMEOUT_S)
    table = (
        (own and sim, "--tier sim simulates the project's own reactor" + bench),
        (own and v("probe"), "--probe reads the bench server's latency probe" + bench),
        (own and v("a_ref") is not None, "--a-ref runs the project's code of a git ref" + bench),
        (own and v("backend") is not None, "--backend is the bench server's" + bench),
        (own and v("workers") is not None, "--workers is the bench server's" + bench),
        (own and v("ab") in ("tail", "backend"), f"--ab {v('ab')} sets CWIST_* knobs" + bench),
        (
            not own and timeout != READY_TIMEOUT_S,
            f"--ready-timeout {timeout:g} applies to a server command: give --server-cmd or --a-cmd/--b-cmd",
        ),
        (sim and v("pin"), "--pin" + _SIM),
        (sim and v("workers"), f"--workers {v('workers')}" + _SIM),
        (sim and v("threads"), f"--threads {v('threads')}" + _SIM),
        (sim and v("probe"), "--probe" + _SIM),
        (v("tier") == "wall" and v("sim_cost") is not None, "--sim-cost applies to --tier sim"),
    )
    return next((line for bad, line in table if bad), None)


def commands(args: AbOptions | argparse.Namespace) -> dict[str, str] | None:
    """Per arm key, the command its server runs (None: the bench server); :class:`PlanError` for a bad
    combination, a command without ``{port}`` or with unbalanced quotes, :class:`Unavailable` when
    its program is not found."""
    if not given(args):
        return None
    both, a, b = args.server_cmd, getattr(args, "a_cmd", None), getattr(args, "b_cmd", None)
    if both is not None and (a is not None or b is not None):
        raise PlanError(
            "--server-cmd runs both arms: leave out --a-cmd/--b-cmd, or give both of them instead"
        )
    if both is None and (a is None or b is None):
        raise PlanError(f"--{'b' if b is None else 'a'}-cmd missing: --a-cmd and --b-cmd go together")
    out: dict[str, str] = {"A": both or a or "", "B": both or b or ""}
    for key, cmd in out.items():
        option = "--server-cmd" if both is not None else f"--{key.lower()}-cmd"
        try:
            argv = shlex.split(cmd)
        except ValueError as e:
            raise PlanError(f"{option} {cmd!r}: {e}; accepted a command as a shell would split it") from None
        if "{port}" not in cmd:
            raise PlanError(
                f"{option} {cmd!r}: no {{port}} in it; the job chooses a free port and puts it where "
                "{port} is, e.g. 'myserver --listen 127.0.0.1:{port}'"
            )
        if argv and os.sep in argv[0] and os.path.isfile(argv[0]) and not os.access(argv[0], os.X_OK):
            raise Unavailable(
                f"{option}: {argv[0]} is not executable "
                f"(chmod +x {shlex.quote(argv[0])}, or run it with its interpreter)"
            )
        if not argv or shutil.which(argv[0]) is None:
            raise Unavailable(f"{option}: {argv[0]} not found (not an executable file, not on PATH)")
    return out


def arms(args: AbOptions | argparse.Namespace, cmds: dict[str, str]) -> tuple[str, tuple[Arm, Arm]]:
    """The A/B's name and arms for a server command: ``--ab aa``, or ``--a``/``--b`` with any
    ``NAME=VALUE`` variables; with ``--a-cmd``/``--b-cmd`` the arms may set none."""
    custom = args.a is not None or args.b is not None
    if args.ab is not None and custom:
        raise PlanError("--ab cannot be combined with --a/--b")
    if args.ab is not None:
        return args.ab, AB_PRESETS[args.ab]
    if not custom and cmds["A"] == cmds["B"]:
        given = (
            "--server-cmd runs both arms"
            if getattr(args, "server_cmd", None) is not None
            else "--a-cmd and --b-cmd are the same command"
        )
        raise PlanError(
            f"{given}: say how the arms differ with --a/--b 'NAME=VALUE ...', or "
            "give --ab aa for an A/A control"
        )
    return "custom", arms_for(None, a=args.a, b=args.b, knobs=False)


def legs(profile: Profile, o: Overrides) -> list[Leg]:
    """One leg per connection count, named ``server command, c<N>`` (a server command has no backend)."""
    return [replace(leg, label=f"server command, c{leg.connections}") for leg in peer_legs(profile, o)]


def check_workload(server_env: dict[str, str], workload: str) -> None:
    """A workload that needs the bench server's own routes (a class with a service cost) is refused."""
    if server_env:
        raise PlanError(
            f"--workload {workload}: its classes request the bench server's service route "
            f"({', '.join(server_env)}), which a server command does not have; use a traffic "
            "without service_us, e.g. --workload uniform"
        )
