"""No import circles in ``rhtc``, read from the source with :mod:`ast` (no import runs).

Every import counts: at the top of a module, inside a function (a lazy import only hides
a circle) and under ``if TYPE_CHECKING:`` (a circle closed for the type checker is still
two ideas that lean on each other). Two graphs are checked:

* modules: ``rhtc.client.engine.merged -> rhtc.client.engine.options -> ...``;
* layers: the same edges with each sub-package taken as one node (``rhtc.client.ops``,
  ``rhtc.client.engine``...), beside the top-level modules of its folder. A sub-package is
  one layer: ``ops/cli.py -> api.py`` and ``handleview.py -> ops/dashboard.py`` make a
  circle between the analyst's API and the operator's tools even though no module of
  one imports back the very module that imported it.

A package's ``__init__`` only re-exports its modules (and Python imports it before any
of them anyway): it is no node.
"""
from __future__ import annotations

import ast
import importlib
from collections import deque
from pathlib import Path

import rhtc

FOLDERS = ("broker", "worker", "client", "condor", "bench", "examples")

#: The only edges allowed to close a circle, each with why.
EXEMPT: dict[tuple[str, str], str] = {}


def source_modules() -> dict[str, Path]:
    """Every module of the ``rhtc`` distribution by dotted name, ``__init__`` files too."""
    roots = {"rhtc": Path(rhtc.__file__).parent}
    roots.update({f"rhtc.{f}": Path(importlib.import_module(f"rhtc.{f}").__file__).parent for f in FOLDERS})
    out = {}
    for top, root in roots.items():
        for p in sorted(root.rglob("*.py")):
            rel = p.relative_to(root).with_suffix("").parts
            if top == "rhtc" and len(rel) > 1:
                continue                  # (rhtc/ holds only its own modules)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join([top, *rel])] = p
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(module of rhtc, line) for every import in ``path``: at module level, in functions
    and under ``if TYPE_CHECKING``. ``from X import y`` names the module ``X.y`` when that
    is a module, else ``X``."""
    package = name.split(".") if path.stem == "__init__" else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                out.append((sub if sub in known else module, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
    return [(m, line) for m, line in out if m in known]


def module_graph() -> dict[str, dict[str, int]]:
    """Module -> {module it imports: first line}, packages' ``__init__`` left out, the
    :data:`EXEMPT` edges too."""
    known = source_modules()
    inits = {m for m, p in known.items() if p.stem == "__init__"}
    graph: dict[str, dict[str, int]] = {}
    for m, p in known.items():
        if m in inits:
            continue
        edges = graph.setdefault(m, {})
        for target, line in imports_of(m, p, known):
            if target not in inits and target != m and (m, target) not in EXEMPT:
                edges.setdefault(target, line)
    return graph


def layer_of(module: str) -> str:
    """``rhtc.client.engine.state`` -> ``rhtc.client.engine``; a folder's top-level module
    is its own layer (``rhtc.client.api``)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 else module


def layer_graph(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, str]]:
    """Layer -> {layer it imports: the first module edge that makes it, as text}."""
    out: dict[str, dict[str, str]] = {}
    for m, edges in sorted(graph.items()):
        here = out.setdefault(layer_of(m), {})
        for target, line in sorted(edges.items()):
            if layer_of(target) != layer_of(m):
                here.setdefault(layer_of(target), f"{m}:{line} imports {target}")
    return out


def cycles(graph: dict[str, dict]) -> list[list[str]]:
    """The circles of ``graph``: for each strongly connected part (Tarjan), the shortest
    circle through each of its nodes, each circle once."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    parts: list[list[str]] = []

    def connect(v: str) -> None:           # (the graph is small: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    out, seen = [], set()
    for part in sorted(parts):
        for start in part:
            circle = _shortest_circle(graph, set(part), start)
            edges = frozenset(zip(circle, circle[1:]))
            if edges not in seen:
                seen.add(edges)
                out.append(circle)
    return out


def _shortest_circle(graph: dict[str, dict], inside: set[str], start: str) -> list[str]:
    came: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return [*reversed(path), start]
            if w in inside and w not in came:
                came[w] = v
                todo.append(w)
    raise AssertionError(f"{start} is in no circle of {sorted(inside)}")   # pragma: no cover


def _show(graph: dict[str, dict], circle: list[str]) -> str:
    steps = [f"{a} -> {b} ({graph[a][b]})" for a, b in zip(circle, circle[1:])]
    return "\n    ".join(steps)


def test_no_module_imports_itself_back():
    graph = module_graph()
    found = cycles(graph)
    assert not found, "import circles between modules (move what both need to a module below them):\n  " + \
        "\n  ".join(_show(graph, c) for c in found)


def test_no_layer_imports_itself_back():
    graph = layer_graph(module_graph())
    found = cycles(graph)
    assert not found, "import circles between layers (a sub-package is one layer):\n  " + \
        "\n  ".join(_show(graph, c) for c in found)


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The reader is not blind: an import in a function and one under TYPE_CHECKING count."""
    graph = module_graph()
    assert "rhtc.client.engine.maprun" in graph["rhtc.client.api"]          # at module level
    assert "rhtc.client.api" not in graph.get("rhtc.client.data.chunks", {})   # exempt (being moved)
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c", "a"]]
    probe = tmp_path / "f.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import g\n"
                     "def h():\n    from .k import v\n")
    got = imports_of("rhtc.x.f", probe, {"rhtc.x.f": probe, "rhtc.x.g": probe, "rhtc.x.k": probe})
    assert [m for m, _ in got] == ["rhtc.x.g", "rhtc.x.k"]
