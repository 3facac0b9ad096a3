"""``reference/keys.md``: every Redis key of :data:`rhtc.broker.wire.keys.TEMPLATES`, with the
type and the owner the key table of the module's docstring gives it."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from .md import generated_note, table


def _normal(template: str) -> str:
    """A key template with its fields blanked: ``{ns}:q:w:{worker}`` -> ``{}:q:w:{}``."""
    return re.sub(r"\{[^}]*\}", "{}", template)


def described_rows(doc: str) -> list[tuple[list[str], str, str]]:
    """The rows of the first ``====`` table of ``doc``: (key spellings, type, description)."""
    lines = doc.splitlines()
    borders = [i for i, line in enumerate(lines) if re.fullmatch(r"\s*=+(\s+=+)+\s*", line)]
    if len(borders) < 3:
        return []
    top, head, bottom = borders[:3]
    cols = [m.start() for m in re.finditer(r"=+", lines[top])]
    rows: list[list[str]] = []
    for line in lines[head + 1:bottom]:
        first, kind, rest = line[:cols[1]].strip(), line[cols[1]:cols[2]].strip(), line[cols[2]:].strip()
        if first:
            rows.append([first, kind, rest])
        elif rows:
            rows[-1][2] += " " + rest
    out = []
    for first, kind, text in rows:
        spans = re.findall(r"``([^`]+)``", first)
        keys: list[str] = []
        for span in spans:      # ``{ns}:floor:q`` / ``:res``: the second one shares the first's stem
            keys.append(keys[-1].rsplit(":", 1)[0] + span if span.startswith(":") and keys else span)
        out.append((keys, kind, text))
    return out


def key_rows(warn: Callable[[str], None] | None = None) -> list[tuple[str, str, str, str, str]]:
    """(name, template, type, description, owned by a map) for every key template."""
    from rhtc.broker.wire import keys
    described = described_rows(keys.__doc__ or "")
    rows = []
    for name, template in keys.TEMPLATES.items():
        t = _normal(template)
        match = next(((k, d) for spellings, k, d in described for s in spellings
                      if _normal(s) == t or _normal(s).startswith(t + ":")), None)
        if match is None:
            if warn:
                warn(f"the key {template!r} ({name!r} in rhtc.broker.wire.keys.TEMPLATES) has no row in the "
                     f"key table of the module's docstring: add one (type, what, who deletes it)")
            match = ("?", "(not described in broker/wire/keys.py)")
        owned = "yes" if name in keys.MAP_OWNED else ""
        rows.append((name, template, match[0], match[1], owned))
    return rows


def page(srcdir: Path, warn: Callable[[str], None]) -> str:
    rows = key_rows(warn)
    return "\n".join([
        "# Redis keys", "",
        generated_note("`broker/wire/keys.py` (its `TEMPLATES` and the key table of its docstring)"),
        "Every key the project writes lives under the namespace `{ns}` (`rhtc:<user>` by default; "
        "`RHTC_NAMESPACE`). No folder but `broker/` spells a key: the Lua scripts get these names "
        "from the same table. *Map* marks the keys a map owns: they are deleted together when the "
        "map ends. A task's states and the keys that hold it in each are on "
        "[Task states](task-states.md).", "",
        f"{len(rows)} keys:", "",
        table(["name", "key", "type", "what, and who deletes it", "map"],
              [(f"`{n}`", f"`{t}`", k, d, o) for n, t, k, d, o in rows]),
    ])
