"""No import cycle in reference/tailreactor: a port can build its modules in dependency order.

Every import counts, also one inside a function or under ``if __name__ ==
"__main__"``: a function-level import that closes a circle still means two
modules that each need the other.  Edges are the modules named by
``import``/``from ... import`` statements (a ``from package import name``
counts the submodule when ``name`` is one).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "reference" / "tailreactor"


def module_name(path: Path) -> str:
    parts = ("tailreactor",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The tailreactor modules that ``name`` (at ``path``) imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = {f"{target}.{a.name}" for a in node.names} & known
            out |= subs or ({target} & known)
    return out - {name}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path of module names, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_checker_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_tailreactor():
    mods = modules()
    graph = {name: imports(name, path, set(mods)) for name, path in mods.items()}
    assert "tailreactor.config" in graph["tailreactor.reactor"], (
        "precondition: the graph sees relative imports"
    )
    found = cycle(graph)
    assert found is None, f"import cycle in reference/tailreactor: {' -> '.join(found)}"


# -- the tail-latency job (scripts/ci/tailjob): no cycle, and no import from a lower layer up ---------
JOB = Path(__file__).resolve().parents[1] / "scripts" / "ci" / "tailjob"


def job_modules() -> dict[str, Path]:
    def name(p: Path) -> str:
        parts = ("tailjob",) + p.relative_to(JOB).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    return {name(p): p for p in JOB.rglob("*.py")}


def job_graph() -> dict[str, set[str]]:
    mods = job_modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def upward(graph: dict[str, set[str]], layers) -> list[str]:
    """Every import of a module by one of a layer above it (``layers``: the base first)."""
    rank = {m: i for i, layer in enumerate(layers) for m in layer}
    return sorted(f"{a} -> {b}" for a, bs in graph.items() for b in bs if rank[b] > rank[a])


def test_the_checker_finds_an_upward_import():
    assert upward({"low": {"high"}, "high": set()}, [("low",), ("high",)]) == ["low -> high"]
    assert upward({"low": set(), "high": {"low"}}, [("low",), ("high",)]) == []


def test_the_job_has_no_import_cycle_and_no_upward_import():
    import sys

    sys.path.insert(0, str(JOB.parent))
    from tailjob import LAYERS

    graph = job_graph()
    assert "tailjob.stats" in graph["tailjob.runner"], "precondition: the graph sees relative imports"
    declared = [m for layer in LAYERS for m in layer]
    assert sorted(declared) == sorted(graph), "every module of tailjob in exactly one layer of LAYERS"
    found = cycle(graph)
    assert found is None, f"import cycle in tailjob: {' -> '.join(found)}"
    assert upward(graph, LAYERS) == [], "an import from a lower layer up (tailjob.LAYERS)"


def test_the_job_loads_no_module_by_file_path():
    for path in job_modules().values():
        text = path.read_text(encoding="utf-8")
        assert "spec_from_file_location" not in text and "SourceFileLoader" not in text, path
