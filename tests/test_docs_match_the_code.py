"""The docs say what the code does: every ``CWIST_*`` name in ``reference/``, ``conformance/``
and ``scripts/`` is a registry row, unless whitelisted with a reason; the documented answers,
examples and tables are the code's (the bench server's answer to a bad value, the examples that
run, the conformance capability table, the options of each subcommand).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from docs_helpers import (
    _MD,
    _NAME,
    DOCS,
    ROOT,
)
from tailreactor import config_docs
from tailreactor.config import KNOBS

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


# -- the capability table is what the suite skips ------------------------------------------
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
