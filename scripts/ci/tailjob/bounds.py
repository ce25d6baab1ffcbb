"""The bounds of a run's options, checked before anything runs: CPU lists (``--server-cpus``,
``--wrk-cpus``), connections and seconds per run on each tier.  Each check returns the one line of
bad input (exit 2) or None; :func:`tailjob.options.parse` calls them.  The standard library,
:mod:`tailjob.plan` and :mod:`tailjob.workloads` only (``--help`` runs with the system Python).
"""

from __future__ import annotations

import argparse
import os
import resource

from . import workloads
from .plan import SIM_MAX_CONNECTIONS, SIM_MAX_DURATION_S, WALL_MAX_DURATION_S

CPUS = {"server_cpus": "0", "wrk_cpus": "1"}
"""The taskset CPU lists' defaults (``--server-cpus``, ``--wrk-cpus``)."""


def cpu_list(text: str, option: str) -> str | None:
    """The one line for a CPU list ``text`` (``0``, ``0,2``, ``0-1``) that is not one, or names a CPU
    this process may not run on; None if it is good.  A range is checked by its ends against the CPUs
    that exist, never expanded past them (``0-99999999999`` would fill the memory)."""
    try:
        ranges = []
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
            if not 0 <= first <= last:
                raise ValueError(part)
            ranges.append((first, last))
    except ValueError:
        return f"{option} {text!r}: accepted a CPU list like 0 or 0,2 or 0-1"
    allowed = os.sched_getaffinity(0)
    top = max(allowed)
    missing: list[int | str] = []
    for first, last in ranges:
        missing += [c for c in range(first, min(last, top) + 1) if c not in allowed]
        beyond = max(first, top + 1)
        if last >= beyond:
            missing.append(beyond if last == beyond else f"{beyond}-{last}")
    if missing:
        shown = ", ".join(map(str, missing))
        return f"{option} {text!r}: CPUs [{shown}] are not available (available: {sorted(allowed)})"
    return None


def check_cpus(ns: argparse.Namespace) -> str | None:
    """``--server-cpus``/``--wrk-cpus``, checked whenever given, and refused where nothing is pinned
    (they would do nothing); then their defaults."""
    pinned = not ns.no_pin if ns.command == "peers" else getattr(ns, "pin", False)
    for name, default in CPUS.items():
        text, option = getattr(ns, name), "--" + name.replace("_", "-")
        if text is None:
            setattr(ns, name, default)
            continue
        bad = cpu_list(text, option)
        if bad:
            return bad
        if not pinned:
            how = {"peers": "drop --no-pin", "sim": "the sim tier pins nothing"}.get(
                "sim" if getattr(ns, "tier", None) == "sim" else ns.command, "add --pin"
            )
            return f"{option} {text}: applies when pinned; {how}, or leave out {option}"
    return None


def check_bounds(ns: argparse.Namespace) -> str | None:
    """A run's size within what each tier can do: connections and virtual seconds on the sim tier
    (``ab --tier sim``, ``validate``'s second tier), seconds per run on the live tier."""
    sim = getattr(ns, "tier", "sim") == "sim" and ns.command in ("ab", "validate")
    d = ns.duration
    if sim and d is not None and d > SIM_MAX_DURATION_S:
        return (
            f"--duration {d}s: the sim tier runs at most {SIM_MAX_DURATION_S} virtual s per run (each "
            "simulated request costs real CPU: a virtual minute is about 45 s of CPU per run); "
            f"accepted 1 to {SIM_MAX_DURATION_S}s (1m)"
        )
    if d is not None and d > WALL_MAX_DURATION_S and getattr(ns, "tier", "wall") == "wall":
        return (
            f"--duration {d}s: a live run lasts at most {WALL_MAX_DURATION_S} s, and a job runs two arms "
            f"x --runs x its legs of them; accepted 1 to {WALL_MAX_DURATION_S}s (1h)"
        )
    over = [c for c in ns.connections or () if c > SIM_MAX_CONNECTIONS]
    if sim and over:
        what, t = f"--connections {over[0]}", ns.workload
        if isinstance(t, workloads.Traffic):  # the connections are its classes'
            where = "--class" if t.source == "--class" else f"--workload {t.source}"
            what = f"{where}: the traffic's {over[0]} connections"
        return (
            f"{what}: the sim tier runs at most {SIM_MAX_CONNECTIONS} connections in a leg (a socketpair "
            f"each, in one process); accepted 1 to {SIM_MAX_CONNECTIONS}"
        )
    if not sim or ns.command == "validate":  # validate runs the A/B live first
        return check_open_files(ns)
    return None


OPEN_FILES_MARGIN = 64
"""Open files a live run needs besides one per connection: wrk's own, its threads' event loops."""
WALL_MAX_CONNECTIONS = 1_000_000
"""The live tier's most connections where the open-files limit is unlimited (each costs wrk memory)."""


def check_open_files(ns: argparse.Namespace) -> str | None:
    """Live connections: wrk opens one file per connection under this shell's soft open-files limit
    (``ulimit -n``), so a leg of more would fail with EMFILE after the server started."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limited = soft != resource.RLIM_INFINITY
    most = max(1, soft - OPEN_FILES_MARGIN) if limited else WALL_MAX_CONNECTIONS
    over = [c for c in ns.connections or () if c > most]
    if not over:
        return None
    why = (
        f"wrk opens a file per connection and {OPEN_FILES_MARGIN} of its own, and this shell may open "
        f"{soft} (ulimit -n): raise that, or use fewer connections"
        if limited
        else "a fixed bound: each connection costs wrk memory"
    )
    return (
        f"--connections {over[0]}: a live leg runs at most {most} connections ({why}); accepted 1 to {most}"
    )
