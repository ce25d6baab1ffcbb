"""What a job runs: profiles, A/B arms, legs, and the interleaved schedule.

A **profile** is a wrk workload (threads, connection counts, duration, runs per arm).  An **arm** is
the bench server's ``CWIST_*`` variables; A is the baseline, B the treatment, every ratio B/A.  A
**leg** is one cell in which A and B are compared: a backend and a connection count, one per backend
(io_uring, then epoll) unless ``--backend``; when an arm sets ``CWIST_REACTOR_BACKEND`` the job has
one leg, whose name gives each arm's backend (``epoll (A) vs auto (B), c64``): comparing backends
across legs would be meaningless.  A leg's **schedule** is randomised multiple interleaved trials
(RMIT): each trial runs every arm once in an order drawn at random, so slow drifts hit all alike.

Server environment of a run = this process's environment (ambient ``CWIST_*`` settings apply to both
arms), then the arm's backend in the leg, then the arm's variables.
"""

from __future__ import annotations

import itertools
import random
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tailreactor import config as _config

from . import OUT, PROG, REPO

BACKENDS = ("io_uring", "epoll")
SIM_MAX_CONNECTIONS = 4096
"""The sim tier's most connections in a leg (``ab --tier sim``, ``validate``, a sweep's load point): one
process holds a socketpair per connection (2 file descriptors), and every profile's and grid's fit."""
SIM_MAX_DURATION_S = 60
"""The sim tier's most virtual seconds per run: a run simulates every request the server answers, about
30,000 per virtual second, at about three quarters of a second of CPU per virtual second: a minute of
virtual time is about 45 s of CPU per run, and the profiles' longest run (30 s) fits."""
WALL_MAX_DURATION_S = 3600
"""The live tier's most seconds per run (an hour; the profiles run 2 to 30 s): a job runs two arms
times ``--runs`` times its legs of them, so a longer run is a typo, not a measurement."""
#: ``count``'s defaults, here so that the command line reads them without importing the count tier.
#: The servers counted (uvloop's loop is C: its count would say little about ours).
COUNT_SERVERS = ("bench-epoll", "bench-io_uring", "asyncio")
COUNT_REQUESTS = 1000
COUNT_BASELINE = REPO / "benchmarks" / "results" / "instructions-baseline.json"


class PlanError(ValueError):
    """The job cannot be planned as asked (bad option value); the message is one line."""


class Unavailable(RuntimeError):
    """Something the job needs is not on this machine or refuses to work here (a tool, a kernel
    feature, a server command's program): exit 3, not 2; the message is one line."""


@dataclass(frozen=True)
class Profile:
    """A wrk workload; ``seed_pr_runs``: the runs per arm CWIST PR #375 used for it (by backend,
    ``"*"`` for any), which the report compares with."""

    name: str
    threads: int
    connections: tuple[int, ...]
    duration_s: int
    runs: int
    description: str
    seed_pr_runs: Mapping[str, int] | None = None


PROFILES: dict[str, Profile] = {
    # Scaled down for CI and laptops: 2 s per run, 8 runs per arm (the fewest that support a verdict,
    # stats.MIN_PAIRS); both backends in ~1.5 min.
    "quick": Profile("quick", 2, (64,), 2, 8, "wrk -t2 -c64 -d2s, 8 runs per arm"),
    # The seed PR's workloads: it ran 8 runs on io_uring and 3 on epoll (3 per cell at -t8), which
    # gives no verdict, so every profile runs the pairs a verdict needs (the report says so).
    "seed": Profile(
        "seed",
        4,
        (256,),
        30,
        8,
        "the seed PR's wrk -t4 -c256 -d30s, 8 runs per arm (the PR: 8 on io_uring, 3 on epoll)",
        seed_pr_runs={"io_uring": 8, "epoll": 3},
    ),
    "high": Profile(
        "high",
        8,
        (512, 1024),
        30,
        8,
        "the seed PR's wrk -t8 -c512/-c1024 -d30s, 8 runs per cell (the PR: 3)",
        seed_pr_runs={"*": 3},
    ),
}


