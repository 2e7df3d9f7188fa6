"""The import graph of the workbench package has no circle, and the analysis cache's
code key covers everything the verdict imports.

Edges are read from the sources with ``ast``: every ``import`` and ``from … import`` inside the
package, at module level, inside functions and under ``TYPE_CHECKING`` alike (a function-level
import that closes a circle only hides it until the function runs). Importing ``a.b.c`` also runs
the packages ``a`` and ``a.b``, so those are edges too, except the importer's own packages (they
are initialised before it whatever it imports; ``from workbench.diagnose import X`` inside
``workbench.diagnose.rules.host_sync`` does count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

PKG = ROOT / "workbench"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _targets(name: str, mods: dict[str, Path], importer: str) -> set[str]:
    """``name`` and the packages importing it runs, as far as they are workbench modules; not the
    importer's own packages: they are initialised before it, whatever it imports."""
    return ({name} | (_ancestors(name) - _ancestors(importer))) & set(mods)


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, f in mods.items():
        package = mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    graph[mod] |= _targets(a.name, mods, mod)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]  # from pkg import module
                for target in subs or [base]:
                    graph[mod] |= _targets(target, mods, mod)
                if subs and len(subs) < len(node.names):  # and names of the package itself
                    graph[mod] |= _targets(base, mods, mod)
        graph[mod].discard(mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_circle():
    graph = import_graph()
    assert graph["workbench.pipeline.verdict"] >= {"workbench.pipeline.reduce", "workbench.diagnose"}  # the walk sees imports
    assert cycles(graph) == []


def test_a_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_cache_key_hashes_all_the_verdict_imports():
    """An edit to any module the analysis runs must recompute cached analyses (cache.code_key)."""
    from workbench.pipeline.cache import SOURCES

    graph, seen, todo = import_graph(), set(), ["workbench.pipeline.verdict"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    hashed = {f"workbench.{s.removesuffix('.py').replace('/', '.')}" for s in SOURCES}
    missing = sorted(m for m in seen - {"workbench"} if not any(m == h or m.startswith(h + ".") for h in hashed))
    assert missing == [], f"add them to workbench.pipeline.cache.SOURCES: {missing}"
