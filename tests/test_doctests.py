"""The examples in the docstrings run (issue 17): every module of the package, imported by
its real name (``rhtc.broker.wire.config``), with doctest, in the README's test command.

An example that needs a broker gets one: ``broker`` and ``RHTC_BROKER`` are set to a
private redis-server for the module's examples. A module whose examples name nothing that
needs one (:data:`NEEDS_BROKER`) runs them without, in the quick tier too (tests/conftest.py);
one misjudged so would fail there naming the fix. An example that cannot run here (a real
site's HTCondor pool, CERN's XRootD) is marked ``# doctest: +SKIP`` in its module, with
the reason beside it."""
from __future__ import annotations

import doctest
import importlib
import importlib.util
import os
import pkgutil
import re
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


def _examples(module) -> list[doctest.DocTest]:
    return [t for t in doctest.DocTestFinder().find(module, module.__name__) if t.examples]


#: what, named in a module's examples, needs a broker (the bare name ``broker`` is the config
#: the runner passes in; ``rhtc.broker.x`` in an import is not a broker)
NEEDS_BROKER = re.compile(r"(?<![\w.])(broker|RHTC_BROKER|EmbeddedBroker|Storage|storage_for|remote_map|submit|"
                          r"imap_unordered|live_workers|last_map|LocalCluster|MapRun|redis)(?!\w)")


def _needs_broker(name: str) -> bool:
    """Whether the examples of module ``name`` need a broker (read from its source, not imported)."""
    if name in NEEDS_WORKERS:
        return True
    source = Path(importlib.util.find_spec(name).origin).read_text()
    examples = "\n".join(line for line in source.splitlines() if line.lstrip().startswith((">>>", "...")))
    return bool(NEEDS_BROKER.search(examples))


@pytest.mark.parametrize("name", [m for m in MODULES if _needs_broker(m)])
def test_the_examples_of_a_module_run(name, broker, tmp_path, monkeypatch, request):
    _run_examples(name, tmp_path, monkeypatch, request, broker)


@pytest.mark.parametrize("name", [m for m in MODULES if not _needs_broker(m)])
def test_the_examples_of_a_module_run_without_a_broker(name, tmp_path, monkeypatch, request):
    _run_examples(name, tmp_path, monkeypatch, request, None)


def _run_examples(name, tmp_path, monkeypatch, request, broker) -> None:
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    module = importlib.import_module(name)
    tests = _examples(module)
    if not tests:
        return
    work = tmp_path / "work"                         # examples that write files write here,
    work.mkdir()                                     # and ../shared/data/nanoaod is the samples
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    monkeypatch.chdir(work)
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
        n = sum(len(t.examples) for t in _examples(module))
        if ">>>" in source:
            assert n, f"{name} has >>> lines but no example is collected"
        found += n
    total = sum(p.read_text().count(">>>") for f in (*FOLDERS, "rhtc") for p in (root / f).glob("*.py"))
    assert found >= 0.8 * total, f"{found} examples collected of about {total} >>> lines"
