"""The examples in the docstrings that need a broker run: ``broker`` and ``RHTC_BROKER`` are
set to a private redis-server for the module's examples, and the modules whose examples run
maps on the default broker (:data:`tests.kits.doctest.NEEDS_WORKERS`) get one worker on it.
The runner and the choice of which modules need a broker are in tests/kits/doctest.py; the
other modules' examples run in tests/unit/test_docstring_examples.py."""
from __future__ import annotations

import pytest

from tests.kits.doctest import MODULES, needs_broker, run_examples


@pytest.mark.parametrize("name", [m for m in MODULES if needs_broker(m)])
def test_the_examples_of_a_module_run(name, broker, tmp_path, monkeypatch, request):
    run_examples(name, tmp_path, monkeypatch, request, broker)
