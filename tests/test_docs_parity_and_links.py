"""The docs cannot drift: English/Korean parity and links.

* **Parity**: every page in ``docs/en`` has a page of the same name in
  ``docs/ko`` with the same sequence of heading levels, the same tables (row
  count and first column of the body rows), the same set of ``CWIST_*`` names
  and the same set of numbers; each page links its translation first.
* **Links**: every relative link in ``docs/`` resolves to a file, and every
  ``#anchor`` to a heading of the target page (GitHub's anchor rules, which
  keep Korean letters).

The checkers are plain functions over directories so a test can run them on a
modified copy in ``tmp_path`` and show that they fail.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import pytest

from docs_helpers import (
    _TRANSLATION,
    DOCS,
    EN,
    EN_PAGES,
    KO,
    ROOT,
    Shape,
    github_slug,
    shape,
)


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


PAGE_LINES = 420  # "about 400"


@pytest.mark.parametrize("page", EN_PAGES)
def test_no_page_is_over_about_400_lines(page):
    """One kind of page per need: a page that grows past about 400 lines is two pages."""
    for lang in ("en", "ko"):
        lines = len((DOCS / lang / page).read_text(encoding="utf-8").splitlines())
        assert lines <= PAGE_LINES, f"{lang}/{page}: {lines} lines"