@dataclass(frozen=True)
class Arm:
    """One side of the A/B: ``key`` is ``"A"`` or ``"B"``, ``env`` its environment variables."""

    key: str
    label: str
    env: Mapping[str, str] = field(default_factory=dict)

    def env_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.env.items()) or "(defaults)"

    def heading(self, sep: str = ": ") -> str:
        """``A: tail off`` in a table's heading; ``A`` alone when the arm has no label of its own."""
        return self.key if self.label == self.key else f"{self.key}{sep}{self.label}"


AB_PRESETS: dict[str, tuple[Arm, Arm]] = {
    # The seed's on/off: "off" = 3600000 us, the heuristic effectively disabled.
    "tail": (
        Arm("A", "tail off", {"CWIST_REACTOR_TAIL_US": "3600000"}),
        Arm("B", "tail on", {"CWIST_REACTOR_TAIL_US": "3500"}),
    ),
    "backend": (
        Arm("A", "epoll", {"CWIST_REACTOR_BACKEND": "epoll"}),
        Arm("B", "io_uring", {"CWIST_REACTOR_BACKEND": "io_uring"}),
    ),
    # A control: identical arms must come out with no gain and no regression on any metric.
    "aa": (Arm("A", "A", {}), Arm("B", "A'", {})),
}


def parse_assignments(text: str, *, option: str, knobs: bool = True) -> dict[str, str]:
    """``'K=V K2=V2'`` (shell quoting allowed) as a dict; :class:`PlanError` (one line, starting with
    ``option``) for a token that is not ``K=V`` or a name set twice.  ``knobs``: every name a known
    ``CWIST_*`` knob and its value valid; else (a server command's arms) any environment variable."""
    env: dict[str, str] = {}
    for token in shlex.split(text or ""):
        name, sep, value = token.partition("=")
        if not sep or not name or not (knobs or _ENV_NAME.fullmatch(name)):
            raise PlanError(f"{option}: {token!r} is not K=V (e.g. CWIST_REACTOR_TAIL_US=3500)")
        if knobs and name not in _KNOBS:
            raise PlanError(f"{option}: unknown knob {name}; known: {', '.join(_KNOBS)}")
        if name in env:
            raise PlanError(f"{option}: {name} set twice")
        if knobs and value.strip():
            try:
                _KNOBS[name].parse(value)
            except _config.ConfigError as e:
                raise PlanError(f"{option}: {e}") from None
        env[name] = value
    return env


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KNOBS = {k.name: k for k in _config.KNOBS}


def arms_for(
    ab: str | None, *, a: str | None = None, b: str | None = None, knobs: bool = True
) -> tuple[Arm, Arm]:
    """The two arms of ``--ab NAME``, or of ``--a 'K=V ...' --b 'K=V ...'`` when ``ab`` is None
    (``knobs``: as :func:`parse_assignments`)."""
    if ab is not None:
        if ab not in AB_PRESETS:
            raise PlanError(f"--ab {ab!r}: accepted {', '.join(AB_PRESETS)}")
        return AB_PRESETS[ab]
    env_a = parse_assignments(a or "", option="--a", knobs=knobs)
    env_b = parse_assignments(b or "", option="--b", knobs=knobs)
    return Arm("A", "A", env_a), Arm("B", "B", env_b)


@dataclass(frozen=True)
class Overrides:
    """Command-line choices that change a profile's legs (None: keep the profile's)."""

    backend: str | None = None
    threads: int | None = None
    connections: tuple[int, ...] | None = None
    duration_s: int | None = None
    runs: int | None = None
    pin: bool = False


@dataclass(frozen=True)
class Leg:
    """One A/B cell: ``backend`` of both arms, or None when an arm sets it (then ``arm_backends``
    holds ``(arm key, backend)``, one per arm); ``label`` names the leg instead (``peers``)."""

    index: int
    backend: str | None
    threads: int
    connections: int
    duration_s: int
    runs: int
    label: str | None = None
    arm_backends: tuple[tuple[str, str], ...] = ()

    def backend_for(self, key: str) -> str | None:
        """The backend arm ``key`` runs on in this leg (None for ``peers`` legs)."""
        return dict(self.arm_backends).get(key, self.backend)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        if self.arm_backends:
            who = " vs ".join(f"{backend} ({key})" for key, backend in self.arm_backends)
            return f"{who}, c{self.connections}"
        return f"{self.backend}, c{self.connections}"

    def wrk_args(self) -> str:
        return f"-t{self.threads} -c{self.connections} -d{self.duration_s}s"


