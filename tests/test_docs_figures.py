"""Docs that say only what was measured (issues 30 and 39): every figure a page quotes is in
the committed report it names, and a row without a figure says nothing was measured.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from urllib.parse import unquote

import pytest

from docs_helpers import (
    _NAME,
    DOCS,
    ROOT,
    SYMPTOMS,
    shape,
)
from tailreactor import config_docs


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
