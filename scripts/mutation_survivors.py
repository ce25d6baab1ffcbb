"""The bookkeeping of scripts/mutation.sh around a cosmic-ray session.

    python scripts/mutation_survivors.py skip SESSION --reasons TOML
        marks skipped every mutant inside an annotation (under `from __future__ import annotations`
        an annotation is never evaluated: equivalent by construction) and every mutant of a function
        TOML lists as a whole (`[[function]]`: it only builds a diagnostic's text or counters).
    python scripts/mutation_survivors.py check SESSION --reasons TOML [--name TARGET]
        prints the counts (killed, of them by timeout, survived, skipped, pending) and every survivor;
        exit 1 when a survivor has no entry in TOML (the entry to fill in is printed), 0 otherwise.
    python scripts/mutation_survivors.py rerun-survivors SESSION
        forgets the results of the survivors, so the next `cosmic-ray exec` runs them again (after a
        clause was sharpened).
    python scripts/mutation_survivors.py only SESSION --listed TOML
        marks skipped every mutant of a fresh session whose file, operator and source line no survivor
        entry of TOML names (a reasons file, e.g. an earlier commit's), so that `cosmic-ray exec` runs
        just the survivors it listed (and their siblings: other mutants of that operator on that line).

A survivor's entry names the file, cosmic-ray's operator, the source line and the mutated line (both
stripped of surrounding blanks), so it still matches when lines move, and the reason: a kind
(`equivalent`, `performance`, `logging`, `unreachable`, `unmeasured`, `gap`) and one line saying why.
A line's text can stand in several functions (`except OSError:`) for different reasons: an entry with
`function` (cosmic-ray's definition name) names the mutants of that function only, and comes before
an entry without one.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

KINDS = ("equivalent", "performance", "logging", "unreachable", "unmeasured", "gap")


@dataclass(frozen=True)
class Mutant:
    """One mutant of a session, as a survivor's entry names it."""

    job_id: str
    file: str
    operator: str
    line_no: int
    line: str
    mutant: str
    function: str = ""  # cosmic-ray's definition name; the C example's have none


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions, (row from 1, column from 0), of every annotation in the source."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        annotations = []
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            annotations.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            annotations.append(node.returns)
        for a in annotations:
            spans.append(((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)))
    return spans


def skip(db: WorkDB, reasons: Path) -> tuple[int, int]:
    """Mark skipped the mutants inside annotations and those of the functions the reasons file
    lists as a whole (`[[function]]`: diagnostics only); returns how many of each."""
    functions = {(f["file"], f["name"]): f for f in load_functions(reasons)}
    sources: dict[str, list] = {}
    in_annotation = in_function = 0
    for item in db.work_items:
        for m in item.mutations:
            path = str(m.module_path)
            if path not in sources:
                text = Path(path).read_text()
                sources[path] = annotation_spans(text) if "from __future__ import annotations" in text else []
            start = tuple(m.start_pos)
            f = functions.get((path, m.definition_name))
            if f is not None:
                why = f"{f['kind']}: {f['reason']}"
                in_function += 1
            elif any(s <= start < e for s, e in sources[path]):
                why = "annotation: not evaluated under from __future__ import annotations"
                in_annotation += 1
            else:
                continue
            db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=why))
    return in_annotation, in_function


