"""The checkout's modules as the layout tests read them (tests/unit/test_layout.py): the
top-level folders, where each lives, its modules by dotted name, and the modules of rhtc
that a file imports, read from its source with :mod:`ast` (no import runs)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

FOLDERS = ("broker", "worker", "client", "condor", "bench")
_SUBFOLDERS_OF = FOLDERS          # a folder with sub-packages (client/engine/...)


def _folder(name: str) -> Path:
    """Where the installed ``rhtc.<name>`` lives (the top-level folder of the checkout)."""
    return Path(importlib.import_module(f"rhtc.{name}").__file__).parent


def _package(path: Path) -> list[str]:
    """The package a module of the checkout belongs to: ``["rhtc", "client", "engine"]``
    for client/engine/maprun.py (the top-level folder is ``rhtc.<folder>``)."""
    parts = [path.parent.name]
    here = path.parent
    while (here.parent / "__init__.py").exists() and here.parent.name in _SUBFOLDERS_OF:
        here = here.parent
        parts.insert(0, here.name)
    return ["rhtc", *parts]


def modules(folder: str) -> dict[str, Path]:
    """Every module of a top-level folder and its sub-packages, by dotted name."""
    root = _folder(folder)
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).with_suffix("")
        out[".".join(["rhtc", folder, *rel.parts])] = p
    return out


def _imports(path: Path) -> set[str]:
    """Modules of rhtc that ``path`` imports anywhere (also inside functions: a lazy import
    only hides a cycle), except under ``if TYPE_CHECKING``. Relative imports between the
    folders (``from ..broker import storage`` in ``worker/``) are resolved."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    package = _package(path)
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module == "rhtc" or module.startswith("rhtc."):
                out.add(module)
                out.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("rhtc."))
    return out
