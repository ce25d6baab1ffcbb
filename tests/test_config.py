"""Config registry: defaults, strict parsing, and one clear error per bad value."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest

import tailreactor.config as config_module
from tailreactor.config import (
    KNOBS,
    Config,
    ConfigError,
    Knob,
    field_block,
    field_type,
    knob,
    load,
)


def test_defaults_match_cwist_and_issue():
    cfg = load({})
    assert cfg.backend == "auto"
    assert cfg.http_batch == 16
    assert cfg.http_yield_batch == 16  # defaults to the batch
    assert cfg.workers == 1
    assert cfg.tail_us == 3500
    assert cfg.age_from == "arm"
    assert cfg.drain_chunk == 8
    assert cfg.latency_probe is False
    assert cfg.harvest_us == 0  # harvesting mid-round is off unless asked for (issue 24)


def test_every_knob_has_a_config_field_and_both_languages():
    from tailreactor.config_docs import knob_texts

    fields = set(Config.__dataclass_fields__) - {"source"}
    assert {k.attr for k in KNOBS} == fields
    texts = knob_texts()  # knobs.toml
    assert set(texts) == {k.name for k in KNOBS}  # no prose for a knob that is gone, none missing
    for k in KNOBS:
        assert k.name.startswith("CWIST_")
        assert set(texts[k.name]) == {"en", "ko"}, k.name
        assert texts[k.name]["en"].help and texts[k.name]["ko"].help, k.name


@pytest.mark.parametrize(
    "toml,message",
    [
        (
            '[CWIST_X.en]\nhelp = "h"\nwen = "typo"\n',
            "[CWIST_X.en]: has ['help', 'wen']; accepted: help (required)",
        ),
        ('[CWIST_X.en]\nwhen = "no help"\n', "[CWIST_X.en]: has ['when']; accepted: help (required)"),
        ('[CWIST_X.fr]\nhelp = "h"\n', "[CWIST_X.fr]: language 'fr' is not accepted: accepted en, ko"),
    ],
)
def test_a_misspelt_knob_text_is_named(toml, message):
    from tailreactor.config_docs import parse_knob_texts

    with pytest.raises(ValueError) as exc:
        parse_knob_texts(toml)
    assert message in str(exc.value) and str(exc.value).startswith("knobs.toml: ")


def test_yield_batch_follows_batch_unless_set():
    assert load({"CWIST_HTTP_BATCH": "64"}).http_yield_batch == 64
    assert load({"CWIST_HTTP_BATCH": "64", "CWIST_HTTP_YIELD_BATCH": "4"}).http_yield_batch == 4


def test_empty_value_means_default():
    assert load({"CWIST_HTTP_BATCH": "", "CWIST_REACTOR_TAIL_US": "  "}).http_batch == 16


@pytest.mark.parametrize(
    "name,value",
    [
        ("CWIST_HTTP_BATCH", "abc"),
        ("CWIST_HTTP_BATCH", "-1"),
        ("CWIST_HTTP_BATCH", "0"),
        ("CWIST_HTTP_BATCH", "1025"),
        ("CWIST_HTTP_BATCH", "1.5"),
        ("CWIST_HTTP_BATCH", "1_0"),
        ("CWIST_HTTP_YIELD_BATCH", "0"),
        ("CWIST_WORKERS", "0"),
        ("CWIST_REACTOR_BACKEND", "bogus"),
        ("CWIST_REACTOR_BACKEND", "EPOLL"),
        ("CWIST_REACTOR_TAIL_US", "-5"),
        ("CWIST_REACTOR_TAIL_US", "3.5ms"),
        ("CWIST_REACTOR_AGE_FROM", "queue"),
        ("CWIST_REACTOR_ROUND_BUDGET_US", "x"),
        ("CWIST_REACTOR_DRAIN_CHUNK", "-1"),
        ("CWIST_REACTOR_HARVEST_US", "-1"),
        ("CWIST_REACTOR_HARVEST_US", "1ms"),
        ("CWIST_REACTOR_HARVEST_US", "60000001"),
        ("CWIST_LATENCY_PROBE", "yes"),
        ("CWIST_LATENCY_PROBE", "2"),
    ],
)
def test_invalid_value_names_knob_value_and_accepted(name, value):
    with pytest.raises(ConfigError) as info:
        load({name: value})
    err = info.value
    assert err.name == name and err.value == value
    msg = str(err)
    assert name in msg and repr(value) in msg and "accepted" in msg
    assert err.accepted == knob(name).accepted()
    assert "\n" not in msg


@pytest.mark.parametrize(
    "name,value,attr,expected",
    [
        ("CWIST_HTTP_BATCH", "1024", "http_batch", 1024),
        ("CWIST_HTTP_BATCH", " 1 ", "http_batch", 1),
        ("CWIST_REACTOR_TAIL_US", "0", "tail_us", 0),
        ("CWIST_REACTOR_TAIL_US", "3600000", "tail_us", 3600000),
        ("CWIST_REACTOR_BACKEND", "epoll", "backend", "epoll"),
        ("CWIST_REACTOR_BACKEND", "io_uring", "backend", "io_uring"),
        ("CWIST_REACTOR_AGE_FROM", "ready", "age_from", "ready"),
        ("CWIST_REACTOR_DRAIN_CHUNK", "0", "drain_chunk", 0),
        ("CWIST_REACTOR_HARVEST_US", "500", "harvest_us", 500),
        ("CWIST_REACTOR_HARVEST_US", "0", "harvest_us", 0),
        ("CWIST_LATENCY_PROBE", "1", "latency_probe", True),
    ],
)
def test_valid_values(name, value, attr, expected):
    assert getattr(load({name: value}), attr) == expected


def test_source_records_what_the_environment_set():
    cfg = load({"CWIST_HTTP_BATCH": "32", "UNRELATED": "x"})
    assert dict(cfg.source) == {"CWIST_HTTP_BATCH": "32"}


@pytest.mark.parametrize("value", ["²", "١٢", "１６"])
def test_non_ascii_digits_are_rejected_with_config_error(value):
    with pytest.raises(ConfigError):
        load({"CWIST_HTTP_BATCH": value})


def test_python_m_config_docs_runs_without_warnings():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tailreactor.config_docs", "--lang", "en"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "CWIST_REACTOR_TAIL_US" in proc.stdout


def test_an_integer_too_long_to_parse_is_a_config_error_not_a_crash():
    """Python refuses int() of more than 4300 digits with its own ValueError; an operator
    must still get the one-line ConfigError naming the knob and the range."""
    with pytest.raises(
        ConfigError, match=r"CWIST_HTTP_BATCH=.* is invalid: accepted an integer from 1 to 1024"
    ):
        load({"CWIST_HTTP_BATCH": "1" * 4301})


@pytest.mark.parametrize(
    "template, why",
    [
        ("/nonexistent-dir/probe.json", "is not"),
        ("{tmp}/", "not a directory"),  # would write hidden files named .<pid>.<worker> in it
        ("{tmp}/w{worker}/probe.json", "is not"),  # the directory of worker 1 does not exist
    ],
)
def test_a_probe_file_that_cannot_be_written_is_rejected_at_load(tmp_path, template, why):
    """With the probe on, load() checks the probe file of every worker up front, so a bad
    path stops the server before it forks its workers (one line, exit 2), not in each."""
    (tmp_path / "w0").mkdir()
    template = template.replace("{tmp}", str(tmp_path))
    env = {"CWIST_LATENCY_PROBE": "1", "CWIST_LATENCY_PROBE_FILE": template, "CWIST_WORKERS": "2"}
    with pytest.raises(ConfigError, match="CWIST_LATENCY_PROBE_FILE") as exc:
        load(env)
    assert why in str(exc.value)
    assert load({**env, "CWIST_LATENCY_PROBE": "0"}).latency_probe_file == template  # unused: not checked


def test_a_writable_probe_file_is_accepted(tmp_path):
    env = {"CWIST_LATENCY_PROBE": "1", "CWIST_LATENCY_PROBE_FILE": str(tmp_path / "p-{worker}.json")}
    assert load(env).latency_probe_file == str(tmp_path / "p-{worker}.json")


def test_warnings_name_a_misspelt_knob_and_the_knob_it_resembles():
    from tailreactor.config import warnings

    got = warnings({"CWIST_REACTOR_TAILUS": "5", "CWIST_POOL_SHARDS": "4", "PATH": "/bin"})
    # CWIST's own knobs share the environment (CWIST_POOL_SHARDS): only a near miss is named.
    assert got == [
        "CWIST_REACTOR_TAILUS is not a setting of the reference and is ignored; "
        "did you mean CWIST_REACTOR_TAIL_US?"
    ]


def test_warnings_name_a_probe_file_that_will_not_be_written(tmp_path):
    from tailreactor.config import warnings

    env = {"CWIST_LATENCY_PROBE_FILE": str(tmp_path / "p.json")}
    assert warnings(env) == [
        "CWIST_LATENCY_PROBE_FILE is set but CWIST_LATENCY_PROBE is not 1: "
        "no probe runs and no probe file is written"
    ]
    assert warnings({**env, "CWIST_LATENCY_PROBE": "1"}) == []
    assert warnings({}) == []


# -- Config is the registry's: its fields and defaults, and replace() checks like load() --------------


def _disagreements(cls, knobs) -> list[str]:
    """Where the dataclass ``cls`` and the registry ``knobs`` differ: names, order, types, defaults."""
    fields = [f for f in dataclasses.fields(cls) if f.name != "source"]
    out = [f"field {f.name} has no knob" for f in fields[len(knobs) :]]
    out += [f"knob {k.name} has no field" for k in knobs[len(fields) :]]
    for f, k in zip(fields, knobs):
        want = (k.attr, field_type(k), k.default)
        if (f.name, f.type, f.default) != want:
            out.append(f"field {(f.name, f.type, f.default)} != knob {k.name} {want}")
    return out


def test_config_fields_and_defaults_are_the_registrys():
    assert _disagreements(Config, KNOBS) == []
    assert {f.type for f in dataclasses.fields(Config)} >= {"int", "str", "bool", "str | None"}


def test_a_knob_in_one_but_not_the_other_is_a_disagreement():
    extra = Knob(name="CWIST_NEW", attr="new_knob", kind="int", default=1, lo=0, hi=2, area="http")
    assert _disagreements(Config, KNOBS + (extra,)) == ["knob CWIST_NEW has no field"]

    @dataclasses.dataclass(frozen=True)
    class Wider(Config):
        new_knob: int = 1

    assert _disagreements(Wider, KNOBS) == ["field new_knob has no knob"]
    swapped = (KNOBS[1], KNOBS[0]) + KNOBS[2:]
    assert len(_disagreements(Config, swapped)) == 2
    retyped = tuple(
        dataclasses.replace(k, default=k.default + 1) if k.attr == "workers" else k for k in KNOBS
    )
    assert [d.split(" != ")[0] for d in _disagreements(Config, retyped)] == ["field ('workers', 'int', 1)"]


def test_the_committed_field_block_is_the_generated_one():
    """config.py's knob fields are `python -m tailreactor.config --fields`: after a change to KNOBS,
    paste its output between the markers."""
    source = inspect.getsource(config_module)
    begin = "    # -- knob fields: generated by `python -m tailreactor.config --fields` --\n"
    end = "    # -- end of knob fields --\n"
    assert source.count(begin) == source.count(end) == 1
    committed = source[source.index(begin) + len(begin) : source.index(end)]
    assert committed == field_block(KNOBS)
    out = subprocess.run(
        [sys.executable, "-m", "tailreactor.config", "--fields"], capture_output=True, text=True, check=True
    ).stdout
    assert out == field_block(KNOBS)
    extra = Knob(name="CWIST_NEW", attr="new_knob", kind="bool", default=False, area="http")
    assert field_block(KNOBS + (extra,)) == committed + "    new_knob: bool = False\n"


def test_config_module_without_fields_says_what_it_does():
    run = subprocess.run(
        [sys.executable, "-m", "tailreactor.config"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 2 and "--fields" in run.stderr and run.stdout == ""


@pytest.mark.parametrize(
    "attr, value",
    [
        ("tail_us", -1),
        ("tail_us", "3500"),
        ("tail_us", True),
        ("drain_chunk", 10**9),
        ("age_from", "armed"),
        ("backend", "kqueue"),
        ("latency_probe", 1),
        ("latency_probe_file", ""),
    ],
)
def test_replace_refuses_what_load_would_refuse(attr, value):
    k = next(k for k in KNOBS if k.attr == attr)
    with pytest.raises(ConfigError) as info:
        Config.default().replace(**{attr: value})
    assert info.value.name == k.name and info.value.accepted == k.accepted()


def test_replace_refuses_an_unknown_attribute():
    with pytest.raises(TypeError, match="tail_ms"):
        Config.default().replace(tail_ms=1)


def test_replace_keeps_the_rest_and_derives_like_load():
    cfg = Config.default().replace(tail_us=0, age_from="ready", latency_probe_file=None)
    assert (cfg.tail_us, cfg.age_from, cfg.drain_chunk) == (0, "ready", 8)
    assert Config.default().replace(http_batch=4, http_yield_batch=None).http_yield_batch == 4
