"""The trial loop of every job (:func:`run_trials`) and its one comparison (:func:`decide`).

Per leg a :class:`Design` plans it; the loop runs a discarded warm-up, then trial after trial, each
running every arm once in a random order, through the design's :class:`tailjob.measure.Measure` (a
tier with ``map(plans, done)``, whose runs are independent given their inputs, gets a leg's runs at
once); the design decides.  Designs: :class:`ABDesign` (B against A: the live and sim A/B, the
calibration) and :class:`tailjob.peersjob.PeersDesign`.  A run that is not data stops the job with
:class:`JobError`; what makes a run suspect is a flag on its record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Protocol

from . import pooled, probeleg, refcode, stats
from .loadspec import LoadSpec
from .measure import LOAD_CLIENT, WRK, JobError, Measure, RunPlan, RunRecord, Settings  # noqa: F401
from .metrics import CLASS_METRICS, POOLED_KEYS
from .plan import Arm, Leg, arm_knobs, rmit_schedule, server_env
from .server import BenchServer, CommandServer, ServerProcess
from .workloads import CAPACITY_PATH, CAPACITY_S

Progress = Callable[[str, dict], None]
"""``progress(event, info)``: ``"run-start"`` (not from a tier's ``map``) / ``"run-end"`` (``info``:
``leg``, ``arm``, ``trial``, ``warmup`` and at the end ``record``), ``"capacity"`` (``leg``, ``arm``,
``capacity``)."""


class Design(Protocol):
    """What a job compares: how a leg is planned, each run asked of the tier, and the leg decided."""

    @property
    def measure(self) -> Measure:
        """The tier that measures each run."""

    def plan(self, leg: Leg, notify: Progress):
        """The leg's result so far: ``schedule`` (per trial, the arm keys in run order), ``runs`` ([])."""

    def arm(self, key: str):
        """The arm (or peer) named ``key``, for progress."""

    def warmup_arm(self, lr) -> str:
        """The arm key of the leg's warm-up run."""

    def run_plan(self, lr, key: str, *, trial: int, position: int, warmup: bool) -> RunPlan:
        """The tier's plan of one run."""

    def decide(self, lr) -> None:
        """Fill in the leg's comparisons from ``lr.runs``."""


def run_trials(
    legs: list[Leg],
    design: Design,
    settings: Settings,
    *,
    progress: Progress | None = None,
    into: list | None = None,
) -> list:
    """Run every leg of ``design`` in order (see the module docstring) and return their results.
    ``into``: the caller's list, which gets each leg's result as soon as it is planned and each run's
    record as it ends: a job stopped by a failed run or a signal keeps the runs it finished, the leg
    it stopped in decided on those."""
    notify = progress or (lambda event, info: None)
    results = [] if into is None else into
    for leg in legs:
        lr = design.plan(leg, notify)
        results.append(lr)
        try:
            _run_leg(design, settings, lr, notify)
        except BaseException:
            if into is not None and lr.runs:  # kept: decided on the runs it finished
                design.decide(lr)
            raise
        design.decide(lr)
    return results


def _run_leg(design: Design, settings: Settings, lr, notify: Progress) -> None:
    """The leg's warm-up and trials, each run's record appended to ``lr.runs`` as it ends (a tier's
    ``map`` runs them at once; they join in the order of the plans)."""
    order = ([(-1, 0, design.warmup_arm(lr), True)] if settings.warmup else []) + [
        (t, pos, key, False) for t, keys in enumerate(lr.schedule) for pos, key in enumerate(keys)
    ]
    infos = [{"leg": lr.leg, "arm": design.arm(k), "trial": t, "warmup": w} for t, _, k, w in order]
    runs_at_once = getattr(design.measure, "map", None)  # a tier whose runs are independent
    if runs_at_once is not None:
        plans = [design.run_plan(lr, k, trial=t, position=p, warmup=w) for t, p, k, w in order]
        ended: dict[int, RunRecord] = {}

        def done(i: int, record: RunRecord) -> None:
            ended[i] = record
            notify("run-end", {**infos[i], "record": record})

        try:
            runs_at_once(plans, done)
        finally:
            lr.runs += [ended[i] for i in sorted(ended)]
        return
    for info, (trial, pos, key, warmup) in zip(infos, order):
        notify("run-start", info)
        plan = design.run_plan(lr, key, trial=trial, position=pos, warmup=warmup)
        record = design.measure.run(plan)
        lr.runs.append(record)
        notify("run-end", {**info, "record": record})


