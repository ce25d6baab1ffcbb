"""Generate the runtime-config page (English or Korean) from the knob registry.

Role
----
``docs/en/runtime-config.md`` and ``docs/ko/runtime-config.md`` are the output
of :func:`render` over :data:`tailreactor.config.KNOBS`, so the pages cannot
disagree with the code or with each other.  Every table, every knob section and
every error message is generated -- the error messages by actually parsing a
bad value, so they are the ones an operator will see.  The words are data, next
to this module and shipped with the package:

- ``knobs.toml``: each knob's prose per language (help, when to change it, what
  0 means, what CWIST does with a bad value), read by :func:`knob_texts`;
- ``runtime-config.toml``: area titles and introductions, table labels and the
  "Tuning by symptom" rows (:data:`SYMPTOMS`: symptom, knob, what to try, what
  it costs);
- ``templates/runtime-config.<lang>.md``: the page's fixed text (introduction,
  "Worth knowing", how values are read, examples), a :class:`string.Template`
  with ``$symptoms``, ``$areas`` and ``$error_example`` where the generated
  parts go.

Command line::

    python -m tailreactor.config_docs --lang en            # print the page
    python -m tailreactor.config_docs --lang ko --check    # compare with docs/ko/runtime-config.md

``--check`` exits 1 when the committed page differs from the generator's
output and prints the command that regenerates it; the test suite runs it.

Any registry row renders: an area without a title gets a section named after
the area, ``test_only`` rows go to the bench/test section, and a knob without
recorded prose ("when" line, CWIST behaviour) says so instead of being skipped.
"""

from __future__ import annotations

import argparse
import difflib
import string
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser as a package (pyproject.toml)
    import tomli as tomllib

from .config import KNOBS, ConfigError, Knob, load

__all__ = ["LANGS", "KnobText", "knob_texts", "parse_knob_texts", "render", "page_path", "check", "main"]

LANGS = ("en", "ko")

#: How the bench server prefixes its error lines (``tailreactor.http.server.PROG``);
#: not imported, so generating the docs does not need the HTTP stack.
BENCH_PROG = "tailreactor-bench"


