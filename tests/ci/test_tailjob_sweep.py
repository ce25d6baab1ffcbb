"""``scripts/tail-latency.sh sweep``: the grid, its cells' arms, the outputs, bad input, and Dask against local processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from tailjob_testdata import ROOT, SMALL_TRAFFIC  # (puts scripts/ci on sys.path)

from tailjob import workloads
from tailjob.cli import main
from tailjob.outputs import dumps
from tailjob.sim import sweep
from tailjob.sim.grid import load_grid, load_server_env, parse_grid

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
    g = load_grid("default")
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
    assert main(["sweep", "--grid", str(_grid_file(tmp_path)), "--out", str(out)]) == 0
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
    assert (hist["tier"], hist["kind"], hist["result"]) == ("sim", "sweep", f"results/{js.name}")
    assert hist["cells"][0]["classes"]["interactive"]["metrics"]["p50"]["verdict"]


def test_local_processes_and_a_dask_local_cluster_give_the_same_result_document():
    distributed = pytest.importorskip(
        "distributed", reason="dask[distributed] (the sweep extra) not installed"
    )
    grid = parse_grid(TINY.replace("seeds = 8", "seeds = 3"), where="tiny")
    local = sweep.run_sweep(grid, processes=2)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        on_dask = sweep.run_sweep(grid, engine="dask", client=client)
    pv = {"git_commit": "x"}
    a = dumps(sweep.result_document(local, argv=["--tier", "sim", "--sweep"], provenance=pv))
    b = dumps(sweep.result_document(on_dask, argv=["--tier", "sim", "--sweep", "--dask"], provenance=pv))
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
    assert main(["sweep", "--grid", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tail_latency: error: --grid {grid}") and message in err, err
    assert err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sweep", "--ab", "tail"], "--ab: not an option of sweep (an option of ab, validate)"),
        (
            ["sweep", "--class", "name=a connections=1 loop=closed"],
            "--class: not an option of sweep (an option of ab, validate)",
        ),
        (["sweep", "--workload", "mixed"], "--workload: not an option of sweep (an option of ab, validate)"),
        (
            ["sweep", "--grid", "/nonexistent/grid.toml"],
            "--grid /nonexistent/grid.toml: no such file (/nonexistent/grid.toml); accepted 'default' or a TOML",
        ),
        (["sweep", "--grid", "/"], "--grid /: cannot read it (IsADirectoryError"),
        (["--tier", "sim", "--grid", "default"], "--grid: not an option of ab (an option of sweep)"),
        (["--tier", "sim", "--dask"], "--dask: not an option of ab (an option of sweep)"),
        (["--tier", "sim", "--sweep"], "--sweep: now a subcommand: scripts/tail-latency.sh sweep"),
    ],
)
def test_options_a_sweep_does_not_take_are_one_line_exit_2(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: ") and message in err, err
    assert err.count("\n") == 1
    assert not out.exists()


def test_a_grid_file_that_does_not_exist_is_one_line_naming_it_where_the_user_is(tmp_path):
    """As the user ran it: the wrapper, from their directory, a relative file (as --workload FILE says it)."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "tail-latency.sh"), "sweep", "--grid", "missing.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    line = (
        f"tail_latency: error: --grid missing.toml: no such file ({tmp_path / 'missing.toml'}); "
        "accepted 'default' or a TOML grid file"
    )
    assert (done.returncode, done.stderr.splitlines()) == (2, [line]), done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("wheel", [False, True], ids=["checkout", "installed"])