@dataclass
class LegResult:
    """A leg's runs (warm-up included, marked), its per-metric comparisons and,
    with ``--probe``, :func:`tailjob.probeleg.summarize` of its runs."""

    leg: Leg
    arms: tuple[Arm, Arm]
    env: dict  # arm key -> the CWIST_* variables the server saw
    knobs: dict  # arm key -> every knob's parsed value
    schedule: list[list[str]]
    runs: list[RunRecord]
    comparisons: list[stats.Comparison] = field(default_factory=list)
    probe: dict | None = None
    # With the load client (Settings.load): the capacity run (for a rate like 0.7x), the spec
    # every run of the leg got, and per class the comparisons of CLASS_METRICS.
    capacity: dict | None = None
    load_spec: dict | None = None
    class_comparisons: dict[str, list[stats.Comparison]] = field(default_factory=dict)
    run_env: dict = field(default_factory=dict, repr=False)  # arm key -> the server's whole environment
    spec: LoadSpec | None = field(default=None, repr=False)  # the load client's spec (load_spec as given)

    def measured(self, arm: str | None = None) -> list[RunRecord]:
        return [r for r in self.runs if not r.warmup and (arm is None or r.arm == arm)]

    def backends(self) -> dict[str, str | None]:
        """Each arm's backend in this leg, as asked (a run's ``backend`` is what the server reported)."""
        return {a.key: self.leg.backend_for(a.key) for a in self.arms}

    def as_dict(self) -> dict:
        return {
            "leg": asdict(self.leg),
            "name": self.leg.name,
            "backends": self.backends(),
            "arms": _arms_dict(self.arms),
            "env": self.env,
            "knobs": self.knobs,
            "schedule": self.schedule,
            "runs": [r.as_dict() for r in self.runs],
            "comparisons": [c.as_dict() for c in self.comparisons],
            "probe": self.probe,
            "capacity": self.capacity,
            "load_spec": self.load_spec,
            "class_comparisons": {k: [c.as_dict() for c in v] for k, v in self.class_comparisons.items()},
        }


def _arms_dict(arms: tuple[Arm, Arm]) -> dict:
    return {a.key: {"label": a.label, "env": dict(a.env)} for a in arms}


def compare_leg(
    runs: Sequence[RunRecord],
    *,
    seed: int,
    min_effect: float | None = None,
    resamples: int = stats.RESAMPLES,
    klass: str | None = None,
) -> list[stats.Comparison]:
    """Per-metric comparison of arm B against arm A, runs paired by trial: :data:`POOLED_KEYS` on
    the arms' merged histograms when every paired run has one (:func:`tailjob.pooled.compare_pooled`),
    else on the medians of the runs' values.  ``klass``: that client class's figures
    (``RunRecord.classes``) on :data:`tailjob.metrics.CLASS_METRICS` instead of the run's."""
    by_trial: dict[int, dict[str, RunRecord]] = {}
    for r in runs:
        if not r.warmup:
            by_trial.setdefault(r.trial, {})[r.arm] = r
    trials = [t for t in sorted(by_trial) if {"A", "B"} <= set(by_trial[t])]
    arms = [[by_trial[t][arm] for t in trials] for arm in "AB"]  # A's runs, B's runs, paired by trial

    def figures(r: RunRecord) -> dict:
        return r.metrics if klass is None else (r.classes or {}).get(klass, {})

    def run_samples(r: RunRecord, m: stats.Metric) -> int | None:
        """The samples at or beyond percentile ``m``'s rank in run ``r`` (None: not recorded)."""
        if klass is not None:
            return figures(r).get(f"{m.key}_samples")
        return next(
            (q["samples"] for q in (r.wrk or {}).get("percentiles", ()) if q["p"] == m.percentile), None
        )

    compared = stats.METRICS if klass is None else [stats.metric(k) for k in CLASS_METRICS]
    hist = [[(r.wrk if klass is None else figures(r)).get("histogram") for r in side] for side in arms]
    poolable = bool(trials) and all(h is not None for side in hist for h in side)
    out = []
    for m in compared:
        if poolable and m.key in POOLED_KEYS:
            out.append(pooled.compare_pooled(m, *hist, seed=seed, min_effect=min_effect, resamples=resamples))
            continue
        a, b = ([figures(r).get(m.key) for r in side] for side in arms)
        c = stats.compare(m, a, b, seed=seed, min_effect=min_effect, resamples=resamples)
        out.append(_unbounded(c, [[run_samples(r, m) for r in side] for side in arms]))
    return out


