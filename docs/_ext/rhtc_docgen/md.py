"""Markdown helpers shared by the generators."""
from __future__ import annotations

import re
from typing import Iterable, Sequence


def cell(text: object) -> str:
    """One table cell: one line, pipes escaped, RST roles and literals made Markdown."""
    s = " ".join(str(text).split())
    s = re.sub(r":(?:[a-z]+:)?[a-z]+:`~?([^`<]+?)(?:\s*<[^>]+>)?`", r"`\1`", s)   # :class:`x` -> `x`
    s = s.replace("``", "`")
    return s.replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-style Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def machine_text(m: dict) -> str:
    """A result's machine in one line: hostname, cores, memory, CPU model, system."""
    mem = m.get("memory_bytes")
    parts = [m.get("hostname"), f"{m['cores']} cores" if m.get("cores") else None,
             f"{mem / 2**30:.1f} GiB" if mem else None, m.get("cpu_model"), m.get("system")]
    return ", ".join(str(p) for p in parts if p)


def generated_note(source: str) -> str:
    return (f"```{{note}}\nThis page is generated from {source} when the documentation is built: "
            f"change the code, not the page.\n```\n")


def autodoc(directive: str, name: str, *options: str) -> list[str]:
    """An autodoc directive in a Markdown page: inside ``eval-rst`` (autodoc writes RST,
    which MyST would otherwise read as Markdown)."""
    return ["```{eval-rst}", f".. {directive}:: {name}", *(f"   :{o}" if ": " in o else f"   :{o}:" for o in options), "```", ""]
