"""tailjob: the tail-latency CI job behind ``scripts/tail-latency.sh``.

The main job's path (``scripts/tail-latency.sh`` with no arguments, the subcommand ``ab``)::

    options.parse --> cli: AbOptions --> job.run_planned(_plan_ab): Job (legs, arms, load, tier)
    --> runner.run_trials: for each leg: design.plan(leg); warm-up, then every trial's arms in order:
                           measure.run(RunPlan) -> RunRecord; design.decide(leg) -> verdicts
    --> Job.finish: report, plot, history (Markdown, JSON, JSONL) --> sim.answer: tier="sim"
    --> job.run_planned(sim.cli.plan_ab) (the same A/B in virtual time, the same path)
    --> the answer table, both tiers side by side

The layers (:data:`LAYERS` names their modules), each importing only from those above it
(``tests/test_import_graph.py`` checks it, and that there is no cycle):

1. base -- the metric table, statistics, plan, the one writer of a job's files;
2. tools -- what a tier runs: load generators, servers, peers, git refs (``--a-ref``), history;
3. measures -- ``run(plan) -> record``: wall (wrk, the load client), sim, instructions;
4. designs -- the trial loop and what it decides;
5. outputs -- reports, plots, progress, the step summary;
6. command line -- bounds and options (``--help`` needs only the standard library), job (the one path a
   planned job takes, either tier), cli (the parsed options become records there and go no further).
"""

import sys
from pathlib import Path

PROG = "tail_latency"
"""The job's name in its usage and its one-line errors."""

REPO = Path(__file__).resolve().parents[3]
CHECKOUT = (REPO / "pyproject.toml").is_file()
"""Whether the job runs from a checkout (REPO holds pyproject.toml; ``pip install -e .`` too), not from
an installed wheel (there REPO is the environment's lib/)."""
OUT = REPO / "benchmarks" if CHECKOUT else Path("tailreactor-results")
"""The default ``--out``: the checkout's benchmarks/, or ./tailreactor-results where the job is installed
from a wheel (no place for results in the environment)."""
COMMAND = "scripts/tail-latency.sh" if CHECKOUT else "tailreactor-tail-latency"
"""The job's command as its user types it: the checkout's script, or the installed console script
(pyproject.toml's ``[project.scripts]``); reports and rerun lines name it (:func:`tailjob.history.command`)."""

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
        "tailjob.bounds",
        "tailjob.options",
        "tailjob.job",
        "tailjob.cli",
        "tailjob.__main__",
        "tailjob.sim.cli",
        "tailjob.sim.answer",
        "tailjob.sim.validate",
    ),
)
"""The modules of each layer, top (base) first."""


def fail(message: str, code: int) -> int:
    """Print the job's one-line error (``tail_latency: error: ...``) to stderr; return ``code``."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code