def _data(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class KnobText:
    """What one language's page says about one knob (``knobs.toml``); empty when not written."""

    help: str
    when: str = ""
    zero: str = ""
    cwist: str = ""


def parse_knob_texts(text: str, source: str = "knobs.toml") -> dict[str, dict[str, KnobText]]:
    """Knob name -> language -> :class:`KnobText` from TOML ``text`` (tables ``[CWIST_X.en]``).

    Raises ``ValueError`` naming the table for a language other than :data:`LANGS`, a key
    other than ``help``, ``when``, ``zero``, ``cwist``, or a missing ``help``.
    """
    keys = set(KnobText.__dataclass_fields__)
    out: dict[str, dict[str, KnobText]] = {}
    for name, langs in tomllib.loads(text).items():
        out[name] = {}
        for lang, texts in langs.items():
            where = f"{source}: [{name}.{lang}]"
            if lang not in LANGS:
                raise ValueError(f"{where}: language {lang!r} is not accepted: accepted {', '.join(LANGS)}")
            if not isinstance(texts, dict) or set(texts) - keys or "help" not in texts:
                got = sorted(texts) if isinstance(texts, dict) else repr(texts)
                raise ValueError(f"{where}: has {got}; accepted: help (required), when, zero, cwist")
            out[name][lang] = KnobText(**texts)
    return out


@cache
def knob_texts() -> dict[str, dict[str, KnobText]]:
    """``knobs.toml`` beside this module, parsed by :func:`parse_knob_texts`."""
    return parse_knob_texts(_data("knobs.toml"))


@dataclass(frozen=True)
class Symptom:
    """One row of the "Tuning by symptom" table: what an operator sees, the knobs, what to try, the cost."""

    knobs: tuple[str, ...]
    seen: dict[str, str]
    try_: dict[str, str]
    cost: dict[str, str]


_PAGE: dict[str, Any] = tomllib.loads(_data("runtime-config.toml"))
#: Area key -> section title per language, in page order.  ``test`` collects
#: every ``test_only`` row whatever its area.
AREA_TITLES: dict[str, dict[str, str]] = {a: v["title"] for a, v in _PAGE["areas"].items()}
#: One sentence or two under each area title.
AREA_INTROS: dict[str, dict[str, str]] = {a: v["intro"] for a, v in _PAGE["areas"].items() if "intro" in v}
#: Labels and fixed phrases of the generated parts.
_T: dict[str, dict[str, Any]] = _PAGE["labels"]
#: The "Tuning by symptom" table, in page order.  Every knob named must be a registry row
#: (tests/test_docs_runtime_config.py).
SYMPTOMS: tuple[Symptom, ...] = tuple(
    Symptom(
        tuple(row["knobs"]), *({lang: row[lang][key] for lang in LANGS} for key in ("seen", "try", "cost"))
    )
    for row in _PAGE["symptoms"]
)


# -- one knob's cells ---------------------------------------------------------
def area_of(k: Knob) -> str:
    """Section key of a row: ``test`` for test-only rows, else its area."""
    return "test" if k.test_only else k.area


def _unit(k: Knob) -> str:
    """The row's ``unit``, else the time unit its name or attribute ends with (``_US``, ``_s``), else ""."""
    if k.unit:
        return k.unit
    for suffix, unit in (("_US", "us"), ("_MS", "ms"), ("_NS", "ns"), ("_S", "s")):
        if k.name.endswith(suffix) or k.attr.upper().endswith(suffix):
            return unit
    return ""


def _type(k: Knob, t: dict[str, Any]) -> str:
    text = t.get(k.kind, k.kind)
    unit = _unit(k) if k.kind == "int" else ""
    unit = t["units"].get(unit, unit)
    return t["with_unit"].format(type=text, unit=unit) if unit else text


def _code(value: object) -> str:
    return f"`{value}`"


def _default(k: Knob, t: dict[str, str]) -> str:
    if k.default is None:
        if k.default_text.startswith("CWIST_"):
            return t["same_as"].format(name=k.default_text)
        return k.default_text or t["unset"]
    if k.kind == "bool":
        return _code(1 if k.default else 0)
    return _code(k.default)


def _accepted(k: Knob, t: dict[str, str]) -> str:
    if k.kind == "int":
        return f"{_code(k.lo)}–{_code(k.hi)}"
    if k.kind == "choice":
        return ", ".join(_code(c) for c in k.choices)
    if k.kind == "bool":
        return "`0`, `1`"
    return t["path_accepted"]


def _zero(k: Knob, text: KnobText, t: dict[str, str]) -> str:
    if text.zero:
        return text.zero
    if k.kind == "int":
        return t["zero_plain"] if k.in_range(0) else t["zero_error"]
    if k.kind == "bool":
        return t["zero_off"]
    return t["none"]


def _backends(k: Knob, t: dict[str, str]) -> str:
    if not k.backends or "all" in k.backends:
        return t["all"]
    return ", ".join(_code(b) for b in k.backends)


def invalid_example(k: Knob) -> tuple[str, str] | None:
    """``(bad_value, ConfigError message)`` for one value ``k`` rejects, or None.

    The message comes from :meth:`Knob.parse` itself, so the docs show exactly
    what an operator sees (for ``path``, with the probe on: only then is it
    checked).  ``None`` when no candidate is rejected.
    """
    if k.kind == "path":  # checked by load() once the probe is on (config.check_probe_file)
        raw = "/nonexistent/probe.json"
        try:
            load({"CWIST_LATENCY_PROBE": "1", k.name: raw})
        except ConfigError as exc:
            return raw, str(exc)
        return None
    candidates: list[str] = []
    if k.kind == "int":
        candidates.append(str(k.lo - 1) if k.lo is not None else "-1")
    elif k.kind == "choice" and k.choices:
        candidates.append(k.choices[0].upper())
    elif k.kind == "bool":
        candidates.append("yes")
    candidates += ["abc", "-1"]
    for raw in candidates:
        try:
            k.parse(raw)
        except ConfigError as exc:
            return raw, str(exc)
    return None


def _cwist_line(text: KnobText, t: dict[str, str]) -> str:
    cwist = text.cwist.strip()
    if cwist.startswith("CWIST:"):
        cwist = cwist[len("CWIST:") :].strip()
    return f"- **CWIST:** {cwist or t['cwist_unknown']}"


def _cell(text: str) -> str:
    """Make text safe inside a table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _symptom_table(lang: str, t: dict[str, str]) -> list[str]:
    out = [t["symptoms_cols"], "|---|---|---|---|---|"]
    for n, row in enumerate(SYMPTOMS, 1):
        knobs = ", ".join(f"[`{name}`](#{name.lower()})" for name in row.knobs)
        cells = [str(n), row.seen[lang], knobs, row.try_[lang], row.cost[lang]]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out


# -- the page ---------------------------------------------------------------
def _grouped(knobs: Sequence[Knob]) -> list[tuple[str, list[Knob]]]:
    order = [a for a in AREA_TITLES]
    for k in knobs:
        if area_of(k) not in order:
            order.append(area_of(k))  # an area nobody titled yet still renders
    groups = [(a, [k for k in knobs if area_of(k) == a]) for a in order]
    return [(a, ks) for a, ks in groups if ks]


def _error_example(knobs: Sequence[Knob]) -> str:
    """A shell session: one bad value given to ``tailreactor-bench`` and its one-line answer.

    The message is :class:`ConfigError`'s own; ``tests/test_docs_match_the_code.py`` runs the
    real server with the same value and compares its stderr with this text.
    """
    preferred = [k for k in knobs if k.name == "CWIST_HTTP_BATCH"] + list(knobs)
    for k in preferred:
        bad = ("abc", None) if k.kind == "int" else invalid_example(k)
        if bad is None:
            continue
        try:
            k.parse(bad[0])
        except ConfigError as exc:
            return f"$ {k.name}={bad[0]} tailreactor-bench\n{BENCH_PROG}: {exc}"
    return ""


def _areas(
    knobs: Sequence[Knob], lang: str, t: dict[str, Any], texts: Mapping[str, Mapping[str, KnobText]]
) -> list[str]:
    """Each area's title, introduction, table and knob sections."""
    out: list[str] = []
    for area, rows in _grouped(knobs):
        title = AREA_TITLES.get(area, {}).get(lang) or area.capitalize()
        out += [f"## {title}", ""]
        intro = AREA_INTROS.get(area, {}).get(lang)
        if intro:
            out += [intro, ""]
        out += [t["cols"], "|---|---|---|---|---|---|"]
        for k in rows:
            text = texts.get(k.name, {}).get(lang) or KnobText(help=t["no_when"])
            cells = [
                f"[`{k.name}`](#{k.name.lower()})",
                _type(k, t),
                _default(k, t),
                _accepted(k, t),
                _zero(k, text, t),
                _backends(k, t),
            ]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
        for k in rows:
            text = texts.get(k.name, {}).get(lang) or KnobText(help=t["no_when"])
            out += [f"### `{k.name}`", ""]
            help_text = f"**{t['test_only']}** {text.help}" if k.test_only else text.help
            out += [help_text, ""]
            out.append(f"- {t['when']} {text.when.strip() or t['no_when']}")
            bad = invalid_example(k)
            if bad:
                out.append("- " + t["invalid"].format(name=k.name, value=bad[0], message=bad[1]))
            else:
                out.append("- " + t["no_invalid"])
            out += [_cwist_line(text, t), ""]
    return out


def render(
    lang: str, knobs: Iterable[Knob] | None = None, texts: Mapping[str, Mapping[str, KnobText]] | None = None
) -> str:
    """The whole runtime-config page for ``lang`` (``en`` or ``ko``) as Markdown text.

    ``knobs`` defaults to :data:`tailreactor.config.KNOBS` and ``texts`` (knob
    name -> language -> :class:`KnobText`) to :func:`knob_texts`.  Raises
    ``ValueError`` for an unknown language.
    """
    if lang not in LANGS:
        raise ValueError(f"--lang {lang!r} is not supported: accepted {', '.join(LANGS)}")
    knobs = list(KNOBS if knobs is None else knobs)
    texts = knob_texts() if texts is None else texts
    t = _T[lang]
    page = string.Template(_data(f"templates/runtime-config.{lang}.md"))
    return page.substitute(
        symptoms="\n".join(_symptom_table(lang, t)),
        areas="\n".join(_areas(knobs, lang, t, texts)),
        error_example=_error_example(knobs),
    )


# -- check and command line ---------------------------------------------------------
def page_path(lang: str, root: Path | None = None) -> Path:
    """Where the committed page lives: ``<repo>/docs/<lang>/runtime-config.md``.

    ``root`` defaults to the checkout this module was imported from (an
    editable install), else the current directory.
    """
    if root is None:
        here = Path(__file__).resolve().parents[2]
        root = here if (here / "docs").is_dir() else Path.cwd()
    return root / "docs" / lang / "runtime-config.md"


def check(lang: str, path: Path | None = None, knobs: Iterable[Knob] | None = None) -> tuple[bool, str]:
    """Compare the page at ``path`` with :func:`render`; return ``(ok, message)``.

    ``message`` is one line when ok; otherwise it names the file, shows the
    first differing lines and says how to regenerate.
    """
    path = Path(path) if path is not None else page_path(lang)
    want = render(lang, knobs)
    regen = _T["en"]["regen"].format(lang=lang, path=path)
    try:
        have = path.read_text(encoding="utf-8")
    except OSError as exc:
        return False, f"{path}: cannot read ({exc.strerror}); {regen}"
    if have == want:
        return True, f"{path}: up to date"
    diff = list(
        difflib.unified_diff(
            have.splitlines(), want.splitlines(), f"{path} (committed)", "generated", lineterm="", n=1
        )
    )
    shown = "\n".join(diff[:40]) + ("\n..." if len(diff) > 40 else "")
    return False, f"{path} differs from the registry; {regen}\n{shown}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tailreactor.config_docs --lang en|ko [--check] [--file PATH]``.

    Prints the page (UTF-8) and returns 0; with ``--check`` returns 1 when the
    committed page is out of date (message on stderr).
    """
    parser = argparse.ArgumentParser(
        prog="python -m tailreactor.config_docs",
        description="Print (or --check) the runtime-config page of the CWIST_* knob registry.",
    )
    parser.add_argument("--lang", required=True, choices=LANGS)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the committed page differs from the generated one"
    )
    parser.add_argument(
        "--file",
        type=Path,
        default=None,
        help="page to check (default: docs/<lang>/runtime-config.md of this checkout)",
    )
    args = parser.parse_args(argv)
    if args.check:
        ok, message = check(args.lang, args.file)
        print(message, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    # Write bytes: the Korean page must not depend on the terminal's locale.
    sys.stdout.buffer.write(render(args.lang).encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
