"""The runtime-config pages: generated, in step with the generator
(``python -m tailreactor.config_docs --lang en|ko --check``), a row and a section for every
knob, and the operator guidance they give (the symptom table, when to change each knob, units,
the defaults).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from docs_helpers import (
    _NAME,
    DOCS,
    SYMPTOMS,
    shape,
)
from tailreactor import config_docs
from tailreactor.config import KNOBS, Knob


# -- (c) the generated pages ---------------------------------------------------------
@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_runtime_config_page_is_generated(lang):
    ok, message = config_docs.check(lang, DOCS / lang / "runtime-config.md")
    assert ok, message


def test_check_command_passes_and_fails_with_the_regenerate_command(tmp_path):
    cmd = [sys.executable, "-m", "tailreactor.config_docs"]
    for lang in config_docs.LANGS:
        done = subprocess.run(
            cmd + ["--lang", lang, "--check"], capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr
    stale = tmp_path / "runtime-config.md"
    stale.write_text(config_docs.render("ko").replace("`3500`", "`3000`"), encoding="utf-8")
    done = subprocess.run(
        cmd + ["--lang", "ko", "--check", "--file", str(stale)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert f"python -m tailreactor.config_docs --lang ko > {stale}" in done.stderr
    diff_line = next(
        line for line in done.stderr.splitlines() if line.startswith("-| [`CWIST_REACTOR_TAIL_US`]")
    )
    assert "`3000`" in diff_line


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_every_knob_has_a_table_row_and_a_section(lang):
    s = shape(DOCS / lang / "runtime-config.md")
    in_tables = [
        cell for _, first in s.tables for cell in first if _NAME.fullmatch(cell)
    ]  # the knob tables; the symptom table is numbered
    assert sorted(in_tables) == sorted(k.name for k in KNOBS)
    assert {k.name for k in KNOBS} <= set(s.headings)


# -- operator guidance on the runtime-config pages (issue 21) ------------------------
WHEN = {"en": "**When to change it:**", "ko": "**언제 바꾸나:**"}
UNITS = {"en": "Units: `us` = microseconds", "ko": "단위: `us` = 마이크로초"}


def _sections(text: str) -> dict[str, str]:
    """``{knob name: its ### section's text}`` of a runtime-config page."""
    parts = re.split(r"(?m)^### `(CWIST_[A-Z0-9_]+)`\n", text)
    return {name: body.split("\n## ")[0] for name, body in zip(parts[1::2], parts[2::2])}


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_the_symptom_table_comes_first_and_names_real_knobs(lang):
    s = shape(DOCS / lang / "runtime-config.md")
    assert s.headings[1] == SYMPTOMS[lang], s.headings[:3]  # right after the page title
    text = (DOCS / lang / "runtime-config.md").read_text(encoding="utf-8")
    table = text.split(f"## {SYMPTOMS[lang]}\n")[1].split("\n## ")[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| #")]
    assert len(rows) >= 6
    names = {k.name for k in KNOBS}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 5 and all(cells), row  # #, symptom, knob, what to try, what it costs
        assert set(_NAME.findall(cells[2])) and set(_NAME.findall(cells[2])) <= names, row


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_every_knob_says_when_to_change_it(lang):
    sections = _sections((DOCS / lang / "runtime-config.md").read_text(encoding="utf-8"))
    assert set(sections) == {k.name for k in KNOBS}
    for name, body in sections.items():
        lines = [ln for ln in body.splitlines() if ln.startswith("- " + WHEN[lang])]
        assert len(lines) == 1 and len(lines[0]) > len(WHEN[lang]) + 10, (name, lines)
    texts = config_docs.knob_texts()
    for k in KNOBS:
        assert texts[k.name]["en"].when.strip() and texts[k.name]["ko"].when.strip(), k.name


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_units_are_defined_once_and_given_in_every_integer_type_cell(lang):
    text = (DOCS / lang / "runtime-config.md").read_text(encoding="utf-8")
    assert text.count(UNITS[lang]) == 1
    cells = {}
    for ln in text.splitlines():
        m = re.match(r"\| \[`(CWIST_[A-Z0-9_]+)`\]\(#[a-z0-9_]+\) \| ([^|]+) \|", ln)
        if m:
            cells[m[1]] = m[2].strip()
    for k in KNOBS:
        if k.kind == "int":
            assert re.search(r"\(.+\)$", cells[k.name]), (k.name, cells[k.name])
    assert cells["CWIST_HTTP_KEEP_ALIVE_TIMEOUT"].endswith("(s)")
    assert cells["CWIST_REACTOR_TAIL_US"].endswith("(us)")


def test_what_the_pages_say_about_the_defaults_is_true():
    from tailreactor.config import load
    from tailreactor.probe import probe_file_path

    cfg = load({})
    en = (DOCS / "en" / "runtime-config.md").read_text(encoding="utf-8")
    ko = (DOCS / "ko" / "runtime-config.md").read_text(encoding="utf-8")
    # The late bypass skips the yield; at the defaults the yield point is the batch's end.
    assert cfg.http_yield_batch == cfg.http_batch
    assert "the late bypass changes nothing" in en and "늦은 우회는 아무것도 바꾸지 않는다" in ko
    # The probe file's name pattern, as the page shows it, is the one the workers write.
    example = probe_file_path("/tmp/probe.json", 4242, 0)
    assert f"`{example}`" in en and f"`{example}`" in ko
    for page in (en, ko):
        assert "GET /__probe" in page and "[latency-probe]" in page and "CWIST_RX_URING=1" in page


def test_generator_renders_any_row():
    """A new area, a path knob, a derived default and a test-only knob all render."""
    rows = [
        Knob(
            name="CWIST_NEW_PATH",
            attr="new_path",
            kind="path",
            default=None,
            area="storage",
            default_text="unset",
        ),
        Knob(
            name="CWIST_NEW_FLAG",
            attr="new_flag",
            kind="bool",
            default=True,
            area="probe",
            backends=("epoll", "io_uring"),
        ),
        Knob(
            name="CWIST_NEW_DELAY_US",
            attr="new_delay_us",
            kind="int",
            default=0,
            lo=0,
            hi=10,
            area="http",
            test_only=True,
        ),
    ]
    KnobText = config_docs.KnobText
    texts = {
        "CWIST_NEW_PATH": {"en": KnobText("A path."), "ko": KnobText("경로.")},
        "CWIST_NEW_FLAG": {"en": KnobText("A flag."), "ko": KnobText("플래그.")},
    }  # DELAY_US: none yet
    for lang in config_docs.LANGS:
        page = config_docs.render(lang, rows, texts)
        for k in rows:
            assert f"| [`{k.name}`](#{k.name.lower()}) |" in page
            assert f"### `{k.name}`" in page
        assert "## Storage" in page
        assert config_docs.AREA_TITLES["test"][lang] in page
        assert "ConfigError: CWIST_NEW_FLAG='yes' is invalid: accepted 0 or 1" in page
        assert "ConfigError: CWIST_NEW_DELAY_US='-1' is invalid" in page
        assert ("A path." if lang == "en" else "경로.") in page


_ONCE_WITHOUT_HDRH = """
import runpy, sys

class NoHdrh:  # the generator must not need the probe's histogram library
    def find_spec(self, name, path=None, target=None):
        if name == "hdrh" or name.startswith("hdrh."):
            raise ImportError("hdrh is blocked by the test")

sys.meta_path.insert(0, NoHdrh())
sys.argv = ["config_docs", "--lang", sys.argv[1]]
try:
    runpy.run_module("tailreactor.config_docs", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    assert not exc.code, exc.code
import tailreactor.config as config
copies = sorted(name for name, m in list(sys.modules.items()) if getattr(m, "__file__", None) == config.__file__)
print("config.py ran as:", copies, file=sys.stderr)
assert copies == ["tailreactor.config"], copies
"""


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_the_generator_runs_config_once_and_without_hdrhistogram(lang):
    done = subprocess.run(
        [sys.executable, "-c", _ONCE_WITHOUT_HDRH, lang], capture_output=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "CWIST_LATENCY_PROBE_FILE" in done.stdout.decode("utf-8")