def decide(
    runs: Sequence[RunRecord], classes, *, seed: int, min_effect: float | None
) -> tuple[list[stats.Comparison], dict[str, list[stats.Comparison]]]:
    """A leg's verdicts on either tier (:func:`compare_leg`): the whole run's, and those of each client
    class named in ``classes``."""
    whole = compare_leg(runs, seed=seed, min_effect=min_effect)
    return whole, {k: compare_leg(runs, seed=seed, min_effect=min_effect, klass=k) for k in classes}


def _unbounded(c: stats.Comparison, samples: list[list[int | None]]) -> stats.Comparison:
    """``c`` as ``n/a (needs N samples)`` when the median run of an arm has fewer than
    :func:`tailjob.stats.samples_to_bound` samples at or beyond the percentile's rank: the runs'
    own percentiles, whose median it compares, cannot be bounded."""
    if c.metric.percentile is None or not samples[0] or any(s is None for arm in samples for s in arm):
        return c
    need = stats.samples_to_bound(c.metric.percentile)
    sa, sb = (round(stats.median([s for s in arm if s is not None])) for arm in samples)  # none is None
    if min(sa, sb) >= need:
        return c
    return replace(
        c,
        ratio=None,
        ci=None,
        verdict=stats.NO_VERDICT,
        detectable=None,
        pairs_needed=None,
        reason=f"needs {need} samples at or beyond its rank; the median run of A has {sa}, of B {sb}",
        samples_a=sa,
        samples_b=sb,
        needs_samples=need,
    )


def _cwist_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith("CWIST_")}


def _expected_backend(env: Mapping[str, str]) -> str | None:
    name = env.get("CWIST_REACTOR_BACKEND", "").strip()
    return name if name and name != "auto" else None


