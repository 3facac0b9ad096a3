"""The client's shape (issue 11): no import cycles, upkeep acts on a map only through its
public verbs, modules stay small, and a task's moves obey the one transitions table."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path


from rhtc.client.engine.tasks import TRANSITIONS, TaskState, TaskTable, transitions_table

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


def test_upkeep_touches_no_private_attribute_of_the_map():
    tree = ast.parse((_folder("client") / "engine" / "upkeep.py").read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner in ("run", "self.run"):
                bad.append(f"line {node.lineno}: {owner}.{node.attr}")
    assert not bad, bad


def test_upkeep_does_not_parse_task_labels():
    text = (_folder("client") / "engine" / "upkeep.py").read_text()
    assert 'map_id + ":"' not in text and ".split(\":\")" not in text


def test_every_move_not_in_the_table_is_refused():
    for a in TaskState:
        for b in TaskState:
            t = TaskTable(1)
            if a != TaskState.QUEUED:
                path = [TaskState.QUEUED, a] if (TaskState.QUEUED, a) in TRANSITIONS else None
                if path is None:
                    continue
                assert t.move(0, a)
            assert t.move(0, b) == ((a, b) in TRANSITIONS)
            assert t.state(0) == (b if (a, b) in TRANSITIONS else a)


def test_counts_follow_moves_and_final_states_stay():
    t = TaskTable(5)
    assert t.unanswered == 5 and not t.finished
    t.move(0, TaskState.LEASED)
    t.move(0, TaskState.DONE)
    t.move(1, TaskState.REFUSED)
    t.move(2, TaskState.FAILED)
    assert not t.move(0, TaskState.QUEUED)        # a finished task is never requeued
    assert not t.move(2, TaskState.DONE)          # nor answered twice
    assert t.count(TaskState.DONE) == 1 and t.unanswered == 2 and t.unfinished == 3
    assert t.indices(TaskState.QUEUED, TaskState.LEASED) == [3, 4]
    t.move_all([3, 4], TaskState.CANCELLED)
    assert t.finished and t.indices(TaskState.REFUSED) == [1]
    assert "refused" in transitions_table()
