"""Every command quoted in README.md, docs/ and benchmarks/README.md runs: a renamed module, script or
option fails here.

The commands are taken from the Markdown itself (``sh``/``bash``/``console`` code blocks and inline
code) by :func:`quoted_commands`; a command is one that starts (after ``VAR=value`` assignments) with
``scripts/...``, ``benchmarks/....py``, ``python -m ...``, ``python benchmarks/...``, ``pytest``,
``tailreactor-*``, ``make -C ...`` or ``.venv/bin/...``.  Each is run in a cheap form (:func:`cheap_form`):
``--help`` instead of the real run (the job takes minutes), ``make -n`` instead of ``make``, for
``scripts/bootstrap.sh``, which installs things and has no ``--help``, ``bash -n`` and its option list,
and for ``scripts/test.sh``, which bootstraps and then hands its arguments to pytest, ``pytest --help``
(its own ``--help`` is checked by :func:`test_test_sh_help_answers_itself_without_setting_up_anything`).
A command passes when the cheap form exits 0, prints a usage (so a module without a command line,
which would exit 0 doing nothing, fails), and every option the quote uses (``--x``, ``-x``) is in
that usage.  ``CWIST_*`` assignments must name registry knobs.  The distinct cheap forms run in
parallel (a few seconds in all).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from tailreactor.config import KNOBS

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: The pages whose commands are checked.
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md")
#: Code blocks whose lines are commands (``text`` blocks hold output, ``python`` blocks code).
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = {"&&", "||", ";", "|", ">", ">>", "2>", "2>&1", "<"}
_OPTION = re.compile(r"^(--[a-z][a-z0-9-]*|-[a-zA-Z])(?:=.*)?$")


@dataclass(frozen=True)
class Quote:
    """One command as a page quotes it: where, the text, its words (env assignments apart)."""

    where: str
    text: str
    env: tuple[str, ...]
    words: tuple[str, ...]


def _is_command(words: list[str]) -> bool:
    if not words:
        return False
    head = words[0].removeprefix(".venv/bin/")
    if head in ("python", "python3"):  # a module, a benchmark script, or .venv/bin/python itself
        return (
            words[0] != head
            or (len(words) > 2 and words[1] == "-m")
            or (len(words) > 1 and words[1].startswith("benchmarks/"))
        )
    if head == "pytest" or re.fullmatch(r"tailreactor-[a-z]+", head):
        return True
    if head == "make":
        return "-C" in words
    if head.startswith(("scripts/", "benchmarks/")):
        path = ROOT / head
        if path.suffix == ".sh":
            return True  # a quoted script that is gone must fail, not be skipped
        # A .py file is a command when it has a main (tailjob/loadgen.py is quoted as a module).
        return path.suffix == ".py" and (not path.exists() or "__main__" in path.read_text(encoding="utf-8"))
    return False


def _split(line: str) -> list[list[str]]:
    """The simple commands of one shell line (split at ``&&``, ``|``, ``>`` ...; comments dropped)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # unbalanced quotes: still check what can be seen
        words = line.split()
    out, cur = [], []
    for w in words:
        if w in _SEPARATORS:
            out.append(cur)
            cur = []
            if w.startswith((">", "2>", "<")):  # the next word is the file
                cur = None
            continue
        if cur is None:
            cur = []
            continue
        cur.append(w)
    out.append(cur or [])
    return [c for c in out if c]


def _quotes_of(where: str, text: str) -> list[Quote]:
    out = []
    for cmd in _split(text):
        env = []
        while cmd and _ASSIGN.match(cmd[0]):
            env.append(cmd.pop(0))
        if _is_command(cmd):
            out.append(Quote(where, text, tuple(env), tuple(cmd)))
    return out


def quoted_commands(pages=PAGES) -> list[Quote]:
    """Every command quoted in ``pages``: shell code block lines and inline code."""
    md = MarkdownIt("commonmark")
    found: list[Quote] = []
    for page in pages:
        rel = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
        tokens = md.parse(page.read_text(encoding="utf-8"))
        for tok in tokens:
            if tok.type == "fence" and tok.info.split()[:1] and tok.info.split()[0] in SHELL_BLOCKS:
                lines = tok.content.splitlines()
                n = 0
                while n < len(lines):
                    first, line = n, lines[n]
                    while line.endswith("\\") and n + 1 < len(lines):  # a command continued on the next line
                        n += 1
                        line = line[:-1] + " " + lines[n]
                    found += _quotes_of(f"{rel}:{tok.map[0] + 2 + first}", line.removeprefix("$ "))
                    n += 1
            elif tok.type == "inline":
                for child in tok.children or []:
                    if child.type == "code_inline":
                        found += _quotes_of(f"{rel}:{tok.map[0] + 1}", child.content)
    return found


def options_of(quote: Quote) -> set[str]:
    """The option names a quote uses (``--rate`` from ``[--rate 2000|0.7x]``, ``-x``)."""
    out = set()
    words = quote.words[3:] if quote.words[1:2] == ("-m",) else quote.words[1:]
    for w in words:
        m = _OPTION.match(w.strip("[]"))
        if m:
            out.add(m[1])
    return out


