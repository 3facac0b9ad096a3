"""The README's table of the public calls names every name ``rhtc`` exports, and nothing
it does not: the front door is where an analyst looks first, so a new export (or a removed
one) that the table misses fails here rather than going unseen."""
from __future__ import annotations

import re
from pathlib import Path

import rhtc

README = Path(__file__).resolve().parents[2] / "README.md"


def _table_names() -> set[str]:
    text = README.read_text()
    section = text.split("## The public API", 1)[1].split("\n## ", 1)[0]
    names = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            first_cell = row.split("|")[1]
            names |= {re.match(r"[A-Za-z_][A-Za-z_0-9.]*", code).group(0) for code in re.findall(r"`([^`]+)`", first_cell)}
    return names


def test_the_readme_table_names_every_public_name():
    named = _table_names()
    public = set(rhtc.__all__) - {"__version__"}
    assert public <= named, f"README.md's public API table misses {sorted(public - named)}"
    unknown = {n for n in named if not n.startswith("rhtc.")} - public
    assert not unknown, f"README.md's public API table names what rhtc does not export: {sorted(unknown)}"
