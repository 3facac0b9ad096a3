"""The map's upkeep (client/engine/upkeep.py) acts on a map only through its public verbs:
read from its source, it touches no private attribute of the map and parses no task label."""
from __future__ import annotations

import ast

from tests.kits.layout import _folder


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
