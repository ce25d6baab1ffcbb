"""A user's own traffic (``--workload FILE.toml``, ``--class '...'``) on both tiers.

The description is parsed and checked exactly (every bad input is one line naming the file or
option, the class, the key, the value and what is accepted, before anything runs); the example file
reproduces the ``mixed`` workload class for class and gives its sim verdicts; one small file runs on
the sim tier (per-class verdicts, the same JSON twice) and on the live tier (the real bench server,
real sockets, per-class figures).  Virtual time only in the sim tests; no wall-clock assertion.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tailjob_testdata import CI_DIR, ROOT
from tailjob_testdata import SMALL_TRAFFIC as SMALL

from tailjob import workloads
from tailjob.cli import main
from tailjob.loadspec import ClientClass
from tailjob.plan import Leg, PlanError
from tailjob.workloads import LoadPlan, Traffic, parse_classes, plan_load, read_traffic

EXAMPLE = ROOT / "scripts" / "ci" / "workloads" / "example.toml"
SIM = ["--tier", "sim", "--backend", "epoll", "--duration", "1", "--runs", "8"]


def _write(tmp_path, text, name="traffic.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _result(out):
    [path] = (out / "results").glob("*-sim.json")
    return path


# -- the description ------------------------------------------------------------------
def test_a_traffic_file_is_one_table_per_class_in_file_order(tmp_path):
    t = read_traffic(_write(tmp_path, SMALL))
    assert isinstance(t, Traffic) and t.name == "traffic.toml" and t.connections == 8
    assert t.client_classes(None) == (
        ClientClass("batch", 4, "closed", depth=4, path="/service/200/"),
        ClientClass("web", 4, "open", rate=1000.0, schedule="constant", path="/user/"),
    )
    # a class with a service cost needs the bench server's service route, for both arms
    assert t.env() == {"CWIST_BENCH_SERVICE_ROUTE": "1"}


def test_the_example_file_is_the_mixed_workload_class_for_class():
    t = read_traffic(EXAMPLE)
    mixed = workloads.classes_for("mixed", connections=64, rate_rps=200.0)
    strip = [(c.name, c.connections, c.loop, c.rate, c.schedule, c.depth, c.think_ms) for c in mixed]
    assert [
        (c.name, c.connections, c.loop, c.rate, c.schedule, c.depth, c.think_ms)
        for c in t.client_classes(None)
    ] == strip
    # mixed's CWIST_BENCH_DELAY_US=20 on every request is the file's service_us = 20 on each class
    assert {c.service_us for c in t.classes} == {workloads.MIXED_SERVICE_US}


def test_the_command_line_form_says_the_same_as_the_file(tmp_path):
    from_file = read_traffic(_write(tmp_path, SMALL))
    from_cli = parse_classes(
        [
            "name=batch connections=4 loop=closed depth=4 service_us=200",
            "name=web connections=4 loop=open rate=1000 schedule=constant",
        ]
    )
    assert from_cli.classes == from_file.classes
    assert from_cli.argv == (
        "--class",
        "name=batch connections=4 loop=closed depth=4 service_us=200",
        "--class",
        "name=web connections=4 loop=open rate=1000 schedule=constant",
    )


def test_a_rate_relative_to_capacity_is_resolved_per_class(tmp_path):
    t = read_traffic(
        _write(
            tmp_path,
            '[a]\nconnections = 2\nloop = "open"\nrate = "0.5x"\n[b]\nconnections = 2\nloop = "open"\nrate = 100\n',
        )
    )
    assert t.relative
    a, b = (
        LoadPlan(t, None).spec(Leg(0, "epoll", 1, t.connections, 2, 8), capacity_rps=3000.0, seed=1).classes
    )
    assert (a.rate, b.rate) == (1500.0, 100.0)


def test_plan_load_takes_a_traffic_and_refuses_the_options_it_sets(tmp_path):
    t = read_traffic(_write(tmp_path, SMALL))
    assert plan_load(t, None, None, None) == LoadPlan(t, None, "poisson")
    assert LoadPlan(t, None).server_env() == {"CWIST_BENCH_SERVICE_ROUTE": "1"}
    for args, option in (((t, "open", None, None), "--load"), ((t, None, "10", None), "--rate")):
        with pytest.raises(PlanError, match=rf"{option} .*: the traffic \(traffic.toml\) sets each class's"):
            plan_load(*args)


# -- bad input: one line, exit 2, nothing written --------------------------------------------
BAD_FILES = [
    (
        '[a]\nconnections = 4\nloop = "open"\nrate = 10\nburst = 3\n',
        "class 'a': burst = 3: unknown key; accepted",
    ),
    (
        '[a]\nconnections = "4"\nloop = "closed"\n',
        "class 'a': connections = '4': accepted an integer from 1 to",
    ),
    ('[a]\nconnections = true\nloop = "closed"\n', "class 'a': connections = true: accepted an integer"),
    ('[a]\nconnections = 0\nloop = "closed"\n', "class 'a': connections = 0: accepted an integer from 1 to"),
    (
        '[a]\nconnections = 4\nloop = "closed"\nservice_us = 2000000\n',
        "class 'a': service_us = 2000000: accepted an integer from 0 to 1000000",
    ),
    ('[a]\nconnections = 4\nloop = "sideways"\n', "class 'a': loop = 'sideways': accepted open or closed"),
    ('[a]\nloop = "closed"\n', "class 'a': connections missing: required"),
    ('[a]\nconnections = 4\nloop = "open"\n', "class 'a': rate missing: an open-loop class needs one"),
    (
        '[a]\nconnections = 4\nloop = "open"\nrate = "lots"\n',
        "class 'a': rate = 'lots': accepted requests/s above 0",
    ),
    (
        '[a]\nconnections = 4\nloop = "open"\nrate = 10\ndepth = 4\n',
        "class 'a': depth = 4: applies to a closed-loop class only",
    ),
    (
        '[a]\nconnections = 4\nloop = "closed"\nrate = 10\n',
        "class 'a': rate = 10: applies to an open-loop class only",
    ),
    (
        '[a]\nconnections = 4\nloop = "closed"\nthink_ms = -1\n',
        "class 'a': think_ms = -1: accepted 0 to 60000 milliseconds",
    ),
    ("connections = 4\n", "connections = 4: not a class; accepted one table per class"),
    ("", "no class: accepted one table per class"),
    ("[a\n", "not TOML ("),
]


@pytest.mark.parametrize("text, words", BAD_FILES)
def test_a_bad_traffic_file_is_one_line_naming_the_file_class_key_value(text, words, tmp_path, capsys):
    path = _write(tmp_path, text)
    out = tmp_path / "out"
    for tier in (["--tier", "sim"], []):
        assert main([*tier, "--workload", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tail_latency: error: --workload {path}: ") and words in err, err
        assert err.count("\n") == 1
        assert not out.exists()


def test_a_missing_file_or_unknown_name_says_what_is_accepted(tmp_path, capsys):
    for value, words in (
        (str(tmp_path / "none.toml"), "no such file"),
        ("burst", "accepted uniform, mixed, slow-route, think-time or a traffic file FILE.toml"),
    ):
        assert main(["--tier", "sim", "--workload", value, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(f"tail_latency: error: --workload {value}")
            and words in err
            and err.count("\n") == 1
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["--class", "name=a connections=4 loop=closed deep=2"],
            "--class 'name=a connections=4 loop=closed deep=2': class 'a': deep = 2: unknown key",
        ),
        (
            ["--class", "connections=4 loop=closed"],
            "--class 'connections=4 loop=closed': name missing: required",
        ),
        (
            ["--class", "name=a connections=four loop=closed"],
            "class 'a': connections = 'four': accepted an integer",
        ),
        (
            ["--class", "name=a connections=4 loop=closed", "--class", "name=a connections=2 loop=closed"],
            "class 'a': named twice",
        ),
        (
            ["--class", "name=a connections=4 loop=closed", "--workload", "mixed"],
            "--class describes the traffic: leave out --workload",
        ),
        (
            ["--class", "name=a connections=4 loop=closed", "--connections", "8"],
            "--connections 8: the traffic (--class) sets each class's connections; leave out --connections",
        ),
        # each key's bad value is named, whatever else is missing (a fresh user read "loop missing")
        (
            ["--class", "name=interactive connections=abc"],
            "class 'interactive': connections = 'abc': accepted an integer from 1 to 4096",
        ),
        (
            ["--class", "name=interactive connections=8 loop=xyz"],
            "class 'interactive': loop = 'xyz': accepted open or closed",
        ),
        (
            ["--class", "name=b loop=closed depth=deep"],
            "class 'b': depth = 'deep': accepted an integer from 1 to 1024",
        ),
        (
            ["--class", "name=i loop=open rate=fast"],
            "class 'i': rate = 'fast': accepted requests/s above 0",
        ),
        (
            ["--class", "name=i connections=8 loop=open schedule=bursty"],
            "class 'i': schedule = 'bursty': accepted poisson or constant",
        ),
        (  # the class's name given as name=N's N: the key is named, with name= and the keys accepted
            ["--class", "interactive=8 connections=abc"],
            "--class 'interactive=8 connections=abc': interactive = 8: unknown key; accepted name=NAME",
        ),
        (
            ["--class", "name=a connections=4 loop=closed", "--schedule", "constant"],
            "--schedule constant: the traffic (--class) sets each class's",
        ),
    ],
)
def test_a_bad_class_option_is_one_line(argv, words, tmp_path, capsys):
    assert main(["--tier", "sim", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tail_latency: error: ") and words in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


# -- the sim tier -----------------------------------------------------------------------
def test_a_traffic_file_runs_in_virtual_time_with_per_class_verdicts_twice_alike(tmp_path, capsys):
    path = _write(tmp_path, SMALL)
    argv = [*SIM, "--workload", str(path), "--ab", "tail"]
    assert main([*argv, "--out", str(tmp_path / "1")]) == 0
    text = capsys.readouterr().out
    assert "### Class `batch`" in text and "### Class `web`" in text and ", c8" in text
    assert "`GET /service/200/<seq>` (200 us of service each)" in text
    assert main([*argv, "--out", str(tmp_path / "2")]) == 0
    first = _result(tmp_path / "1").read_bytes()
    assert first == _result(tmp_path / "2").read_bytes()
    (leg,) = json.loads(first)["legs"]
    assert leg["workload"] == "traffic.toml" and [c["name"] for c in leg["traffic"]["classes"]] == [
        "batch",
        "web",
    ]
    assert leg["env"]["A"]["CWIST_BENCH_SERVICE_ROUTE"] == leg["env"]["B"]["CWIST_BENCH_SERVICE_ROUTE"] == "1"
    for name in ("batch", "web"):
        assert leg["classes"][name]["p99"]["verdict"] in ("gain", "regression", "equivalent", "inconclusive")
    # the service cost is charged in virtual time: the batch class's requests cost the server
    # 200 us each beside the cost model's ~31 us, and none is answered sooner
    for run in leg["runs"]["A"]:
        batch, web = run["classes"]["batch"], run["classes"]["web"]
        assert batch["p50"] >= 200 and batch["errors"] == web["errors"] == 0
        share = batch["answered"] / (batch["answered"] + web["answered"])
        assert run["metrics"]["cpu_us_per_req"] >= 200 * share


def test_the_example_file_gives_the_mixed_workloads_sim_result(tmp_path):
    def verdicts(out):
        (leg,) = json.loads(_result(out).read_bytes())["legs"]
        return {
            name: {k: (c["ratio"], c["verdict"]) for k, c in comps.items()}
            for name, comps in leg["classes"].items()
        } | {"all": {k: (c["ratio"], c["verdict"]) for k, c in leg["comparisons"].items()}}

    assert main([*SIM, "--workload", "mixed", "--ab", "tail", "--out", str(tmp_path / "named")]) == 0
    assert main([*SIM, "--workload", str(EXAMPLE), "--ab", "tail", "--out", str(tmp_path / "file")]) == 0
    named, from_file = verdicts(tmp_path / "named"), verdicts(tmp_path / "file")
    assert set(named) == {"interactive", "bulk", "all"}
    assert from_file == named


# -- the live tier ------------------------------------------------------------------------
def test_a_traffic_file_runs_live_with_per_class_figures(tmp_path):
    path = _write(tmp_path, SMALL)
    out = subprocess.run(
        [
            sys.executable,
            str(CI_DIR / "tail_latency.py"),
            "--workload",
            str(path),
            "--ab",
            "aa",
            "--backend",
            "epoll",
            "--threads",
            "1",
            "--duration",
            "1",
            "--runs",
            "1",
            "--no-warmup",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "  - class `batch`: no verdict" in out.stdout and "  - class `web`: no verdict" in out.stdout
    result = json.loads(next((tmp_path / "out" / "results").glob("*-quick-aa.json")).read_text())
    (leg,) = result["legs"]
    assert [(c["name"], c["path"]) for c in leg["load_spec"]["classes"]] == [
        ("batch", "/service/200/"),
        ("web", "/user/"),
    ]
    for r in leg["runs"]:
        batch, web = r["classes"]["batch"], r["classes"]["web"]
        assert batch["answered"] > 0 and web["answered"] > 0
        assert sum(batch["errors"].values()) == sum(web["errors"].values()) == 0
        # the bench server charged the batch class's 200 us for real: none answered faster
        assert batch["p50"] >= 200
