"""``--tier sim --sweep``: the grid, its cells' arms, the outputs, bad input, and Dask against local processes."""

from __future__ import annotations

import json

import pytest
import tailjob_testdata  # noqa: F401  (puts scripts/ci on sys.path)

from tailjob.cli import main
from tailjob.sim import sweep

TINY = """\
name = "tiny"
backends = ["epoll"]
seeds = 8
connections = 16

[[load]]
workload = "mixed"
rate = "200"
duration = 0.5

[[load]]
workload = "uniform"
load = "open"
rate = "2000"
duration = 0.25

[[policy]]
CWIST_REACTOR_TAIL_US = [0, 3500]
"""


def _grid_file(tmp_path, text=TINY, name="grid.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_default_grid_crosses_backends_loads_and_policies_each_against_dispatch_off():
    g = sweep.load_grid("default")
    assert g.backends == ("epoll", "io_uring") and len(g.seeds) == 8
    assert {lp.workload for lp in g.loads} == {"uniform", "mixed", "slow-route", "think-time"}
    assert len(g.cells()) == len(g.backends) * len(g.loads) * len(g.policies)
    by_label = {p.label: p for p in g.policies}
    off = {"CWIST_REACTOR_TAIL_US": "0", "CWIST_REACTOR_HARVEST_US": "0"}
    # arm A is the policy off; knobs other than age-based dispatch's are set in both arms
    assert dict(by_label["TAIL_US=3500"].a) == off
    yield4 = by_label["TAIL_US=3500, both YIELD_BATCH=4"]
    assert dict(yield4.a) == {**off, "CWIST_HTTP_YIELD_BATCH": "4"}
    assert dict(yield4.b)["CWIST_HTTP_YIELD_BATCH"] == "4"
    # TAIL_US=0 is its own arm A (a control); `against` sets arm A's knobs
    assert by_label["TAIL_US=0 (A/A control)"].control
    against = by_label["TAIL_US=3500 HARVEST_US=1000 vs TAIL_US=3500"]
    assert dict(against.a) == {**off, "CWIST_REACTOR_TAIL_US": "3500"} and not against.control


def test_a_tiny_sweep_writes_report_json_heat_maps_and_a_history_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--tier", "sim", "--sweep", "--grid", str(_grid_file(tmp_path)), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "virtual time" in text.lower() and "### `mixed`, class `interactive`" in text
    names = sorted(p.name.split("-", 1)[1] for p in (out / "results").iterdir())
    assert names == [
        "tiny-sweep-mixed.png",
        "tiny-sweep-mixed.svg",
        "tiny-sweep-uniform.png",
        "tiny-sweep-uniform.svg",
        "tiny-sweep.json",
        "tiny-sweep.md",
    ]
    [js] = (out / "results").glob("*-sweep.json")
    doc = json.loads(js.read_text())
    cells = {(c["load"]["workload"], c["policy"]["label"]): c for c in doc["legs"]}
    assert len(cells) == 4
    control = cells[("uniform", "TAIL_US=0 (A/A control)")]
    assert all(
        m["ratio"] == 1.0 and m["verdict"] == "equivalent"
        for k, m in control["comparisons"].items()
        if m["needs_samples"] is None
    )
    on = cells[("mixed", "TAIL_US=3500")]
    assert on["counters"]["A"]["tail_elevations"] == 0 and on["counters"]["B"]["tail_elevations"] > 0
    assert set(on["classes"]) == {"interactive", "bulk"}
    [line] = (out / "tail-latency-sweep.jsonl").read_text().splitlines()
    hist = json.loads(line)
    assert hist["kind"] == "sweep" and hist["result"] == f"results/{js.name}"
    assert hist["cells"][0]["classes"]["interactive"]["p50"]["verdict"]


def test_local_processes_and_a_dask_local_cluster_give_the_same_result_document():
    distributed = pytest.importorskip(
        "distributed", reason="dask[distributed] (the sweep extra) not installed"
    )
    grid = sweep.parse_grid(TINY.replace("seeds = 8", "seeds = 3"), where="tiny")
    local = sweep.run_sweep(grid, processes=2)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        on_dask = sweep.run_sweep(grid, engine="dask", client=client)
    pv = {"git_commit": "x"}
    a = sweep.dumps(sweep.result_document(local, argv=["--tier", "sim", "--sweep"], provenance=pv))
    b = sweep.dumps(
        sweep.result_document(on_dask, argv=["--tier", "sim", "--sweep", "--dask"], provenance=pv)
    )
    assert a == b
    assert on_dask.runs == local.runs == 3 * 2 * 2  # seeds x loads x distinct arms (TAIL_US=0 is arm A)


BAD = [
    (
        TINY.replace("CWIST_REACTOR_TAIL_US = [0, 3500]", "CWIST_REACTOR_NOPE = [1]"),
        "unknown knob CWIST_REACTOR_NOPE; accepted: ",
    ),
    (TINY.replace("[0, 3500]", "[0, -5]"), "CWIST_REACTOR_TAIL_US = -5; accepted an integer from"),
    (
        TINY.replace("[0, 3500]", "[0, 99999999999]"),
        "CWIST_REACTOR_TAIL_US = 99999999999; accepted an integer",
    ),
    (TINY.replace('name = "tiny"', 'name = "tiny"\ncolour = "red"'), "unknown key 'colour'; accepted: name,"),
    (TINY.replace('workload = "mixed"', 'workload = "bursty"'), "workload = 'bursty'; accepted: uniform,"),
    (TINY.replace("duration = 0.5", "duration = 0"), "duration = 0; accepted virtual seconds above 0"),
    (
        TINY.replace('backends = ["epoll"]', 'backends = ["kqueue"]'),
        "backends = ['kqueue']; accepted a list of",
    ),
    (TINY.replace("seeds = 8", "seeds = 0"), "seeds = 0; accepted an integer from 1 to 64"),
    (TINY.replace('rate = "2000"', 'rate = "fast"'), "--rate 'fast': accepted"),
    (
        TINY.replace("CWIST_REACTOR_TAIL_US = [0, 3500]", "CWIST_REACTOR_BACKEND = ['epoll']"),
        "CWIST_REACTOR_BACKEND cannot be a policy knob",
    ),
    (TINY + "[[policy]]\nagainst = 3500\nCWIST_REACTOR_TAIL_US = [1]\n", "against = 3500; accepted a table"),
    ("name = [", "not TOML"),
]


@pytest.mark.parametrize("text, message", BAD)
def test_a_bad_grid_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, text, message):
    grid = _grid_file(tmp_path, text)
    out = tmp_path / "out"
    assert main(["--tier", "sim", "--sweep", "--grid", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tail_latency: error: --grid {grid}") and message in err, err
    assert err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tier", "sim", "--sweep", "--ab", "tail"], "--ab: a sweep takes its cells from --grid"),
        (
            ["--tier", "sim", "--sweep", "--workload", "mixed"],
            "--workload: a sweep takes its cells from --grid",
        ),
        (
            ["--tier", "sim", "--sweep", "--grid", "/nonexistent/grid.toml"],
            "--grid /nonexistent/grid.toml: cannot read",
        ),
        (["--tier", "sim", "--grid", "default"], "--grid applies to --tier sim --sweep"),
        (["--tier", "sim", "--dask"], "--dask applies to --tier sim --sweep"),
        (["--sweep"], "--sweep applies to --tier sim"),
    ],
)
def test_options_a_sweep_does_not_take_are_one_line_exit_2(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: ") and message in err, err
    assert err.count("\n") == 1
    assert not out.exists()
