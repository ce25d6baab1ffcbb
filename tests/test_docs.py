"""The docs cannot drift: English/Korean parity, links, generated pages, knob coverage.

Role
----
* **Parity**: every page in ``docs/en`` has a page of the same name in
  ``docs/ko`` with the same sequence of heading levels, the same tables (row
  count and first column of the body rows), the same set of ``CWIST_*`` names
  and the same set of numbers; each page links its translation first.
* **Links**: every relative link in ``docs/`` resolves to a file, and every
  ``#anchor`` to a heading of the target page (GitHub's anchor rules, which
  keep Korean letters).
* **Generated pages**: both runtime-config pages equal the generator's output
  (``python -m tailreactor.config_docs --lang en|ko --check``).
* **Knob coverage**: every ``CWIST_*`` name in ``reference/``, ``conformance/``
  and ``scripts/`` is a registry row, unless whitelisted with a reason.

The checkers are plain functions over directories so a test can run them on a
modified copy in ``tmp_path`` and show that they fail.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

from tailreactor import config_docs
from tailreactor.config import KNOBS, Knob

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EN, KO = DOCS / "en", DOCS / "ko"

_MD = MarkdownIt("commonmark").enable("table")
_NAME = re.compile(r"CWIST_[A-Z0-9_]+")
_NUMBER = re.compile(r"\d+(?:\.\d+)*")
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")  # "](target)" of a Markdown link
_LIST_MARKER = re.compile(r"(?m)^\s*\d+\.\s")  # "1. " numbering is structure, not a fact
_TRANSLATION = {"en": ("한국어", "ko"), "ko": ("English", "en")}


# -- reading a page ---------------------------------------------------------
def _inline_text(token) -> str:
    """Rendered text of an inline token: text and code spans, markup dropped."""
    parts = []
    for child in token.children or ():
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type == "softbreak":
            parts.append(" ")
    return "".join(parts).strip()


def github_slug(text: str) -> str:
    """GitHub's heading anchor (github-slugger): lowercase, keep letters, marks,
    digits, ``_``, ``-`` and spaces (any script, so Korean stays), spaces to ``-``."""
    kept = [
        ch
        for ch in text.lower()
        if ch in " -" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc"
    ]
    return "".join(kept).replace(" ", "-")


@dataclass
class Shape:
    """What parity compares, plus links and anchors for the link check."""

    levels: list[int] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    tables: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # (rows, first column)
    names: set[str] = field(default_factory=set)
    numbers: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)
    first_line: str = ""

    @property
    def anchors(self) -> set[str]:
        seen: dict[str, int] = {}
        out = set()
        for text in self.headings:
            slug = github_slug(text)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        return out


def shape(path: Path) -> Shape:
    """Parse one Markdown page (fenced code is neither heading nor table)."""
    text = path.read_text(encoding="utf-8")
    s = Shape(first_line=text.split("\n", 1)[0].strip())
    tokens = _MD.parse(text)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "heading_open":
            s.levels.append(int(tok.tag[1]))
            s.headings.append(_inline_text(tokens[i + 1]))
        elif tok.type == "table_open":
            rows, first, in_body = 0, [], False
            while tokens[i].type != "table_close":
                t = tokens[i]
                if t.type == "tbody_open":
                    in_body = True
                elif t.type == "tr_open":
                    rows += 1
                    # tr_open, td_open, inline: the row's first cell.
                    if in_body:
                        first.append(_inline_text(tokens[i + 2]))
                i += 1
            s.tables.append((rows, tuple(first)))
        i += 1
    for tok in tokens:  # a second pass: links inside tables count too
        for child in tok.children or ():
            if child.type == "link_open":
                s.links.append(child.attrGet("href"))
            elif child.type == "image":
                s.links.append(child.attrGet("src"))
    s.names = set(_NAME.findall(text))
    facts = _LIST_MARKER.sub("", _NAME.sub("", _LINK_TARGET.sub("]", text)))
    s.numbers = set(_NUMBER.findall(facts))
    return s


# -- the checkers -------------------------------------------------------------
def parity_problems(en_page: Path, ko_page: Path) -> list[str]:
    """Differences between an English page and its Korean translation; [] if none."""
    name = en_page.name
    if not ko_page.exists():
        return [f"{name}: docs/en has it, docs/ko does not"]
    en, ko = shape(en_page), shape(ko_page)
    problems = []
    for lang, s in (("en", en), ("ko", ko)):
        label, other = _TRANSLATION[lang]
        want = f"[{label}](../{other}/{name})"
        if s.first_line != want:
            problems.append(
                f"{name} ({lang}): first line must link the translation as {want}, found {s.first_line!r}"
            )
    if en.levels != ko.levels:
        problems.append(f"{name}: heading levels differ: en {en.levels} vs ko {ko.levels}")
    if len(en.tables) != len(ko.tables):
        problems.append(f"{name}: {len(en.tables)} tables in en vs {len(ko.tables)} in ko")
    for n, (te, tk) in enumerate(zip(en.tables, ko.tables), 1):
        if te[0] != tk[0]:
            problems.append(f"{name}: table {n} has {te[0]} rows in en vs {tk[0]} in ko")
        if te[1] != tk[1]:
            missing = sorted(set(te[1]) ^ set(tk[1])) or ["(same cells, different order)"]
            problems.append(f"{name}: table {n} first column differs: {missing}")
    if en.names != ko.names:
        problems.append(
            f"{name}: CWIST_* names differ: only en {sorted(en.names - ko.names)}, "
            f"only ko {sorted(ko.names - en.names)}"
        )
    if en.numbers != ko.numbers:
        problems.append(
            f"{name}: numbers differ: only en {sorted(en.numbers - ko.numbers)}, "
            f"only ko {sorted(ko.numbers - en.numbers)}"
        )
    return problems


def tree_problems(en_dir: Path, ko_dir: Path) -> list[str]:
    """Parity of two language trees: every page of either exists in both, and matches."""
    problems = [
        f"{p.name}: docs/ko has it, docs/en does not"
        for p in sorted(ko_dir.glob("*.md"))
        if not (en_dir / p.name).exists()
    ]
    for page in sorted(en_dir.glob("*.md")):
        problems += parity_problems(page, ko_dir / page.name)
    return problems


def link_problems(docs_dir: Path) -> list[str]:
    """Broken relative links and anchors in every page under ``docs_dir``."""
    problems = []
    shapes: dict[Path, Shape] = {}

    def shape_of(p: Path) -> Shape:
        if p not in shapes:
            shapes[p] = shape(p)
        return shapes[p]

    for page in sorted(docs_dir.rglob("*.md")):
        for href in shape_of(page).links:
            if not href or re.match(r"^[a-z][a-z0-9+.-]*:", href):
                continue  # http:, https:, mailto: -- not checked offline
            # markdown-it percent-encodes non-ASCII (Korean anchors); compare decoded.
            href = unquote(href)
            target, _, anchor = href.partition("#")
            dest = (page.parent / target).resolve() if target else page.resolve()
            where = f"{page.relative_to(docs_dir.parent)}: link {href!r}"
            if not dest.exists():
                problems.append(f"{where}: {dest} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in shape_of(dest).anchors:
                problems.append(f"{where}: no heading with anchor #{anchor} in {dest.name}")
    return problems


# -- (a) parity ----------------------------------------------------------------
EN_PAGES = sorted(p.name for p in EN.glob("*.md"))


def test_every_korean_page_has_an_english_one():
    assert EN_PAGES, "docs/en is empty"
    assert sorted(p.name for p in KO.glob("*.md")) == EN_PAGES


@pytest.mark.parametrize("page", EN_PAGES)
def test_korean_page_matches_english(page):
    assert parity_problems(EN / page, KO / page) == []


def test_docs_index_links_every_page_in_both_languages():
    links = set(shape(DOCS / "README.md").links)
    missing = [f"{lang}/{p}" for p in EN_PAGES for lang in ("en", "ko") if f"{lang}/{p}" not in links]
    assert missing == []


# -- (b) links ---------------------------------------------------------------
def test_links_and_anchors_resolve():
    assert link_problems(DOCS) == []


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("`CWIST_HTTP_BATCH`", "cwist_http_batch"),
        ("One round", "one-round"),
        ("디스패치 정책", "디스패치-정책"),
        ("A/B: tail on vs. off (3500 us)", "ab-tail-on-vs-off-3500-us"),
    ],
)
def test_github_slug(heading, anchor):
    assert github_slug(heading) == anchor


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


# -- one Korean term per concept (the glossary in docs/README.md) ---------------------
#: Variants the glossary rejects: (pattern, the glossary's term).  "암" alone (an A/B arm) reads as 癌.
KO_VARIANTS = [
    (r"노브", "변수"),
    (r"수확", "거둬들이다"),
    (r"계정", "집계"),
    (r"(?<![가-힣])암(?![가-힣호])", "비교군"),
    (r"(?<![가-힣])암(?=[이을은의과에별마])", "비교군"),
    (r"신뢰 구간", "신뢰구간"),
    (r"late 우회", "늦은 우회"),
    (r"처리 단위", "패스"),
    (r"열린 루프|닫힌 루프", "개루프, 폐루프"),
    (r"조용히 (?:정상 )?종료", "우아한 종료"),
    # queue age is 나이; "큐 대기 시간" reads as a second concept
    (r"큐 대기 시간", "나이"),
    # bounded (a limit exists), not "finite"
    (r"유한한", "상한이 있는"),
    # harvest has its own term; 거둬들이다 is reap only
    (r"거둬들이기|라운드 중 거둬들", "중간 수거"),
    # arm (an event) is 등록: no English verb with a Korean ending, no "arm 스탬프"
    (r"(?<![`_A-Za-z])arm(?=[가-힣])|(?<![`_A-Za-z])arm (?:스탬프|순서)", "등록"),
    # one word each for joint, interactive, warm-up, sample
    (r"공동 (?:\d|구간|신뢰)", "동시"),
    (r"인터랙티브", "대화형"),
    (r"예열", "워밍업"),
    (r"표본", "샘플"),
    # an A/B arm is 비교군, not 쪽
    (r"(?:끈|켠|기준) 쪽", "비교군"),
    # a figure that is a number is 수치 (그림 is a plot)
    (r"\| 그림 \|", "수치"),
    # an inconclusive A/B could not tell; it did not find "no difference"
    (r"차이가 없었다|이득을 찾지 못했다", "가릴 수 없었다"),
    # B/A ratios are B/A: "A → B로 적었다" is for the probe's medians only
    (r"B/A 비율과 판정, 프로브의 중앙값은 A → B로", "비율은 B/A"),
    # issue 39: one word each for main job, live, threshold, stamp, aged, capability
    (r"메인 작업", "주 작업"),
    (r"라이브(?!러리)", "실측"),
    (r"문턱값", "임계값"),
    (r"타임스탬프", "스탬프"),
    (r"나이 (?:든|들|드)", "오래된"),
    (r"오래 기다린 (?:이벤트|연결|것)", "오래된"),
    (r"능력", "지원 기능"),
    (r"서브 ?커맨드|부명령", "하위 명령"),
]


def glossary_problems(text: str) -> list[str]:
    """Each use of a variant the glossary rejects, with a little context and the glossary's term."""
    found = []
    for pattern, term in KO_VARIANTS:
        found += [
            f"{hit!r}: the glossary's term is {term!r}"
            for hit in re.findall(r".{0,12}" + pattern + r".{0,12}", text)
        ]
    return found


