"""What the docs test modules (``test_docs_*.py``) share: where the pages are, a page read
into its shape (heading levels and anchors, tables, ``CWIST_*`` names, numbers, links), GitHub's
anchor rule, the English page names and the runtime-config page's symptom heading.  Not
collected: it holds no test."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

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


# -- the pages and headings several modules name ---------------------------------
EN_PAGES = sorted(p.name for p in EN.glob("*.md"))
#: The heading of the runtime-config page's symptom table (issue 21).
SYMPTOMS = {"en": "Tuning by symptom", "ko": "증상별 조정"}
