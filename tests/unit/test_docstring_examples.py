"""The examples in the docstrings run, in the README's test command: every module of the
package whose examples need no broker, imported by its real name (``rhtc.broker.wire.config``),
with doctest (the runner: tests/kits/doctest.py); and no module's examples are silently left out.
The modules whose examples need a broker run in
tests/integration/test_docstring_examples_with_a_broker.py."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import rhtc
from rhtc._checkout import FOLDERS
from tests.kits.doctest import MODULES, OPTIONAL, examples_of, needs_broker, run_examples


@pytest.mark.parametrize("name", [m for m in MODULES if not needs_broker(m)])
def test_the_examples_of_a_module_run_without_a_broker(name, tmp_path, monkeypatch, request):
    run_examples(name, tmp_path, monkeypatch, request, None)


def test_the_examples_are_not_silently_left_out():
    """Every module with ``>>>`` in its source is found by the runner above, and the
    examples add up to what the sources hold (so a module that stops importing, or a
    change of collection, cannot make them stop running unseen)."""
    root = Path(rhtc.__file__).resolve().parent.parent
    found = 0
    for name in MODULES:
        if name in OPTIONAL:
            continue
        module = importlib.import_module(name)
        source = Path(module.__file__).read_text()
        n = sum(len(t.examples) for t in examples_of(module))
        if ">>>" in source:
            assert n, f"{name} has >>> lines but no example is collected"
        found += n
    total = sum(p.read_text().count(">>>") for f in (*FOLDERS, "rhtc") for p in (root / f).glob("*.py"))
    assert found >= 0.8 * total, f"{found} examples collected of about {total} >>> lines"


def test_no_example_writes_to_a_fixed_path_under_tmp():
    """An example writes where it runs (the runner's directory, in pytest's ``tmp_path``) or
    where ``tempfile`` puts it (the runner points that there too): a literal ``/tmp/...`` path
    outlived every run (``/tmp/codecs``, ``/tmp/nano``: files no test owned)."""
    root = Path(rhtc.__file__).resolve().parent.parent
    found = [f"{p.relative_to(root)}:{n}: {line.strip()}"
             for f in (*FOLDERS, "rhtc") for p in sorted((root / f).rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if line.lstrip().startswith((">>>", "...")) and "/tmp" in line and "+SKIP" not in line]
    assert not found, "examples that write under /tmp (write a relative path instead):\n" + "\n".join(found)
