"""tailjob: the tail-latency CI job behind ``scripts/tail-latency.sh``.

The main job's path (``scripts/tail-latency.sh`` with no arguments, the subcommand ``ab``)::

    options.parse --> cli: AbOptions --> _plan_ab: Job (legs, arms, load) --> runner.run_trials
        for each leg: design.plan(leg); warm-up, then every trial's arms in order:
                      measure.run(RunPlan) -> RunRecord; design.decide(leg) -> verdicts
    --> report, plot, history (Markdown, JSON, JSONL) --> sim.answer: replace(options, tier="sim")
    --> sim.cli.main_sim (the same A/B in virtual time) --> the answer table, both tiers side by side

The layers, each importing only from the ones above it (``tests/test_import_graph.py`` checks
it, and that there is no cycle):

1. base -- this package (:data:`PROG`, :data:`REPO`, :func:`fail`), :mod:`~tailjob.metrics` (the
   metric table: one row per compared figure), :mod:`~tailjob.stats`, :mod:`~tailjob.plan`
   (profiles, arms, legs, the schedule, :class:`~tailjob.plan.AbOptions`), :mod:`~tailjob.procstat`,
   :mod:`~tailjob.outputs` (the one writer of a job's files), :mod:`tailjob.sim.costs`;
2. tools -- what a tier runs: :mod:`~tailjob.loadgen` and :mod:`~tailjob.loadspec`,
   :mod:`~tailjob.parts` (the count's rows), :mod:`~tailjob.wrk`, :mod:`~tailjob.pooled`,
   :mod:`~tailjob.probeleg`, :mod:`~tailjob.workloads`, :mod:`~tailjob.server`,
   :mod:`~tailjob.peers`, :mod:`~tailjob.refcode` (``--a-ref``), :mod:`~tailjob.ownserver` (a server
   command instead of the bench server), :mod:`~tailjob.history`;
3. measures -- ``run(plan) -> record``: :mod:`~tailjob.measure` (wrk, the load client),
   :mod:`tailjob.sim.engine`, :mod:`~tailjob.instructions`;
4. designs -- the trial loop and what it decides: :mod:`~tailjob.runner`, :mod:`~tailjob.peersjob`,
   :mod:`~tailjob.calibrate`, :mod:`tailjob.sim.job`, :mod:`tailjob.sim.measure`,
   :mod:`tailjob.sim.grid`, :mod:`tailjob.sim.sweep`;
5. outputs -- :mod:`~tailjob.report`, :mod:`~tailjob.peersreport`, :mod:`~tailjob.plot`,
   :mod:`~tailjob.progress`, :mod:`tailjob.sim.report`, :mod:`tailjob.sim.sweepreport`,
   :mod:`~tailjob.stepsummary` (``GITHUB_STEP_SUMMARY``);
6. command line -- :mod:`~tailjob.options` (the subcommands; ``--help`` needs only the standard
   library), :mod:`~tailjob.cli` (``main``: the parsed options become records here and go no
   further), :mod:`tailjob.sim.cli`, :mod:`tailjob.sim.answer`, :mod:`tailjob.sim.validate`.
"""

import sys
from pathlib import Path

PROG = "tail_latency"
"""The job's name in its usage and its one-line errors."""

REPO = Path(__file__).resolve().parents[3]

LAYERS = (
    (
        "tailjob",
        "tailjob.metrics",
        "tailjob.stats",
        "tailjob.plan",
        "tailjob.procstat",
        "tailjob.outputs",
        "tailjob.sim.costs",
    ),
    (
        "tailjob.loadgen",
        "tailjob.loadspec",
        "tailjob.parts",
        "tailjob.wrk",
        "tailjob.pooled",
        "tailjob.probeleg",
        "tailjob.workloads",
        "tailjob.server",
        "tailjob.peers",
        "tailjob.refcode",
        "tailjob.ownserver",
        "tailjob.history",
    ),
    ("tailjob.measure", "tailjob.sim.engine", "tailjob.instructions"),
    (
        "tailjob.runner",
        "tailjob.peersjob",
        "tailjob.calibrate",
        "tailjob.sim",
        "tailjob.sim.job",
        "tailjob.sim.measure",
        "tailjob.sim.grid",
        "tailjob.sim.sweep",
    ),
    (
        "tailjob.report",
        "tailjob.peersreport",
        "tailjob.plot",
        "tailjob.progress",
        "tailjob.sim.report",
        "tailjob.sim.sweepreport",
        "tailjob.stepsummary",
    ),
    (
        "tailjob.options",
        "tailjob.cli",
        "tailjob.__main__",
        "tailjob.sim.cli",
        "tailjob.sim.answer",
        "tailjob.sim.validate",
    ),
)
"""The modules of each layer of the docstring, top (base) first."""


def fail(message: str, code: int) -> int:
    """Print the job's one-line error (``tail_latency: error: ...``) to stderr; return ``code``."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code