def test_dask_missing_is_one_line_naming_the_pip_install_and_exit_3(wheel, monkeypatch, tmp_path, capsys):
    # the environment lacks the sweep extra: exit 3, and the pip install that brings it, in a checkout
    # (editable) or installed from a wheel (the distribution's extra)
    from tailjob_testdata import installed_from_a_wheel

    from tailreactor.extras import install_command

    if wheel:
        installed_from_a_wheel(monkeypatch)
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed: ModuleNotFoundError
    out = tmp_path / "out"
    assert main(["sweep", "--dask", "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert (
        err.startswith("tail_latency: error: --dask: dask[distributed] is not installed")
        and err.count("\n") == 1
    )
    assert install_command("sweep") in err, err
    assert ("pip install 'tailreactor[sweep]'" in err) == wheel
    assert not out.exists()


# --- a user's own traffic as a load point ----------------------------------------------------------
EXAMPLE = ROOT / "scripts" / "ci" / "workloads" / "example.toml"


OWN = """\
name = "own"
backends = ["epoll"]
seeds = 4
connections = 64

[[load]]
workload = "mixed"
rate = "200"
duration = 0.25

[[load]]
workload = "{example}"
duration = 0.25

[[load]]
name = "pasted"
duration = 0.25
{pasted}

[[policy]]
CWIST_REACTOR_TAIL_US = [3500]
"""


def _pasted(text: str) -> str:
    """A traffic file's tables as a load point's inline classes: ``[NAME]`` becomes ``[load.class.NAME]``."""
    return text.replace("\n[", "\n[load.class.")


def test_a_load_point_names_a_traffic_file_relative_to_the_grid_or_gives_its_classes_inline(tmp_path):
    (tmp_path / "traffic.toml").write_text(SMALL_TRAFFIC)
    grid = tmp_path / "grids" / "g.toml"
    grid.parent.mkdir()
    text = TINY.split("[[load]]")[0] + (
        '[[load]]\nworkload = "../traffic.toml"\nduration = 0.25\n\n'
        f'[[load]]\nname = "inline"\nduration = 0.25\n{_pasted(chr(10) + SMALL_TRAFFIC)}\n'
        "[[policy]]\nCWIST_REACTOR_TAIL_US = [3500]\n"
    )
    grid.write_text(text)
    g = load_grid(str(grid))
    from_file, inline = g.loads
    own = workloads.read_traffic(tmp_path / "traffic.toml")
    assert from_file.workload.classes == inline.workload.classes == own.classes
    assert [c.name for c in inline.workload.classes] == ["batch", "web"]  # in the order written
    assert from_file.name == "traffic.toml" and inline.name == "inline"
    assert from_file.connections == inline.connections == 8  # the classes', not the grid's 16
    doc = from_file.as_dict()
    assert doc["workload"] == "traffic.toml" and doc["label"] == "traffic.toml c8"
    assert doc["traffic"]["source"] == "../traffic.toml"  # as the grid says it, not this machine's path
    assert [c["name"] for c in doc["traffic"]["classes"]] == ["batch", "web"]
    assert inline.as_dict()["traffic"]["source"] == "inline"
    assert doc["load"] is doc["rate"] is doc["schedule"] is None  # each class says its own
    # the service route is set for both arms of every cell, as for --workload FILE.toml
    assert load_server_env(from_file) == {"CWIST_BENCH_SERVICE_ROUTE": "1"}


def test_a_traffic_load_point_sweeps_like_the_named_workload_it_describes(tmp_path, capsys):
    grid = _grid_file(tmp_path, OWN.format(example=EXAMPLE, pasted=_pasted(EXAMPLE.read_text())))
    out = tmp_path / "out"
    assert main(["sweep", "--grid", str(grid), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for name in ("example.toml", "pasted"):
        assert f"### `{name}`, class `interactive`" in text and f"### `{name}`, class `bulk`" in text
    assert f"traffic file `{EXAMPLE}`" in text and "classes inline" in text
    assert "Capacities (req/s, closed loop): none measured" in text  # no rate is relative here
    assert "interactive: 8 connections, open loop at 200 req/s, poisson, 20 us of service per request" in text
    names = sorted(p.name.split("-", 1)[1] for p in (out / "results").iterdir())
    assert names == sorted(
        [f"own-sweep-{w}.{ext}" for w in ("mixed", "example.toml", "pasted") for ext in ("png", "svg")]
        + ["own-sweep.json", "own-sweep.md"]
    )
    [js] = (out / "results").glob("*-sweep.json")
    doc = json.loads(js.read_text())
    cells = {c["load"]["workload"]: c for c in doc["legs"]}
    assert set(cells) == {"mixed", "example.toml", "pasted"}
    assert cells["example.toml"]["load"]["traffic"]["source"] == str(EXAMPLE)
    assert cells["example.toml"]["load"]["label"] == "example.toml c24"
    # the same traffic, named, from its file or pasted inline: the same per-class B/A, interval, verdict
    mixed = cells["mixed"]["classes"]
    assert set(mixed) == {"interactive", "bulk"}
    assert cells["example.toml"]["classes"] == cells["pasted"]["classes"] == mixed
    assert cells["example.toml"]["counters"]["B"]["tail_elevations"] > 0
    [line] = (out / "tail-latency-sweep.jsonl").read_text().splitlines()
    loads = [c["load"] for c in json.loads(line)["cells"]]
    assert loads == ["mixed open 200/s c64", "example.toml c24", "pasted c24"]


def test_a_traffic_rate_relative_to_capacity_is_of_the_load_points_capacity():
    grid = parse_grid(
        'name = "rel"\nbackends = ["epoll"]\nseeds = 2\n\n[[load]]\nname = "rel"\nduration = 0.25\n'
        + _pasted("\n" + SMALL_TRAFFIC.replace("rate = 1000", 'rate = "0.5x"'))
        + "\n[[policy]]\nCWIST_REACTOR_TAIL_US = [0]\n",
        where="rel",
    )
    result = sweep.run_sweep(grid, processes=2)
    [lp] = grid.loads
    cap = result.capacities[("epoll", lp)]
    assert cap and cap > 0
    [cell] = result.cells
    assert cell.leg.capacity["rps"] == cap
    for run in cell.leg.measured():
        assert run.classes["web"]["offered_rps"] == pytest.approx(0.5 * cap, rel=0.02)
        assert run.classes["batch"]["offered_rps"] is None  # closed loop: no rate


_TRAFFIC_HEAD = (
    'name = "t"\nbackends = ["epoll"]\nseeds = 2\n\n[[load]]\nworkload = "mixed"\nduration = 0.25\n\n'
)
_POLICY = "\n[[policy]]\nCWIST_REACTOR_TAIL_US = [3500]\n"
_WEB = '[load.class.web]\nconnections = 4\nloop = "open"\nrate = 100\n'

BAD_TRAFFIC = [
    (
        '[[load]]\nworkload = "nope.toml"\n',
        "[[load]] 2: workload = 'nope.toml': no such file (",
    ),
    (
        '[[load]]\nworkload = "bad.toml"\n',
        "[[load]] 2: workload = 'bad.toml': class 'bulk': depth = 0: accepted an integer from 1 to 1024",
    ),
    (
        '[[load]]\nname = "w"\n' + _WEB + "colour = 1\n",
        "[[load]] 2: class 'web': colour = 1: unknown key; accepted connections, loop,",
    ),
    (
        '[[load]]\nname = "w"\n' + _WEB.replace("rate = 100\n", ""),
        "[[load]] 2: class 'web': rate missing: an open-loop class needs one",
    ),
    (
        '[[load]]\nworkload = "mixed"\n' + _WEB,
        "[[load]] 2: workload = 'mixed' with [load.class.web]: accepted one of them:",
    ),
    (
        '[[load]]\nworkload = "good.toml"\n' + _WEB,
        "[[load]] 2: workload = 'good.toml' with [load.class.web]: accepted one of them:",
    ),
    (
        '[[load]]\nworkload = "good.toml"\nrate = "400"\n',
        "[[load]] 2: rate = '400': the traffic (good.toml) sets each class's rate; leave out rate",
    ),
    (
        '[[load]]\nworkload = "good.toml"\nconnections = 8\n',
        "[[load]] 2: connections = 8: the traffic (good.toml) sets each class's connections",
    ),
    (
        '[[load]]\nname = "mixed"\n' + _WEB,
        "[[load]] 2: name = 'mixed': the name of a workload; accepted a name of its own",
    ),
    (
        '[[load]]\nname = "a b"\n' + _WEB,
        "[[load]] 2: name = 'a b': accepted letters, digits, '-', '_' and '.'",
    ),
    (
        '[[load]]\nworkload = "mixed"\nname = "m"\n',
        "[[load]] 2: name = 'm': applies to a traffic (a FILE.toml or [load.class.NAME] tables)",
    ),
    (
        '[[load]]\nname = "w"\n' + _WEB + '\n[[load]]\nname = "w"\n' + _WEB.replace("100", "200"),
        "[[load]] 3: name = 'w': [[load]] 2's traffic has other classes; accepted a name of its own",
    ),
    ("[[load]]\nclass = 3\n", "[[load]] 2: class = 3; accepted tables [load.class.NAME]"),
    (
        "[[load]]\n[load.class]\nweb = 3\n",
        "[[load]] 2: class.web = 3: not a class; accepted a table [load.class.web]",
    ),
    ('[[load]]\nworkload = "bursty"\n', "[[load]] 2: workload = 'bursty'; accepted: uniform, mixed,"),
]


@pytest.mark.parametrize(
    "load, message",
    BAD_TRAFFIC,
    ids=[
        "missing-file",
        "bad-key-in-file",
        "unknown-class-key",
        "open-class-without-rate",
        "named-workload-and-classes",
        "file-and-classes",
        "rate-with-traffic",
        "connections-with-traffic",
        "name-of-a-workload",
        "bad-name",
        "name-on-named-workload",
        "one-name-two-traffics",
        "class-not-a-table",
        "a-class-not-a-table",
        "unknown-workload",
    ],
)
def test_a_bad_traffic_load_point_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, load, message):
    (tmp_path / "good.toml").write_text(SMALL_TRAFFIC)
    (tmp_path / "bad.toml").write_text('[bulk]\nconnections = 4\nloop = "closed"\ndepth = 0\n')
    grid = _grid_file(tmp_path, _TRAFFIC_HEAD + load + _POLICY)
    out = tmp_path / "out"
    assert main(["sweep", "--grid", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tail_latency: error: --grid {grid} [[load]] ") and message in err, err
    assert err.count("\n") == 1
    assert not out.exists()


def test_the_example_grid_sweeps_the_example_traffic_file_and_its_classes_inline():
    g = load_grid(str(ROOT / "scripts" / "ci" / "workloads" / "example-grid.toml"))
    from_file, inline = g.loads
    assert from_file.name == "example.toml" and from_file.traffic.source == "example.toml"
    assert from_file.workload.classes == workloads.read_traffic(EXAMPLE).classes
    assert inline.name == "example-400" and inline.traffic.source == "inline"
    interactive, bulk = inline.workload.classes
    assert interactive.rate == "400" and bulk == from_file.workload.classes[1]
    assert [p.label for p in g.policies] == ["TAIL_US=0 (A/A control)", "TAIL_US=3500"]


_EXAMPLE_RUN = re.compile(r"benchmarks/results/(\d{8}T\d{6}Z-own-traffic-sweep)\.md")
_EXAMPLE_ROW = re.compile(r"^\| `((?:example\.toml|example-400) c24)` \| (.+) \|$", re.M)


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_the_docs_example_run_is_the_committed_sweep_of_the_example_grid(lang):
    """The sweep section's run over example.toml: its report and JSON are committed, at a clean commit
    the docs name, of the grid file as committed, and every B/A of its table is that JSON's cell."""
    text = (ROOT / "docs" / lang / "own-traffic.md").read_text(encoding="utf-8")
    [stem] = set(_EXAMPLE_RUN.findall(text))
    results = ROOT / "benchmarks" / "results"
    assert (results / f"{stem}.md").exists()
    doc = json.loads((results / f"{stem}.json").read_text(encoding="utf-8"))
    assert doc["provenance"]["git_dirty"] is False and doc["provenance"]["git_commit"][:7] in text
    if (ROOT / ".git").exists():
        done = subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", doc["provenance"]["git_commit"], "HEAD"],
            check=False,
            capture_output=True,
        )
        assert done.returncode == 0, f"{doc['provenance']['git_commit']} is not in this history"
    grid = (ROOT / "scripts" / "ci" / "workloads" / "example-grid.toml").read_text(encoding="utf-8")
    assert doc["grid"]["toml"] == grid
    cells = {c["load"]["label"]: c for c in doc["legs"] if not c["policy"]["control"]}
    rows = _EXAMPLE_ROW.findall(text)
    assert [label for label, _ in rows] == ["example.toml c24", "example-400 c24"]
    for label, figures in rows:
        classes = cells[label]["classes"]
        want = [classes["interactive"][k] for k in ("p50", "p99", "p99.9")]
        want += [classes["bulk"][k] for k in ("p50", "p99")]
        for shown, c in zip(figures.split(" | "), want, strict=True):
            word = f"**{c['verdict']}**" if c["verdict"] in ("gain", "regression") else c["verdict"]
            assert shown == f"{c['ratio']:.3f} ({c['ci'][0]:.3f}–{c['ci'][1]:.3f}) {word}", (label, shown)


def test_load_points_alike_but_for_schedule_or_duration_are_told_apart_and_the_same_twice_is_refused(
    tmp_path, capsys
):
    head = 'name = "t"\nbackends = ["epoll"]\n\n'
    mixed = '[[load]]\nworkload = "mixed"\nrate = "200"\nduration = {d}\n{extra}\n'
    tail = "[[policy]]\nCWIST_REACTOR_TAIL_US = [3500]\n"
    g = parse_grid(
        head
        + mixed.format(d=1, extra="")
        + mixed.format(d=2, extra="")
        + mixed.format(d=2, extra='schedule = "constant"')
        + '[[load]]\nworkload = "uniform"\n'
        + tail,
        where="t",
    )
    assert [lp.label for lp in g.loads] == [
        "mixed open 200/s c64 poisson 1s",
        "mixed open 200/s c64 poisson 2s",
        "mixed open 200/s c64 constant 2s",
        "uniform closed c64",  # alone: as before
    ]
    grid = _grid_file(tmp_path, head + mixed.format(d=1, extra="") + mixed.format(d=1, extra="") + tail)
    assert main(["sweep", "--grid", str(grid), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"--grid {grid} [[load]] 2: the load point of [[load]] 1 again (mixed open 200/s c64)" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_a_knob_axis_against_a_value_of_its_own_is_one_more_entry_and_its_label_says_so():
    """A dispatch-policy axis (issue 40) is one more knob in a [[policy]] table: each value against arm
    A's, which ``against`` names; the label shows the knob in arm B and in arm A, never as "both"."""
    g = parse_grid(
        TINY.split("[[policy]]")[0]
        + '[[policy]]\nagainst = { CWIST_REACTOR_POLICY = "backend" }\n'
        + 'CWIST_REACTOR_POLICY = ["age", "lifo"]\nCWIST_REACTOR_TAIL_US = [3500]\n',
        where="axis",
    )
    by_label = {p.label: p for p in g.policies}
    assert list(by_label) == [
        "TAIL_US=3500 POLICY=age vs POLICY=backend",
        "TAIL_US=3500 POLICY=lifo vs POLICY=backend",
    ]
    lifo = by_label["TAIL_US=3500 POLICY=lifo vs POLICY=backend"]
    assert (
        dict(lifo.a)["CWIST_REACTOR_POLICY"] == "backend" and dict(lifo.b)["CWIST_REACTOR_POLICY"] == "lifo"
    )
    assert not lifo.control


# --- --sim-cost: the cost model's bounds in one sweep ----------------------------------------------
ONE = """\
name = "one"
backends = ["epoll"]
seeds = 3
first_seed = 4
connections = 16

[[load]]
workload = "mixed"
rate = "200"
duration = 1

[[policy]]
CWIST_REACTOR_TAIL_US = [500]
"""


def _verdicts(comparisons: dict) -> dict:
    return {k: (c["ratio"], c["verdict"]) for k, c in comparisons.items()}


def test_a_sweep_with_sim_cost_gives_the_sim_a_b_of_its_cell_with_that_override(tmp_path, capsys):
    from tailjob import runner
    from tailjob.measure import Settings
    from tailjob.plan import Arm, Leg
    from tailjob.sim.measure import SimMeasure

    out, cost = tmp_path / "out", "instruction_ns=2"
    assert (
        main(["sweep", "--grid", str(_grid_file(tmp_path, ONE)), "--sim-cost", cost, "--out", str(out)]) == 0
    )
    assert (
        f"instruction_ns 2, client_us 116, wrk_us 6; `{cost}` set with --sim-cost" in capsys.readouterr().out
    )
    [js] = (out / "results").glob("*-sweep.json")
    doc = json.loads(js.read_text())
    assert doc["sim_cost"] == cost and doc["costs"]["epoll"]["instruction_ns"] == 2
    [cell] = doc["legs"]
    policy = load_grid(str(tmp_path / "grid.toml")).policies[0]
    arms = (Arm("A", "A", dict(policy.a)), Arm("B", "B", dict(policy.b)))
    settings = Settings(seed=4, warmup=False, load=workloads.plan_load("mixed", None, "200", None))
    leg = Leg(0, "epoll", 1, 16, 1, 3)
    ab = {}
    for costs in (cost, None):  # the override, and the default it must differ from
        with SimMeasure(costs, processes=2) as measure:
            [lr] = runner.run_job([leg], arms, settings, ambient={}, tier=measure)
        ab[costs] = json.loads(dumps(sweep._comps(lr.comparisons)))
        ab[costs, "classes"] = {
            n: json.loads(dumps(sweep._comps(c))) for n, c in lr.class_comparisons.items()
        }
    assert _verdicts(cell["comparisons"]) == _verdicts(ab[cost])
    assert {n: _verdicts(c) for n, c in cell["classes"].items()} == {
        n: _verdicts(c) for n, c in ab[cost, "classes"].items()
    }
    assert _verdicts(cell["comparisons"]) != _verdicts(ab[None])  # the override reached the runs
    [line] = (out / "tail-latency-sweep.jsonl").read_text().splitlines()
    assert json.loads(line)["sim_cost"] == cost


@pytest.mark.parametrize(
    "cost, message",
    [
        ("instruction_ns=-1", "--sim-cost instruction_ns=-1: accepted 0 to 100000 nanoseconds"),
        ("nope=1", "--sim-cost nope=1: unknown constant; accepted wait_us, "),
        ("wrk_us", "--sim-cost 'wrk_us': not K=V; accepted wait_us=US, "),
    ],
)
def test_a_bad_sim_cost_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, cost, message):
    out = tmp_path / "out"
    assert main(["sweep", "--grid", str(_grid_file(tmp_path)), "--sim-cost", cost, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: ") and message in err, err
    assert err.count("\n") == 1
    assert not out.exists()


def test_ctrl_c_in_a_dask_sweep_is_one_line_and_exit_130(tmp_path):
    """A terminal's Ctrl-C reaches the Dask cluster's worker processes too: they ignore it, the job
    stops them, and the one line is the job's."""
    pytest.importorskip("distributed", reason="dask[distributed] (the sweep extra) not installed")
    import os
    import signal
    from pathlib import Path

    grid = tmp_path / "grid.toml"
    grid.write_text(TINY.replace("seeds = 8", "seeds = 40"))
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "tailreactor-tail-latency"),
            "sweep",
            "--dask",
            "--grid",
            str(grid),
            "--out",
            str(tmp_path / "out"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # A shell's background job (and an xdist worker) ignores SIGINT; a terminal's finds the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first progress line: the cluster's workers are running
            if line.startswith("tail_latency: sweep"):
                break
        os.killpg(proc.pid, signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(timeout=120) == 130, rest  # generous: fails a hang only
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stderr.close()
    assert "Traceback" not in rest and "WARNING" not in rest, rest
    assert rest.strip().splitlines()[-1] == "tail_latency: interrupted", rest