def plan_legs(profile: Profile, arms: tuple[Arm, Arm], o: Overrides) -> list[Leg]:
    """The legs of a job in run order: backends outermost, then connection counts; one leg with
    ``arm_backends`` when an arm sets ``CWIST_REACTOR_BACKEND`` (the module docstring).
    :class:`PlanError` for a ``--backend`` both arms override, or more wrk threads than connections."""
    if o.backend is not None and o.backend not in BACKENDS:
        raise PlanError(f"--backend {o.backend!r}: accepted {', '.join(BACKENDS)}")
    if not any(_BACKEND in arm.env for arm in arms):
        return _legs(profile, o, BACKENDS if o.backend is None else (o.backend,))
    if o.backend is not None and all(_BACKEND in arm.env for arm in arms):
        raise PlanError(
            f"--backend {o.backend}: both arms set {_BACKEND}, so it would apply to neither; leave out --backend"
        )
    arm_backends = tuple((arm.key, _arm_backend(arm, o.backend or "auto")) for arm in arms)
    return _legs(profile, o, (None,), arm_backends=arm_backends)


def _legs(
    profile: Profile, o: Overrides, backends, *, label: str | None = None, arm_backends=()
) -> list[Leg]:
    """One leg per backend and connection count, in that order; ``label`` is formatted with
    ``connections``.  Pinned, wrk gets one thread unless ``o.threads`` says otherwise (it has one CPU)."""
    threads = o.threads or (1 if o.pin else profile.threads)
    counts = o.connections or profile.connections
    short = [c for c in counts if c < threads]
    if short:
        raise PlanError(f"wrk needs at least as many connections as threads: -t{threads} with -c{short[0]}")
    duration, runs = o.duration_s or profile.duration_s, o.runs or profile.runs
    return [
        Leg(i, backend, threads, c, duration, runs, label and label.format(connections=c), arm_backends)
        for i, (backend, c) in enumerate(itertools.product(backends, counts))
    ]


_BACKEND = "CWIST_REACTOR_BACKEND"


def _arm_backend(arm: Arm, fallback: str) -> str:
    """The backend ``arm`` asks for: its own value (blank means the knob's default), else ``fallback``."""
    if _BACKEND not in arm.env:
        return fallback
    knob = _config.knob(_BACKEND)
    raw = arm.env[_BACKEND]
    return knob.parse(raw) if raw.strip() else knob.default


def peer_legs(profile: Profile, o: Overrides) -> list[Leg]:
    """The legs of ``peers``: one per connection count, each running every server (as :func:`_legs`)."""
    return _legs(profile, o, [None], label="c{connections}")


def server_env(ambient: Mapping[str, str], leg: Leg, arm: Arm) -> dict[str, str]:
    """The bench server's environment for ``arm`` in ``leg`` (see the module docstring)."""
    env = dict(ambient)
    backend = leg.backend_for(arm.key)
    if backend is not None:
        env[_BACKEND] = backend
    env.update(arm.env)
    return env


def arm_knobs(env: Mapping[str, str]) -> dict[str, object]:
    """Every knob's parsed value in ``env`` (for provenance); :class:`PlanError` if one is invalid."""
    try:
        cfg = _config.load(env)
    except _config.ConfigError as e:
        raise PlanError(str(e)) from None
    return {k.name: getattr(cfg, k.attr) for k in _config.KNOBS}


def check_environment(environ: Mapping[str, str]) -> None:
    """Every ``CWIST_*`` knob in this process's environment must parse, even where an arm or the
    leg overrides it: an ignored typo would make the run look configured when it is not.
    Unknown ``CWIST_*`` names are left alone (the reference ignores them too)."""
    try:
        _config.load(environ)
    except _config.ConfigError as e:
        raise PlanError(f"environment: {e}") from None