def mutants(db: WorkDB) -> dict[str, Mutant]:
    """Every mutant of the session by job id, with its source line and mutated line."""
    results = dict(db.results)
    out = {}
    for item in db.work_items:
        m = item.mutations[0]
        lines = Path(m.module_path).read_text().splitlines()
        line_no = m.start_pos[0]
        before = lines[line_no - 1].strip()
        after = ""
        result = results.get(item.job_id)
        if result is not None and result.diff:
            added = [d[1:] for d in result.diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
            after = " / ".join(a.strip() for a in added)
        out[item.job_id] = Mutant(
            item.job_id, str(m.module_path), m.operator_name, line_no, before, after, m.definition_name or ""
        )
    return out


def c_code_lines(source: str) -> list[int]:
    """The line numbers of a C file worth mutating: code, not comments, preprocessor lines or the
    broken variants' `#ifdef TR_BUG_*` branches (a mutant there changes a variant, not the backend)."""
    out = []
    in_comment = False
    frames: list[list[bool]] = []  # per open #if: [about a TR_BUG_ flag, #ifndef, in its #else]
    for no, raw in enumerate(source.splitlines(), 1):
        line = raw.strip()
        if in_comment:
            in_comment = "*/" not in line
            continue
        if line.startswith("#"):
            word = line[1:].split()[0] if line[1:].split() else ""
            if word in ("if", "ifdef", "ifndef"):
                frames.append(["TR_BUG_" in line, word == "ifndef", False])
            elif word == "else" and frames:
                frames[-1][2] = True
            elif word == "endif" and frames:
                frames.pop()
            continue
        if line.startswith("/*"):
            in_comment = "*/" not in line
            continue
        if not line or line.startswith(("//", "*")):
            continue
        if any(bug and in_else == ifndef for bug, ifndef, in_else in frames):
            continue
        out.append(no)
    return out


def load_functions(path: Path) -> list[dict]:
    entries = tomllib.loads(path.read_text()).get("function", [])
    for e in entries:
        if {"file", "name", "kind", "reason"} - set(e) or e["kind"] not in KINDS or not e["reason"].strip():
            raise SystemExit(
                f"{path}: function entry {e!r}: needs file, name, kind (one of {', '.join(KINDS)}) "
                "and a reason"
            )
    return entries


def load_reasons(path: Path) -> list[dict]:
    entries = tomllib.loads(path.read_text()).get("survivor", [])
    for e in entries:
        missing = {"file", "operator", "line", "mutant", "kind", "reason"} - set(e)
        if missing or e["kind"] not in KINDS or not e["reason"].strip():
            raise SystemExit(
                f"{path}: entry {e!r}: needs file, operator, line, mutant, kind (one of {', '.join(KINDS)}) "
                "and a reason"
            )
    return entries


def listed(m: Mutant, entries: list[dict]) -> dict | None:
    """The entry of ``m``: one naming its function first, else one naming no function."""
    same = [
        e
        for e in entries
        if (e["file"], e["operator"], e["line"], e["mutant"]) == (m.file, m.operator, m.line, m.mutant)
    ]
    return next((e for e in same if e.get("function") == m.function), None) or next(
        (e for e in same if "function" not in e), None
    )


def stub(m: Mutant) -> str:
    """The entry to fill in for an unlisted survivor."""
    function = f"function = {toml_str(m.function)}\n" if m.function else ""
    return (
        f"[[survivor]]\nfile = {toml_str(m.file)}\n{function}operator = {toml_str(m.operator)}\n"
        f'line = {toml_str(m.line)}\nmutant = {toml_str(m.mutant)}\nkind = "equivalent"\nreason = ""\n'
    )


def toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check(db: WorkDB, reasons: Path, name: str) -> int:
    entries = load_reasons(reasons)
    results = dict(db.results)
    by_id = mutants(db)
    killed = timeout = survived = skipped = pending = 0
    unlisted = []
    for job_id, m in sorted(by_id.items(), key=lambda kv: (kv[1].line_no, kv[1].operator)):
        r = results.get(job_id)
        if r is None:
            pending += 1
        elif r.worker_outcome == WorkerOutcome.SKIPPED:
            skipped += 1
        elif r.test_outcome == TestOutcome.KILLED or r.worker_outcome != WorkerOutcome.NORMAL:
            killed += 1
            timeout += r.output == "timeout"
        else:
            survived += 1
            e = listed(m, entries)
            if e is None:
                unlisted.append(m)
                print(
                    f"{name}: survivor without a listed reason: {m.file}:{m.line_no} {m.operator}: {m.mutant}"
                )
            else:
                print(f"{name}: survivor {m.file}:{m.line_no} {m.operator}: {e['kind']}: {e['reason']}")
    total = killed + survived
    score = f"{100 * killed / total:.0f} %" if total else "-"
    print(
        f"{name}: {len(by_id)} mutants: {killed} killed ({timeout} by timeout), {survived} survived "
        f"({survived - len(unlisted)} with a listed reason), {skipped} skipped (annotations, listed functions), "
        f"{pending} not run; score {score}"
    )
    if unlisted:
        print(f"{name}: {len(unlisted)} survivors without a listed reason; entries to fill in ({reasons}):")
        for m in unlisted:
            print(stub(m))
        return 1
    return 0


def check_c(d: Path, reasons: Path, name: str, file: str) -> int:
    """The C example's run (universalmutator's killed.txt and notkilled.txt in d) against the reasons."""
    entries = load_reasons(reasons)

    def names(f: str) -> list[str]:
        p = d / f
        return [n for n in p.read_text().split() if n] if p.exists() else []

    original = (d / "tr_epoll.c").read_text().splitlines()
    killed, survived = names("killed.txt"), names("notkilled.txt")
    same, not_compiled = set(names("same-object.txt")), set(names("not-compiled.txt"))
    log = (d / "analyze.log").read_text() if (d / "analyze.log").exists() else ""
    timeout = log.count("HAD TO TERMINATE")
    generated = len(list((d / "mutants").glob("*.c")))
    unlisted = []
    for n in sorted(survived, key=lambda n: int(n.split(".")[-2])):
        mutated = (d / "mutants" / n).read_text().splitlines()
        i = next(
            (i for i, (a, b) in enumerate(zip(original, mutated, strict=False)) if a != b), len(original) - 1
        )
        m = Mutant(
            n,
            file,
            "universalmutator",
            i + 1,
            original[i].strip(),
            mutated[i].strip() if i < len(mutated) else "",
        )
        e = listed(m, entries)
        if e is None:
            unlisted.append(m)
            print(f"{name}: survivor without a listed reason: {m.file}:{m.line_no} ({n}): {m.mutant}")
        else:
            print(f"{name}: survivor {m.file}:{m.line_no} ({n}): {e['kind']}: {e['reason']}")
    total = len(killed) + len(survived)
    score = f"{100 * len(killed) / total:.0f} %" if total else "-"
    print(
        f"{name}: {generated} mutants: {len(killed)} killed ({timeout} by timeout), {len(survived)} survived "
        f"({len(survived) - len(unlisted)} with a listed reason), {len(same)} skipped (same object code), "
        f"{len(not_compiled)} not compiling, {generated - total - len(same) - len(not_compiled)} not run "
        f"(the sample); score {score}"
    )
    if unlisted:
        print(f"{name}: {len(unlisted)} survivors without a listed reason; entries to fill in ({reasons}):")
        for m in unlisted:
            print(stub(m))
        return 1
    return 0


def only(db: WorkDB, listed_file: Path) -> tuple[int, int]:
    """Skip the mutants no survivor entry of ``listed_file`` names by file, operator and line; returns
    (kept, skipped)."""
    keys = {(e["file"], e["operator"], e["line"]) for e in load_reasons(listed_file)}
    lines: dict[str, list[str]] = {}
    results = dict(db.results)
    kept = skipped = 0
    for item in db.work_items:
        m = item.mutations[0]
        path = str(m.module_path)
        if path not in lines:
            lines[path] = Path(path).read_text().splitlines()
        if (path, m.operator_name, lines[path][m.start_pos[0] - 1].strip()) in keys:
            kept += 1
        elif item.job_id not in results:
            db.set_result(
                item.job_id,
                WorkResult(
                    worker_outcome=WorkerOutcome.SKIPPED, output=f"not a survivor {listed_file} lists"
                ),
            )
            skipped += 1
    return kept, skipped


def rerun_survivors(db: WorkDB) -> int:
    n = 0
    for job_id, r in list(db.results):
        if r.worker_outcome == WorkerOutcome.NORMAL and r.test_outcome == TestOutcome.SURVIVED:
            _clear(db, job_id)
            n += 1
    return n


def _clear(db: WorkDB, job_id: str) -> None:
    from cosmic_ray.work_db import WorkResultStorage

    # cosmic-ray has no call to forget one result: its own session maker, as WorkDB.clear uses it.
    with db._session_maker.begin() as session:
        session.query(WorkResultStorage).filter_by(job_id=job_id).delete()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("skip")
    s.add_argument("session")
    s.add_argument("--reasons", type=Path, required=True)
    c = sub.add_parser("check")
    c.add_argument("session")
    c.add_argument("--reasons", type=Path, required=True)
    c.add_argument("--name", default="mutation")
    cc = sub.add_parser("check-c")
    cc.add_argument("dir", type=Path)
    cc.add_argument("--reasons", type=Path, required=True)
    cc.add_argument("--name", default="c")
    cc.add_argument("--file", required=True)
    cl = sub.add_parser("c-lines")
    cl.add_argument("source", type=Path)
    r = sub.add_parser("rerun-survivors")
    r.add_argument("session")
    o = sub.add_parser("only")
    o.add_argument("session")
    o.add_argument("--listed", type=Path, required=True)
    a = p.parse_args(argv)
    if a.cmd == "check-c":
        return check_c(a.dir, a.reasons, a.name, a.file)
    if a.cmd == "c-lines":
        print("\n".join(map(str, c_code_lines(a.source.read_text()))))
        return 0
    with use_db(a.session) as db:
        if a.cmd == "skip":
            ann, fun = skip(db, a.reasons)
            print(
                f"{a.session}: skipped {ann} mutants in annotations, {fun} in the functions listed as a whole"
            )
            return 0
        if a.cmd == "check":
            return check(db, a.reasons, a.name)
        if a.cmd == "only":
            kept, skipped = only(db, a.listed)
            print(f"{a.session}: {kept} mutants on the lines {a.listed} lists, {skipped} others skipped")
            return 0
        print(f"{a.session}: {rerun_survivors(db)} survivors to run again")
        return 0


if __name__ == "__main__":
    sys.exit(main())