def test_the_glossary_lists_each_term_once_with_what_it_replaces():
    readme = (DOCS / "README.md").read_text(encoding="utf-8")
    assert "## Terms / 용어" in readme
    table = readme.split("## Terms / 용어")[1]
    for _, term in KO_VARIANTS:
        assert f"| {term}" in table or f", {term}" in table or f" {term} |" in table, term


@pytest.mark.parametrize("page", sorted(p.name for p in (DOCS / "ko").glob("*.md")))
def test_korean_pages_use_the_glossary_terms(page):
    text = (DOCS / "ko" / page).read_text(encoding="utf-8")
    assert glossary_problems(text) == [], f"{page} (glossary: docs/README.md)"


#: Each variant issue 39 found in the Korean pages, as it was written there: the check must catch it.
ISSUE_39_VARIANTS = [
    ("하나는 메인 작업을 돌린다", "주 작업"),
    ("라이브 작업만 돈다", "실측"),
    ("라운드가 문턱값보다 길다", "임계값"),
    ("원샷 등록 하나와 그 타임스탬프 두 개", "스탬프"),
    ("T를 넘겨 나이 든 이벤트는", "오래된"),
    ("나이 들지 않은 이벤트보다 먼저", "오래된"),
    ("낮추면 오래 기다린 이벤트가 더 일찍", "오래된"),
    ("## 능력: 백엔드가 선언하는 것", "지원 기능"),
]


