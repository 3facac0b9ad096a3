"""The layout users asked for (top-level folders), seen the same way by the code and by
tools that never run it: each folder imports only what DESIGN.md's table allows, and
relatively, and no import cycle; the package top needs no benchmark, the examples use the
public API only, and the package's path walks the checkout's folders, each once. That a
second checkout (a worktree) runs its own folders, not an installed copy's:
tests/scenarios/test_a_second_checkout_runs_its_own_folders.py."""
from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import rhtc
from tests.kits.layout import FOLDERS, _folder, _imports, modules

#: DESIGN.md's "may import" column: which folders a folder's modules may use. Every
#: folder may use the package top (``rhtc``, ``rhtc.errors``, ``rhtc.context``...).
MAY_IMPORT = {
    "broker": set(),
    "worker": {"broker"},
    "client": {"broker"},
    "condor": {"broker"},
    "bench": {"broker", "client", "worker", "condor", "examples"},  # it times the examples
}


def _folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "rhtc" and parts[1] in FOLDERS + ("examples",) else None


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_folders_import_only_what_the_design_allows(folder):
    wrong = sorted(f"{p.name} imports {m}" for p in modules(folder).values() for m in _imports(p)
                   if _folder_of(m) not in (None, folder, *MAY_IMPORT[folder]))
    assert not wrong, f"{folder}/ breaks DESIGN.md's layering: " + "; ".join(wrong)


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_imports_between_folders_are_relative(folder):
    """A reader who never runs the code sees which sibling folder a file uses:
    ``from ..broker import storage``, not ``from rhtc.broker import storage`` (which
    names no folder of the checkout)."""
    absolute = []
    for p in modules(folder).values():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module \
                    and _folder_of(node.module):
                absolute.append(f"{p.name}:{node.lineno} from {node.module}")
            elif isinstance(node, ast.Import):
                absolute += [f"{p.name}:{node.lineno} import {a.name}" for a in node.names
                             if _folder_of(a.name)]
    assert not absolute, f"write these imports relative: {absolute}"


def _graph() -> dict[str, set[str]]:
    mods = {m: p for f in FOLDERS for m, p in modules(f).items() if p.stem != "__init__"}
    return {m: {i for i in _imports(p) if i in mods and i != m} for m, p in mods.items()}


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_package_top_needs_no_benchmark():
    """``rhtc/`` (the public API's names, its own modules) reaches no ``rhtc.bench``
    module: an analyst's import never loads the benchmarks, and the benchmarks may change
    without changing the API."""
    top = Path(rhtc.__file__).resolve().parent
    named = sorted(f"rhtc.{name} -> {where}" for name, where in rhtc._API.items() if where.startswith("rhtc.bench"))
    imported = sorted(f"{p.name} imports {m}" for p in top.glob("*.py") for m in _imports(p)
                      if m.startswith("rhtc.bench"))
    assert not named and not imported, f"rhtc/ depends on bench/: {named + imported}"


def test_examples_use_the_public_api_only():
    used = set()
    for p in _folder("examples").glob("*.py"):
        used |= {m for m in _imports(p) if m != "rhtc"}
    public = {f"rhtc.{name}" for name in rhtc.__all__} | {"rhtc.coffea"}
    assert used <= public, f"examples import private modules: {sorted(used - public)}"


def test_the_repository_root_is_not_on_the_package_path():
    root = Path(rhtc.__file__).resolve().parent.parent
    assert all(Path(p).resolve() != root for p in rhtc.__path__), rhtc.__path__


def test_walk_packages_ends_and_names_no_package_twice():
    names = [m.name for m in pkgutil.walk_packages(rhtc.__path__, "rhtc.")]
    assert len(names) == len(set(names)) and not any(n.startswith("rhtc.rhtc") for n in names), names


#: client/'s parts (DESIGN.md): which parts and top-level modules of client/ each part may
#: use. The engine runs one map; data access runs on the workers; reports describe a map
#: after the fact; the operator tools and the analyst's API on top may use everything.
CLIENT_PARTS_MAY_IMPORT = {
    "engine": {"engine", "errors", "arguments"},
    "data": {"data", "errors", "arguments"},           # runs on the workers: never the engine
    "reports": {"reports"},
    "synthetic": {"synthetic"},                          # files to try things on: nothing of the client
}


@pytest.mark.parametrize("part", sorted(CLIENT_PARTS_MAY_IMPORT))
def test_the_parts_of_client_import_only_what_the_design_allows(part):
    allowed = CLIENT_PARTS_MAY_IMPORT[part]
    wrong = []
    for name, p in modules("client").items():
        if name.split(".")[2:3] != [part]:
            continue
        for m in _imports(p):
            bits = m.split(".")
            if bits[:2] == ["rhtc", "client"] and len(bits) > 2 and bits[2] not in allowed:
                wrong.append(f"{p.name} imports {m}")
    assert not wrong, f"client/{part}/ reaches outside its part: " + "; ".join(sorted(wrong))