def cheap_form(quote: Quote) -> tuple[tuple[str, ...], str]:
    """(argv, kind): the command to run instead of the quoted one, and what its output must hold.

    ``kind`` is ``usage`` (a usage text listing the options) or ``source`` (``bash -n``; the options
    are looked up in the script's source, as its ``case`` labels).
    """
    words = list(quote.words)
    head = words[0].removeprefix(".venv/bin/")
    if head in ("python", "python3"):
        if len(words) > 2 and words[1] == "-m":
            return (sys.executable, "-m", words[2], "--help"), "usage"
        if len(words) > 1 and words[1].startswith("benchmarks/"):
            return (sys.executable, words[1], "--help"), "usage"
        return (sys.executable, "--help"), "usage"
    if head == "pytest":
        plugins = [a for i, w in enumerate(words) if w == "-p" for a in ("-p", words[i + 1])]
        return (str(BIN / "pytest"), *plugins, "--help"), "usage"
    if head.startswith("tailreactor-"):
        return (str(BIN / head), "--help"), "usage"
    if head == "make":
        return ("make", "-n", "-C", words[words.index("-C") + 1]), "make"
    if head == "scripts/bootstrap.sh":
        return ("bash", "-n", head), "source"
    if head == "scripts/test.sh":  # bootstrap (which may install wrk), then pytest "$@": pytest's options
        return (str(BIN / "pytest"), "--help"), "usage"
    if head.endswith(".py"):
        return (sys.executable, head, "--help"), "usage"
    return (head, "--help"), "usage"


def _run(argv: tuple[str, ...]) -> tuple[int, str]:
    env = dict(os.environ, PYTHON=sys.executable, TAILREACTOR_VENV=str(BIN.parent))
    try:
        done = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, check=False
        )
    except FileNotFoundError as exc:
        return 127, str(exc)
    return done.returncode, done.stdout + done.stderr


def problems(quotes: list[Quote]) -> list[str]:
    """One line per quote that does not run; the cheap forms run in parallel, each once."""
    forms = {q: cheap_form(q) for q in quotes}
    argvs = sorted({argv for argv, _ in forms.values()})
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(argvs, pool.map(_run, argvs)))
    knobs = {k.name for k in KNOBS}
    out = []
    for q, (argv, kind) in forms.items():
        rc, output = results[argv]
        why = ""
        if q.words[0].startswith(("scripts/", "benchmarks/")) and not (ROOT / q.words[0]).exists():
            why = f"{q.words[0]} does not exist"
        elif rc != 0:
            why = f"`{shlex.join(argv)}` exited {rc}: {output.strip()[-300:]}"
        elif kind == "usage" and "usage" not in output.lower():
            why = f"`{shlex.join(argv)}` printed no usage (is it a command at all?)"
        else:
            text = output if kind != "source" else (ROOT / argv[-1]).read_text(encoding="utf-8")
            if kind != "make":
                missing = sorted(
                    o for o in options_of(q) if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)
                )
                if missing:
                    why = f"option(s) {', '.join(missing)} not in `{shlex.join(argv)}`"
        bad_env = sorted(
            a.split("=")[0] for a in q.env if a.startswith("CWIST_") and a.split("=")[0] not in knobs
        )
        if bad_env:
            why = (why + "; " if why else "") + f"{', '.join(bad_env)} is not a knob"
        if why:
            out.append(f"{q.where}: {q.text!r}: {why}")
    return out


def test_the_extractor_finds_the_commands_the_pages_quote():
    texts = {" ".join(q.words) for q in quoted_commands()}
    for expected in (
        "scripts/tail-latency.sh",
        "scripts/test.sh",
        ".venv/bin/python -m tailreactor.config_docs --lang en",
        "tailreactor-conformance --list",
        "python -m tailreactor.probe_files /tmp/probe-{pid}-{worker}.json",
    ):
        assert expected in texts, sorted(texts)
    assert len(texts) > 30


def test_a_module_without_a_command_line_an_unknown_option_or_knob_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Read it with `python -m tailreactor.probe /tmp/probe.json`, or\n"
        "`python -m tailreactor.probe_files /tmp/probe.json`, then\n\n"
        "```sh\nscripts/tail-latency.sh --pin \\\n  --no-such-option 3\n"
        "CWIST_NO_SUCH_KNOB=1 tailreactor-bench --port 0  # a comment\n"
        "scripts/tests.sh -k timers\n```\n\n"
        "```text\ntailreactor-bench --not-a-command-but-output\n```\n",
        encoding="utf-8",
    )
    quotes = quoted_commands([page])
    assert [q.words[0] for q in quotes] == [
        "python",
        "python",
        "scripts/tail-latency.sh",
        "tailreactor-bench",
        "scripts/tests.sh",
    ]
    found = problems(quotes)
    assert len(found) == 4, "\n".join(found)
    assert "printed no usage" in found[0] and "tailreactor.probe " in found[0]
    assert "--no-such-option" in found[1]
    assert "CWIST_NO_SUCH_KNOB is not a knob" in found[2]
    assert "scripts/tests.sh does not exist" in found[3]


def test_every_command_quoted_in_the_readme_and_docs_runs():
    quotes = quoted_commands()
    found = problems(quotes)
    assert not found, "quoted commands that do not run:\n" + "\n".join(found)


def test_test_sh_help_answers_itself_without_setting_up_anything(tmp_path):
    """``scripts/test.sh --help`` prints its own usage and exits 0: it creates no virtual environment,
    installs nothing and does not hand ``--help`` to pytest (no Python on the PATH is needed)."""
    import shutil

    venv, tools = tmp_path / "venv", tmp_path / "bin"
    tools.mkdir()
    for tool in ("bash", "cat", "dirname"):  # what the script needs to answer; no python3, pip or pytest
        (tools / tool).symlink_to(shutil.which(tool))
    done = subprocess.run(
        [str(tools / "bash"), str(ROOT / "scripts" / "test.sh"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(tools), "TAILREACTOR_VENV": str(venv)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: scripts/test.sh") and "pytest" in done.stdout
    assert not venv.exists() and done.stderr == ""