@pytest.mark.parametrize("sentence, term", ISSUE_39_VARIANTS)
def test_the_glossary_check_catches_each_variant(sentence, term):
    found = glossary_problems(f"앞 문장. {sentence}. 뒤 문장.")
    assert found and all(term in f for f in found), found
    assert glossary_problems("이벤트 라이브러리 위의 백엔드, 실측 작업, 등록 스탬프, 오래된 이벤트") == []


def _glossary_row(english: str) -> str:
    readme = (DOCS / "README.md").read_text(encoding="utf-8")
    rows = [ln for ln in readme.split("## Terms / 용어")[1].splitlines() if ln.startswith(f"| {english}")]
    assert len(rows) == 1, (english, rows)
    return rows[0]


def test_the_glossary_says_what_the_job_decides():
    """The verdict row lists the job's four words and nothing retired; the interval row says how
    the interval is made (percentile bootstrap of the medians, log ratio +- t x bootstrap SE of the
    pooled tails: scripts/ci/tailjob/stats.py, pooled.py)."""
    row = _glossary_row("verdict")
    for word in ("gain", "regression", "equivalent", "inconclusive"):
        assert f"`{word}`" in row, word
    interval = _glossary_row("interval")
    assert "neutral" not in row and not re.search(r"bootstrap\s*95", interval)
    assert "percentile bootstrap" in interval and "log ratio" in interval and "t(n - 1)" in interval