def without_refused_io_uring(items: list, on_io_uring: list, *, asked: bool, measuring: str) -> list:
    """``items`` (legs, plans) less ``on_io_uring`` (those of them on io_uring) where the kernel refuses
    io_uring (Docker's default seccomp profile).  Unasked (each backend in turn, the default), they
    are skipped with one line naming the reason; ``asked`` for, it is a :class:`PlanError`: a
    measurement of io_uring cannot quietly become one of epoll."""
    if not on_io_uring:
        return items
    from tailreactor.backends import io_uring_refused

    refused = io_uring_refused()
    if refused is None:
        return items
    if asked:
        raise Unavailable(f"io_uring asked for but unavailable here: {refused}")
    print(f"{PROG}: io_uring skipped: {refused}; {measuring} epoll only", file=sys.stderr, flush=True)
    return [x for x in items if x not in on_io_uring]


def shuffled_schedule(keys: list[str], trials: int, *, seed: int) -> list[list[str]]:
    """``trials`` orders of ``keys``, each shuffled with one ``random.Random(seed)``."""
    rng, schedule = random.Random(seed), [list(keys) for _ in range(trials)]
    for order in schedule:
        rng.shuffle(order)
    return schedule


def rmit_schedule(trials: int, *, seed: int) -> list[list[str]]:
    """``trials`` lists, each ``["A", "B"]`` or ``["B", "A"]`` drawn with ``random.Random(seed)``."""
    return shuffled_schedule(["A", "B"], trials, seed=seed)


@dataclass(frozen=True)
class AbOptions:
    """One A/B as asked for, on either tier (``ab``, ``validate`` and the main job's answer build
    it; :mod:`tailjob.cli` from the command line, the others from one another with ``replace``).

    ``workload``: a workload's name or a :class:`~tailjob.workloads.Traffic`; ``argv``: the command
    line as given, for the records (:meth:`command` for one derived from another)."""

    out: Path
    tier: str = "wall"
    profile: str = "quick"
    threads: int | None = None
    connections: tuple[int, ...] | None = None
    duration: int | None = None
    runs: int | None = None
    workers: int | None = None
    workload: Any = "uniform"  # a name, or a workloads.Traffic (workloads imports this module)
    load: str | None = None
    rate: str | None = None
    schedule: str | None = None
    ab: str | None = None
    a: str | None = None
    b: str | None = None
    a_ref: str | None = None
    backend: str | None = None
    pin: bool = False
    server_cpus: str = "0"
    wrk_cpus: str = "1"
    no_warmup: bool = False
    seed: int = 1
    pollution_limit: float = 0.10
    probe: bool = False
    min_effect: float | None = None
    gate: bool = False
    sim_cost: str | None = None
    server_cmd: str | None = None  # a server command (tailjob.ownserver), else the bench server
    a_cmd: str | None = None
    b_cmd: str | None = None
    ready_timeout: float = 30.0  # ownserver.READY_TIMEOUT_S
    argv: tuple[str, ...] = ()

    def arms(self) -> tuple[str, tuple[Arm, Arm]]:
        """The A/B's name (the ``--ab`` preset, ``custom`` for ``--a``/``--b``, ``aref`` for ``--a-ref``
        alone, else ``tail``) and its two arms (:class:`PlanError` for ``--ab`` with ``--a``/``--b``)."""
        custom = self.a is not None or self.b is not None
        if self.ab and custom:
            raise PlanError("--ab cannot be combined with --a/--b")
        name = "custom" if custom else self.ab or ("aref" if self.a_ref is not None else "tail")
        return name, arms_for(name if name in AB_PRESETS else None, a=self.a, b=self.b)

    def command(self) -> list[str]:
        """This A/B as the command line that runs it again: ``ab`` and the options that differ from
        the defaults (for the records of an A/B derived from another: the main job's sim stage,
        ``validate``'s tiers); ``--out`` last, left out where it is the default (a report then names
        no path of the machine it ran on)."""
        out = ["ab"]
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("out", "argv") or value == f.default:
                continue
            option = "--" + f.name.replace("_", "-")
            if value is True:
                out.append(option)
            elif isinstance(value, tuple):
                out += [option, ",".join(map(str, value))]
            else:
                out += [option, str(getattr(value, "name", value))]
        return out if Path(self.out) == OUT else [*out, "--out", str(self.out)]
