"""``reference/task-states.md``: a task's states and the one table of moves between them,
from :mod:`rhtc.client.engine.tasks` (``TaskState``, ``TRANSITIONS``), drawn as a graph; and
the broker's side of the same states from the docstring of :mod:`rhtc.broker.wire.keys`."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from .md import generated_note, table


def state_descriptions(doc: str) -> dict[str, str]:
    """``NAME  text...`` lines of the ``States`` block of the tasks module's docstring."""
    out: dict[str, str] = {}
    block = doc.split("States (", 1)[-1].split("\n\n", 2)
    body = block[1] if len(block) > 1 else ""
    name = None
    for line in body.splitlines():
        m = re.match(r"\s+([A-Z]+)\s{2,}(.*)", line)
        if m:
            name = m.group(1)
            out[name] = m.group(2).strip()
        elif name and line.strip():
            out[name] += " " + line.strip()
    return out


def broker_table(doc: str) -> str:
    """The broker's task-state table (RST) of the keys module's docstring, or ''."""
    part = doc.split("A task's states and moves", 1)
    if len(part) < 2:
        return ""
    lines = part[1].splitlines()[2:]      # past the title's underline
    rest = "\n".join(lines).split("\n\nThe client's table", 1)[0]
    return rest.strip("\n")


def page(srcdir: Path, warn: Callable[[str], None]) -> str:
    from rhtc.broker.wire import keys
    from rhtc.client.engine import tasks
    described = state_descriptions(tasks.__doc__ or "")
    for s in tasks.TaskState:
        if s.name not in described:
            warn(f"the task state {s.name} has no line in the States block of client/engine/tasks.py's docstring")
    final = {s for s in tasks.TaskState if not any(a == s for a, _ in tasks.TRANSITIONS)}
    dot = ["digraph task_states {", '  rankdir=LR; node [shape=box, style=rounded, fontname="sans-serif"];',
           '  edge [fontname="sans-serif", fontsize=9];']
    for s in tasks.TaskState:
        dot.append(f'  {s.name.lower()} [label="{s.name.lower()}"{", peripheries=2" if s in final else ""}];')
    for a, b in tasks.TRANSITIONS:
        dot.append(f"  {a.name.lower()} -> {b.name.lower()};")
    dot.append("}")
    broker = broker_table(keys.__doc__ or "")
    return "\n".join([
        "# Task states", "",
        generated_note("`client/engine/tasks.py` (`TaskState`, `TRANSITIONS`) and `broker/wire/keys.py`"),
        "Each task of a map is in one named state on the client. Every move goes through one "
        "table, which refuses any pair it does not list (a bug in rhtc, raised as "
        "{class}`~rhtc.client.engine.tasks.InvalidTransition`). Final states are drawn doubled.", "",
        "```{graphviz}", ":caption: the moves of a task on the client (`TRANSITIONS`)", "",
        *dot, "```", "",
        "## States", "",
        table(["state", "meaning"], [(f"`{s.name.lower()}`", described.get(s.name, "")) for s in tasks.TaskState]),
        "## Moves", "",
        f"`transitions_table()` prints the same {len(tasks.TRANSITIONS)} moves as text.", "",
        table(["from", "to", "why"], [(f"`{a.name.lower()}`", f"`{b.name.lower()}`", why)
                                      for (a, b), why in tasks.TRANSITIONS.items()]),
        *(["## In Redis", "",
           "The broker's side of the same states: which key holds a task in each, and who moves it "
           "(from the docstring of `broker/wire/keys.py`; the keys are on [Redis keys](keys.md)). "
           "`refused` exists only on the client.", "",
           "```{eval-rst}", broker, "```", ""] if broker else []),
        *redis_moves(),
    ])


def redis_moves() -> list[str]:
    """The broker's one table of a task's moves in Redis (:mod:`rhtc.broker.taskmoves`)."""
    from rhtc.broker import taskmoves as tm
    return ["## Moves in Redis", "",
            f"Every move of a task between the places that hold it in Redis, and the script of "
            f"`broker/lua/` (or the plain command) that makes it: {len(tm.MOVES)} moves, from "
            "`broker/taskmoves.py`. Scripts that move no task: "
            + ", ".join(f"`{n}` ({why})" for n, why in tm.STILL.items()) + ".", "",
            table(["from", "to", "by", "why"], [(f"`{m.source}`", f"`{m.target}`", f"`{m.by}`", m.why)
                                                 for m in tm.MOVES])]