#: Where a page may still say ``neutral``: the history's schema 1 lines, which did.
def test_no_page_says_neutral_except_for_schema_1_history_lines():
    pages = [ROOT / "README.md", DOCS / "README.md", *sorted(DOCS.rglob("*.md"))]
    said = [
        f"{p.relative_to(ROOT)}: {ln.strip()[:80]}"
        for p in pages
        for ln in p.read_text(encoding="utf-8").splitlines()
        if "neutral" in ln and "schema 1" not in ln
    ]
    assert said == []


def _header_cells(path: Path) -> list[list[str]]:
    """The header row of every table of a page, cell texts in order."""
    tokens, out = _MD.parse(path.read_text(encoding="utf-8")), []
    for i, tok in enumerate(tokens):
        if tok.type == "thead_open":
            row, j = [], i
            while tokens[j].type != "thead_close":
                if tokens[j].type == "th_open":
                    row.append(tokens[j + 1].content)
                j += 1
            out.append(row)
    return out


#: Header words that are names, not English to translate: the load generator, the job's verdict words.
HEADER_NAMES = {"wrk", "gain", "regression", "equivalent", "inconclusive"}


@pytest.mark.parametrize("page", EN_PAGES)
def test_korean_table_headers_are_korean(page):
    untranslated = []
    for en_row, ko_row in zip(_header_cells(EN / page), _header_cells(DOCS / "ko" / page)):
        for en_cell, ko_cell in zip(en_row, ko_row):
            words = re.findall(r"[A-Za-z]{3,}", re.sub(r"`[^`]*`", "", ko_cell))
            if ko_cell == en_cell and set(w.lower() for w in words) - HEADER_NAMES:
                untranslated.append(ko_cell)
    assert not untranslated, f"{page}: table headers still in English: {untranslated}"


# -- operator guidance on the runtime-config pages (issue 21) ------------------------
SYMPTOMS = {"en": "Tuning by symptom", "ko": "증상별 조정"}
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


# -- (d) every name the code reads is in the registry --------------------------------
#: Names that appear in the scanned code but are not knobs we read, with the reason.
NOT_KNOBS = {
    "CWIST_X": "placeholder in the ConfigError docstring (config.py), not a variable",
    "CWIST_POOL_SHARDS": "a CWIST setting config.warnings() leaves alone (its docstring), not ours",
    "CWIST_REACTOR_TAILUS": "the misspelt knob the runtime-config intro shows a warning for",
}
SCANNED = ("reference", "conformance", "scripts")


def code_names() -> dict[str, set[str]]:
    """``CWIST_*`` name -> files (relative) that mention it, over ``SCANNED``."""
    found: dict[str, set[str]] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".so"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for name in set(_NAME.findall(text)):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_cwist_name_in_the_code_is_a_registry_row():
    registry = {k.name for k in KNOBS}
    unknown = {
        n: sorted(files) for n, files in code_names().items() if n not in registry and n not in NOT_KNOBS
    }
    assert unknown == {}, "add a Knob row to tailreactor.config.KNOBS (or whitelist with a reason)"


def test_whitelist_is_current():
    found = code_names()
    registry = {k.name for k in KNOBS}
    assert sorted(n for n in NOT_KNOBS if n in registry) == []
    assert sorted(n for n in NOT_KNOBS if n not in found) == [], "stale entry: remove it"


# -- (e) the parity check bites --------------------------------------------------------
def _first_knob_row(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("| [`CWIST_"))