@dataclass
class ABDesign:
    """An A/B of the bench server, or of the server command(s) of ``settings.commands``: ``arms``
    under ``settings``, knobs over ``ambient``, measured by ``tier`` (None: :data:`WRK`, or
    :data:`LOAD_CLIENT` with ``settings.load``, whose relative rate is resolved per leg by
    :meth:`capacity`).  ``code`` (``--a-ref``): per arm key, the ``reference/`` its server imports
    :mod:`tailreactor` from (:func:`tailjob.refcode.server_env`); a server that imported another
    makes the run a :class:`JobError`."""

    arms: tuple[Arm, Arm]
    settings: Settings
    ambient: Mapping[str, str]
    tier: Measure | None = None
    code: Mapping[str, str] | None = None

    @property
    def measure(self) -> Measure:
        if self.tier is not None:
            return self.tier
        return WRK if self.settings.load is None else LOAD_CLIENT

    def arm(self, key: str) -> Arm:
        return next(a for a in self.arms if a.key == key)

    def warmup_arm(self, lr: LegResult) -> str:
        return self.arms[0].key

    def plan(self, leg: Leg, notify: Progress) -> LegResult:
        s, load = self.settings, self.settings.load
        envs = {a.key: server_env(self.ambient, leg, a) for a in self.arms}
        for a in self.arms:  # what the workload needs of the server, unless an arm says otherwise
            envs[a.key].update(
                {k: v for k, v in (load.server_env() if load else {}).items() if k not in a.env}
            )
            if s.probe_dir is not None:  # the per-run file is added by the tier
                envs[a.key]["CWIST_LATENCY_PROBE"] = "1"
            if self.code is not None:
                envs[a.key] = refcode.server_env(envs[a.key], self.code[a.key])
        own = s.commands is not None  # a server command: its knobs are the arm's variables, unchecked
        lr = LegResult(
            leg=leg,
            arms=self.arms,
            env={a.key: dict(a.env) if own else _cwist_env(envs[a.key]) for a in self.arms},
            knobs={k: {} if own else arm_knobs(e) for k, e in envs.items()},
            schedule=rmit_schedule(leg.runs, seed=s.seed + leg.index),
            runs=[],
            run_env=envs,
        )
        if load is not None:
            if load.relative:
                lr.capacity = self.capacity(lr)
                notify("capacity", {"leg": leg, "arm": self.arms[0], "capacity": lr.capacity})
            spec = load.spec(
                leg, capacity_rps=lr.capacity["rps"] if lr.capacity else None, seed=s.seed + leg.index
            )
            lr.load_spec = asdict(spec)
            lr.spec = spec
        return lr

    def capacity(self, lr: LegResult) -> dict:
        """The closed-loop capacity of arm A in ``lr``'s leg, for a rate like ``0.7x``: the measure's
        own (``capacity(plan) -> dict``, a virtual-time tier's), else a :data:`CAPACITY_S` s wrk run."""
        key = self.arms[0].key
        short = replace(self, settings=replace(self.settings, probe_dir=None))
        leg = replace(lr.leg, duration_s=CAPACITY_S)
        plan = replace(
            short.run_plan(lr, key, trial=-1, position=0, warmup=True, leg=leg), path=CAPACITY_PATH
        )
        own = getattr(self.measure, "capacity", None)
        if own is not None:
            return {"arm": key, **own(plan)}
        r = WRK.run(plan)
        return {"arm": key, "wrk_argv": r.wrk_argv, "rps": r.metrics["rps"], "flags": r.flags}

    def run_plan(
        self, lr: LegResult, key: str, *, trial: int, position: int, warmup: bool, leg: Leg | None = None
    ) -> RunPlan:
        s, env = self.settings, lr.run_env[key]
        return RunPlan(
            leg=leg or lr.leg,
            arm=key,
            env=env,
            settings=s,
            trial=trial,
            position=position,
            warmup=warmup,
            load=lr.spec,
            where=f"{lr.leg.name}, arm {key}",
            backend=None if s.commands else _expected_backend(env),
            server=lambda e: self._server(key, e, lr),
            code=self.code[key] if self.code is not None else None,
        )

    def _server(self, key: str, env: Mapping[str, str], lr: LegResult) -> ServerProcess:
        """Arm ``key``'s server, not yet started: its server command, or the bench server."""
        s = self.settings
        if s.commands is not None:
            path = lr.spec.classes[0].path if lr.spec is not None else "/"  # what the client asks first
            return CommandServer(
                s.commands[key],
                env,
                path=path,
                host=s.host,
                cpus=s.server_cpus,
                start_timeout_s=s.ready_timeout_s,
            )
        return BenchServer(
            env,
            host=s.host,
            workers=s.workers,
            cpus=s.server_cpus,
            module=s.server_module,
            report_code=self.code is not None,
        )

    def decide(self, lr: LegResult) -> None:
        s = self.settings
        classes = [c["name"] for c in lr.load_spec["classes"]] if lr.load_spec is not None else []
        lr.comparisons, lr.class_comparisons = decide(lr.runs, classes, seed=s.seed, min_effect=s.min_effect)
        if s.probe_dir is not None:
            lr.probe = probeleg.summarize(lr.runs)


def run_job(
    legs: list[Leg],
    arms: tuple[Arm, Arm],
    settings: Settings,
    *,
    ambient: Mapping[str, str],
    progress: Progress | None = None,
    tier: Measure | None = None,
) -> list[LegResult]:
    """The A/B of ``arms`` on every leg (:class:`ABDesign` in :func:`run_trials`)."""
    return run_trials(legs, ABDesign(arms, settings, ambient, tier), settings, progress=progress)


@dataclass
class JobResult:
    """Everything a job produced, for the report, plot and history.  ``ab``: the preset, ``custom``
    or ``aref`` (``--a-ref`` alone); ``a_ref``: with ``--a-ref``, ``{"ref": REF, "commit": SHA}``;
    ``partial``: why a job stopped before its last run, and after how many (None: it finished)."""

    argv: list[str]
    profile: str
    ab: str
    arms: tuple[Arm, Arm]
    settings: Settings
    legs: list[LegResult]
    provenance: dict
    started_at: str
    finished_at: str
    a_ref: dict | None = None
    partial: str | None = None

    def verdicts(self) -> list[str]:
        return [
            c.verdict
            for lr in self.legs
            for c in [*lr.comparisons, *(c for cs in lr.class_comparisons.values() for c in cs)]
        ]

    def as_dict(self) -> dict:
        """Every field in its order, the legs last; arms, settings and legs as JSON."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "legs"}
        out.update(arms=_arms_dict(self.arms), settings=asdict(self.settings))
        return {**out, "legs": [lr.as_dict() for lr in self.legs]}
