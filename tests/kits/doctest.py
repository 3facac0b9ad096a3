"""The docstring examples' runner, shared by the two halves of the test that runs them:
tests/unit/test_docstring_examples.py (the modules whose examples need no broker, and the
check that no example is left out) and tests/integration/test_docstring_examples_with_a_broker.py.

Every module of the package is imported by its real name (``rhtc.broker.wire.config``) and its
examples run with doctest. An example that needs a broker gets one: ``broker`` and
``RHTC_BROKER`` are set to a private redis-server for the module's examples. A module whose
examples name nothing that needs one (:data:`NEEDS_BROKER`) runs them without, in the quick
tier too (tests/conftest.py); one misjudged so would fail there naming the fix. Each module's
examples run once: :func:`needs_broker` puts it in exactly one of the two halves. An example
that cannot run here (a real site's HTCondor pool, CERN's XRootD) is marked
``# doctest: +SKIP`` in its module, with the reason beside it."""
from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
import tempfile
from pathlib import Path

import pytest

import rhtc
from tests.samples import NANOAOD
from rhtc._checkout import FOLDERS

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
#: modules whose examples run maps on the default broker: they get one worker on it
NEEDS_WORKERS = {"rhtc", "rhtc.client", "rhtc.client.api", "rhtc.client.handle", "rhtc.client.handleview"}
#: what the examples call ``../shared``: the folder that holds the samples (tests/samples.py
#: finds them beside the checkout, at /work/shared, or at $RHTC_NANOAOD), wherever the checkout is
SHARED = NANOAOD.parent.parent
#: modules that cannot be imported without an optional extra that is not installed here
OPTIONAL = {"rhtc.coffea": "coffea", "rhtc.client.coffea": "coffea", "rhtc.client.data.coffea_parity": "coffea",
            "rhtc.client.data.coffea_items": "coffea", "rhtc.client.data.coffea_events": "coffea",
            "rhtc.bench.agc": "coffea", "rhtc.client.ops.dashboard": "tornado", "rhtc.client.ops.dashmetrics": "prometheus_client"}


def _modules() -> list[str]:
    names = [m.name for m in pkgutil.iter_modules(rhtc.__path__, "rhtc.")]
    for folder in FOLDERS:
        package = importlib.import_module(f"rhtc.{folder}")
        names.append(package.__name__)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
                  if not m.name.endswith("__main__")]     # sub-packages too (client/engine/...)
    return sorted(set(names))


MODULES = _modules()


def examples_of(module) -> list[doctest.DocTest]:
    return [t for t in doctest.DocTestFinder().find(module, module.__name__) if t.examples]


#: what, named in a module's examples, needs a broker (the bare name ``broker`` is the config
#: the runner passes in; ``rhtc.broker.x`` in an import is not a broker)
NEEDS_BROKER = re.compile(r"(?<![\w.])(broker|RHTC_BROKER|EmbeddedBroker|Storage|storage_for|remote_map|submit|"
                          r"imap_unordered|live_workers|last_map|LocalCluster|MapRun|redis)(?!\w)")


def needs_broker(name: str) -> bool:
    """Whether the examples of module ``name`` need a broker (read from its source, not imported)."""
    if name in NEEDS_WORKERS:
        return True
    source = Path(importlib.util.find_spec(name).origin).read_text()
    examples = "\n".join(line for line in source.splitlines() if line.lstrip().startswith((">>>", "...")))
    return bool(NEEDS_BROKER.search(examples))


def run_examples(name, tmp_path, monkeypatch, request, broker) -> None:
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    module = importlib.import_module(name)
    tests = examples_of(module)
    if not tests:
        return
    work = tmp_path / "work"                         # examples that write files write here,
    work.mkdir()                                     # and ../shared/data/nanoaod is the samples
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # tempfile.mkdtemp() in an example too
    if broker is not None:
        for key, value in broker.config.env().items():
            monkeypatch.setenv(key, value)
    if name in NEEDS_WORKERS:
        request.getfixturevalue("workers").start(1)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    failures = []
    for test in tests:
        if broker is not None:
            test.globs = dict(test.globs, broker=broker.config)
        out = []
        result = runner.run(test, out=out.append, clear_globs=True)
        if result.failed:
            failures.append("".join(out))
    assert not failures, "\n".join(failures)