MUTATIONS = {
    "table row removed": (lambda t: t.replace(_first_knob_row(t) + "\n", "", 1), "rows in en vs"),
    "heading removed": (lambda t: t.replace("\n## ", "\n", 1), "heading levels differ"),
    "number changed": (lambda t: t.replace("3600000", "360000"), "numbers differ"),
    "knob name dropped": (lambda t: t.replace("CWIST_WORKERS", "WORKERS"), "CWIST_* names differ"),
    "translation link dropped": (lambda t: t.split("\n", 1)[1], "first line must link"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_parity_check_fails_when_one_language_changes(tmp_path, mutation):
    edit, expected = MUTATIONS[mutation]
    en, ko = tmp_path / "en", tmp_path / "ko"
    en.mkdir(), ko.mkdir()
    page = "runtime-config.md"
    shutil.copy(EN / page, en / page)
    shutil.copy(KO / page, ko / page)
    assert tree_problems(en, ko) == []
    (ko / page).write_text(edit((ko / page).read_text(encoding="utf-8")), encoding="utf-8")
    problems = tree_problems(en, ko)
    assert any(p.startswith(page) and expected in p for p in problems), problems


def test_parity_check_fails_when_a_translation_is_missing(tmp_path):
    en, ko = tmp_path / "en", tmp_path / "ko"
    en.mkdir(), ko.mkdir()
    shutil.copy(EN / "architecture.md", en / "architecture.md")
    assert tree_problems(en, ko) == ["architecture.md: docs/en has it, docs/ko does not"]


def test_link_check_fails_on_a_missing_anchor(tmp_path):
    shutil.copytree(DOCS, tmp_path / "docs")
    for top in ("reference", "conformance", "scripts", "benchmarks"):  # targets of links out of docs/
        (tmp_path / top).symlink_to(ROOT / top)
    page = tmp_path / "docs" / "ko" / "runtime-config.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace("#한-라운드", "#한-라운드-없음"), encoding="utf-8"
    )
    problems = link_problems(tmp_path / "docs")
    assert problems == [
        "docs/ko/runtime-config.md: link 'architecture.md#한-라운드-없음': "
        "no heading with anchor #한-라운드-없음 in architecture.md"
    ]


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_documented_bad_value_answer_is_the_servers(lang):
    """The runtime-config page's shell example is what the real bench server prints."""
    tokens = _MD.parse((DOCS / lang / "runtime-config.md").read_text(encoding="utf-8"))
    session = next(t.content for t in tokens if t.type == "fence" and t.content.startswith("$ "))
    command, answer = session.strip().split("\n")
    assignment = command.split()[1]
    name, _, value = assignment.partition("=")
    done = subprocess.run(
        [sys.executable, "-m", "tailreactor.http.server", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", name: value},
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == answer


# -- the examples in the user docs run ----------------------------------------------------
@pytest.mark.parametrize(
    "page", ["en/getting-started.md", "ko/getting-started.md", "en/runtime-config.md", "ko/runtime-config.md"]
)
def test_python_examples_run(page):
    tokens = _MD.parse((DOCS / page).read_text(encoding="utf-8"))
    blocks = [t.content for t in tokens if t.type == "fence" and t.info.strip() == "python"]
    assert blocks, f"{page} has no python example"
    env = {"PATH": "/usr/bin:/bin"}  # no CWIST_* from the caller's environment
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr


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


# -- docs that say only what was measured (issue 30) -------------------------------------
def _symptom_rows(lang: str) -> list[list[str]]:
    text = (DOCS / lang / "runtime-config.md").read_text(encoding="utf-8")
    table = text.split(f"## {SYMPTOMS[lang]}\n")[1].split("\n## ")[0]
    return [
        [c.strip() for c in ln.strip("|").split(" | ")]
        for ln in table.splitlines()
        if ln.startswith("| ") and not ln.startswith("| #")
    ]


def _job_parser():
    sys.path.insert(0, str(ROOT / "scripts" / "ci"))
    from tailjob import options, plan

    return options.parse, plan


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_the_tail_us_row_gives_a_command_that_ab_tests_the_users_value(lang):
    """``--ab tail`` compares 3600000 with 3500, whatever the user set: the row must give an A/B
    of the default against a lower value, and the job must accept it as written."""
    import shlex

    row = next(r for r in _symptom_rows(lang) if _NAME.findall(r[2]) == ["CWIST_REACTOR_TAIL_US"])
    commands = re.findall(r"`(scripts/tail-latency\.sh [^`]+)`", row[3])
    assert commands, row[3]
    parse, plan = _job_parser()
    args = parse(shlex.split(commands[0])[1:])
    assert args.ab is None
    a, b = plan.arms_for(None, a=args.a, b=args.b)
    assert a.env == {"CWIST_REACTOR_TAIL_US": "3500"}  # the default
    assert set(b.env) == {"CWIST_REACTOR_TAIL_US"} and int(b.env["CWIST_REACTOR_TAIL_US"]) < 3500


YIELD_SWEEP = "20261202T060918Z-default-sweep"


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_the_yield_batch_row_says_its_measured_cost_and_report(lang):
    """The sweep measured YIELD_BATCH=4 with tail on as a regression for the interactive class: the
    row about a yield batch below the batch must say so, with the sweep's report and figures (the
    interactive p50 and p99 on both backends)."""
    doc = json.loads((ROOT / "benchmarks" / "results" / f"{YIELD_SWEEP}.json").read_text(encoding="utf-8"))
    row = next(r for r in _symptom_rows(lang) if "CWIST_HTTP_YIELD_BATCH" in r[2])
    assert f"{YIELD_SWEEP}.md" in row[4], row[4]
    cells = [
        c
        for c in doc["legs"]
        if "YIELD_BATCH=4" in c["policy"]["label"] and c["load"]["label"].startswith("mixed")
    ]
    assert {c["backend"] for c in cells} == {"epoll", "io_uring"}
    for cell in cells:
        for key in ("p50", "p99"):
            c = cell["classes"]["interactive"][key]
            assert c["verdict"] == "regression" and f"{c['ratio']:.3f}" in row[4], (
                cell["backend"],
                key,
                row[4],
            )


def test_the_readme_states_the_verdict_rule_as_the_code_decides_it():
    """stats.verdict: gain/regression when the interval excludes 1 *and* the ratio is at least e
    from 1 -- not "excludes 1 by at least the minimum effect" (the interval's end)."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "excludes 1 by at least" not in readme
    assert "the interval excludes 1 and the ratio is at least the minimum effect away from 1" in readme


def _report_row(report: str, section: str, metric: str) -> list[str]:
    part = report.split(section)[1].split("\n### ")[0].split("\n## ")[0]
    line = next(ln for ln in part.splitlines() if ln.startswith(f"| {metric} |"))
    return [c.strip().strip("*") for c in line.strip("|").split(" | ")]


STUDY_HEADING = {"en": "## What age-based dispatch does", "ko": "## 나이 기반 디스패치가 하는 일"}
_STUDY_REPORT = re.compile(r"benchmarks/results/(\d{8}T\d{6}Z-[\w-]+-sweep)\.md")
_BA = re.compile(
    r"^(-|\d+\.\d{3}) (?:\((\d+\.\d{3})[-–](\d+\.\d{3})\) )?\**(gain|regression|equivalent|inconclusive|n/a)"
    r"\**(?: \(needs (\d+) samples\))?$"
)


def _study(lang: str) -> str:
    text = (DOCS / lang / "dispatch-study.md").read_text(encoding="utf-8")
    return text.split(STUDY_HEADING[lang] + "\n")[1].split("\n## ")[0]


def _study_rows(study: str) -> list[list[str]]:
    """The rows of the study's cell tables: backend, load point, policy, class, then B/A cells."""
    rows = []
    for ln in study.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
        if ln.startswith("| ") and len(cells) >= 7 and cells[0] in ("epoll", "io_uring"):
            rows.append([c.strip("`") for c in cells])
    return rows


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_every_figure_of_the_study_is_the_committed_sweeps(lang):
    """The study rests on one committed sweep: its report and JSON are in benchmarks/results/, its
    commit is in this history with a clean tree, and every B/A of the study's cell tables -- ratio,
    interval and verdict -- is that JSON's cell (backend, load point, policy, class)."""
    study = _study(lang)
    stems = set(_STUDY_REPORT.findall(study))
    assert len(stems) == 1, stems
    [stem] = stems
    assert (ROOT / "benchmarks" / "results" / f"{stem}.md").exists()
    doc = json.loads((ROOT / "benchmarks" / "results" / f"{stem}.json").read_text(encoding="utf-8"))
    pv = doc["provenance"]
    assert pv["git_dirty"] is False
    commit = pv["git_commit"][:7]
    assert commit in study
    if (ROOT / ".git").exists():
        done = subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", pv["git_commit"], "HEAD"],
            check=False,
            capture_output=True,
        )
        assert done.returncode == 0, f"{commit} is not in this history"
    cells = {(c["backend"], c["load"]["label"], c["policy"]["label"]): c for c in doc["legs"]}
    rows = _study_rows(study)
    assert len(rows) >= 10
    for backend, load, policy, klass, *figures in rows:
        cell = cells[(backend, load, policy)]
        comps = cell["classes"].get(klass) or (cell["comparisons"] if klass == "all" else None)
        assert comps is not None, (backend, load, policy, klass)
        for key, text in zip(("p50", "p99", "p99.9"), figures[:3]):
            c = comps[key]
            m = _BA.match(text.replace("**", ""))
            assert m, (lang, backend, load, policy, klass, key, text)
            ratio, low, high, verdict, needs = m.groups()
            assert ratio == ("-" if c["ratio"] is None else f"{c['ratio']:.3f}"), (
                load,
                policy,
                klass,
                key,
                text,
            )
            if c["needs_samples"] is not None:
                assert verdict == "n/a" and int(needs) == c["needs_samples"], (load, policy, klass, key, text)
                continue
            assert verdict == c["verdict"], (load, policy, klass, key, text)
            if c["ci"] is not None:
                assert (low, high) == (f"{c['ci'][0]:.3f}", f"{c['ci'][1]:.3f}"), (
                    load,
                    policy,
                    klass,
                    key,
                    text,
                )


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_the_study_draws_nothing_from_an_inconclusive_row(lang):
    """Where the study says what a cell could not tell, it says so in those words and gives the
    detectable effect; it never calls an inconclusive row 'no effect'."""
    study = _study(lang)
    banned = {
        "en": ("no effect", "cannot change anything", "neutral"),
        "ko": ("효과가 없", "차이가 없었다", "중립"),
    }[lang]
    for phrase in banned:
        assert phrase not in study, phrase
    assert {"en": "Live runs on a quiet machine", "ko": "조용한 머신의 실측 실행"}[lang] in study


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_the_capability_table_names_every_clause_a_backend_declaring_nothing_skips(tmp_path, lang):
    """Run the suite on fixtures.backends.poll (declares ordered=False, no max_batch, no
    arm_recv, no harvest): every clause with a skipped test is in the capability table."""
    out = tmp_path / "conformance.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailreactor_conformance",
            "--backend",
            "fixtures.backends.poll:backend",
            "-n",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    clauses = json.loads(out.read_text())["clauses"]
    # A skip for a named platform limit (B11 as a normal user, hard RLIMIT_NOFILE 1024) is not a
    # capability the backend declares away: the table lists only those.
    skipped = {
        cid
        for cid, per in clauses.items()
        for r in per.values()
        if r["skipped"]
        and not (r["status"] == "skip" and all("platform limit:" in x for x in r["skip_reasons"]))
    }
    assert {"B9", "B17", "R23", "R24", "R25"} <= skipped  # what the suite skipped on main
    page = (DOCS / lang / "conformance-reference.md").read_text(encoding="utf-8")
    heading = {"en": "## Capabilities", "ko": "## 지원 기능"}[lang]
    section = page.split(heading)[1].split("\n## ")[0]
    table = next(block for block in section.split("\n\n") if block.lstrip().startswith("|"))
    named = set(re.findall(r"(?<![A-Za-z0-9])[BRH]\d+(?!\d)", table))
    for area, first, last in re.findall(r"(?<![A-Za-z0-9])([BRH])(\d+)-[BRH](\d+)(?!\d)", table):  # "R23-R25"
        named |= {f"{area}{i}" for i in range(int(first), int(last) + 1)}
    assert skipped - named == set(), f"{lang}: clauses skipped without declarations, not in the table"


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_the_annotated_verdict_row_is_the_committed_reports(lang):
    """ "How to read a verdict" (inconclusive.md) walks through legs[0]'s p99 of a committed calibration: its figures,
    its verdict, and the arithmetic of detectable and pairs needed, as the JSON has them."""
    result = json.loads(
        (ROOT / "benchmarks" / "results" / "20261201T153045Z-quick-calibrate.json").read_text(
            encoding="utf-8"
        )
    )
    assert not result["provenance"]["git_dirty"]
    c = next(c for c in result["legs"][0]["comparisons"] if c["metric"] == "p99")
    row = (
        f"| p99 ms | {c['median_a'] / 1000:.3f} | {c['median_b'] / 1000:.3f} | {c['ratio']:.3f} | "
        f"{c['ci'][0]:.3f}–{c['ci'][1]:.3f} | {c['min_effect']:.0%} | ±{c['detectable']:.1%} | "
        f"{c['pairs_needed']} | **{c['verdict']}** |"
    )
    page = (DOCS / lang / "inconclusive.md").read_text(encoding="utf-8")
    assert row in page
    assert result["provenance"]["git_commit"][:7] in page
    contrast = next(c for c in result["legs"][2]["comparisons"] if c["metric"] == "p50")
    assert f"{contrast['ratio']:.3f}" in page and f"**{contrast['verdict']}**" in page


# -- every figure the runtime-config page quotes is its report's (issue 39) -----------------------
_RATIO = re.compile(r"(?<![\d.])\d\.\d{3}(?![\d.])")
_REPORT = re.compile(r"benchmarks/results/((?:study/)?\d{8}T\d{6}Z-[\w-]+)\.md")


def _report_ratios(stem: str) -> set[str]:
    """Every B/A a committed report holds, with its interval's ends: its JSON's ``ratio`` and ``ci``
    fields (a clean commit), else the ratio and interval cells of its Markdown tables."""
    base = ROOT / "benchmarks" / "results" / stem
    if base.with_suffix(".json").exists():
        doc = json.loads(base.with_suffix(".json").read_text(encoding="utf-8"))
        assert doc["provenance"]["git_dirty"] is False, stem
        found: set[str] = set()

        def walk(node):
            if isinstance(node, dict):
                if isinstance(node.get("ratio"), (int, float)):
                    found.add(f"{node['ratio']:.3f}")
                    found.update(f"{end:.3f}" for end in node.get("ci") or ())  # the interval's ends
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(doc)
        return found
    report = base.with_suffix(".md").read_text(encoding="utf-8")
    cells = re.findall(r"(?<=\| )(\d\.\d{3})(?= \|)", report)  # a B/A cell
    ends = re.findall(r"(?<=\| )(\d\.\d{3})[–-](\d\.\d{3})(?= \|)", report)  # an interval cell
    return set(cells) | {end for pair in ends for end in pair}


def quoted_figure_problems(text: str) -> list[str]:
    """Lines of a page that quote a B/A figure (x.xxx) without naming a committed report, or quote
    one that none of the reports they name holds; [] if every figure is its report's."""
    problems = []
    for line in text.splitlines():
        figures = _RATIO.findall(_NAME.sub("", line))
        if not figures:
            continue
        stems = _REPORT.findall(line)
        if not stems:
            problems.append(f"figures {figures} name no committed report: {line[:80]}")
            continue
        missing = [s for s in stems if not (ROOT / "benchmarks" / "results" / f"{s}.md").exists()]
        if missing:
            problems.append(f"reports {missing} are not in benchmarks/results/")
            continue
        held = set().union(*(_report_ratios(s) for s in stems))
        problems += [f"{f} is not a B/A of {stems}: {line[:80]}" for f in figures if f not in held]
    return problems


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_every_figure_the_runtime_config_page_quotes_is_in_the_report_it_names(lang):
    """Symptom rows and "when to change it" lines state only what a committed result shows: every
    B/A they quote is one of the figures of the report they name."""
    text = (DOCS / lang / "runtime-config.md").read_text(encoding="utf-8")
    assert _RATIO.search(text), "the page quotes no figure (the pattern is out of date)"
    assert quoted_figure_problems(text) == []


def test_the_figure_check_fails_on_a_changed_figure_and_on_a_figure_without_a_report():
    text = (DOCS / "en" / "runtime-config.md").read_text(encoding="utf-8")
    assert "1.143" in text
    changed = quoted_figure_problems(text.replace("1.143", "1.134"))
    assert any(p.startswith("1.134 is not a B/A") for p in changed), changed
    unnamed = quoted_figure_problems("| 1 | p99 high | knob | lower it | p99 0.516 in the sweep |")
    assert unnamed and "name no committed report" in unnamed[0]


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_rows_without_a_figure_say_nothing_was_measured(lang):
    """A symptom row whose cost quotes no result says that its effect was not measured."""
    said = {"en": "not measured", "ko": "재지 않았다"}[lang]
    for row in _symptom_rows(lang):
        if (
            "CWIST_REACTOR_BACKEND" in row[2]
            or "CWIST_HTTP_KEEP_ALIVE_TIMEOUT" in row[2]
            or "CWIST_LATENCY_PROBE" in row[2]
        ):
            continue  # a fallback, a descriptor limit, the probe's own cost: no latency claim
        assert _RATIO.search(row[4]) or said in row[4], row


def test_the_readme_gives_the_answer_with_its_reports_and_a_line_per_user():
    """After the two commands, README.md answers (helps, hurts, could not tell), every B/A it quotes
    is in a committed report the paragraph links, and each user reaches the page of their job in one
    link; every link resolves."""
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    headings = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert headings[:3] == ["## The two commands", "## The answer", "## Where to start"], headings
    answer = " ".join(text.split("## The answer\n")[1].split("\n## ")[0].split())
    for said in ("helps", "hurts", "could not tell"):
        assert said in answer, said
    assert len(_REPORT.findall(answer)) >= 3 and "docs/en/findings.md" in answer
    assert quoted_figure_problems(answer) == []
    start = text.split("## Where to start\n")[1].split("\n## ")[0]
    for user, target in (
        ("I write a backend", "docs/en/conformance.md#"),
        ("I gate a change in CI", "docs/en/gate.md"),
        ("I tune a server", "docs/en/runtime-config.md#"),
    ):
        line = next(ln for ln in start.splitlines() if user in ln)
        assert f"]({target}" in line, line
    assert "scripts/gate-code.sh" in start
    for href in shape(readme).links:
        target, _, anchor = unquote(href).partition("#")
        if re.match(r"^[a-z][a-z0-9+.-]*:", href):
            continue
        dest = (ROOT / target).resolve()
        assert dest.exists(), href
        if anchor and dest.suffix == ".md":
            assert anchor in shape(dest).anchors, href


@pytest.mark.parametrize("lang", config_docs.LANGS)
def test_every_figure_of_the_findings_table_is_in_the_report_it_links(lang):
    text = (DOCS / lang / "findings.md").read_text(encoding="utf-8")
    rows = [ln for ln in text.splitlines() if re.match(r"^\| \d+ \|", ln)]
    assert len(rows) >= 6
    assert quoted_figure_problems("\n".join(rows)) == []


PAGE_LINES = 420  # "about 400"


@pytest.mark.parametrize("page", EN_PAGES)
def test_no_page_is_over_about_400_lines(page):
    """One kind of page per need: a page that grows past about 400 lines is two pages."""
    for lang in ("en", "ko"):
        lines = len((DOCS / lang / page).read_text(encoding="utf-8").splitlines())
        assert lines <= PAGE_LINES, f"{lang}/{page}: {lines} lines"


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_the_options_page_lists_each_subcommands_options_as_its_parser_has_them(lang):
    """docs/<lang>/options.md, "Subcommands": one row per subcommand of ``scripts/tail-latency.sh``, whose
    options cell is that subcommand's parser (positionals by metavar), no more and no less."""
    from tailjob.options import COMMANDS, build_parser
    from tailjob.options import _subparsers as subparsers

    text = (DOCS / lang / "options.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `scripts/tail-latency\.sh (\w+)[^`]*` \|", line)
        if m:
            rows[m[1]] = set(re.findall(r"`(--[a-z-]+|[A-Z])`", line.split(" | ")[2]))
    assert sorted(rows) == sorted(COMMANDS), "one row per subcommand"
    for name, parser in subparsers(build_parser()).items():
        want = {a.option_strings[-1] if a.option_strings else a.metavar for a in parser._actions}
        assert rows[name] == want - {"--help"}, name
