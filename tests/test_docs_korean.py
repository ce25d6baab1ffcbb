"""The Korean pages: one Korean term per concept (the glossary in docs/README.md), the
verdict words as the job decides them, and table headers in Korean.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docs_helpers import (
    _MD,
    DOCS,
    EN,
    EN_PAGES,
    ROOT,
)

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
