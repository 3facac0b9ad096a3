"""A worker loads only what it runs: reading a chunk on a worker loads the chunk code
(:mod:`client.data`) and never the client's map engine, its API, handles or operator
tools. ``rhtc.client.data`` is imported by the workers; importing it runs
``client/__init__.py``, which must stay lazy, and nothing under ``client/data/`` may reach
back up to the API (``make_chunks(remote=True)`` lives in ``client/chunking.py`` for
that reason).

A real worker process runs a real chunk task over the NanoAOD sample, and reports the
``rhtc`` modules loaded in it; a bare interpreter imports the chunk code. The list of what
must never load (:data:`tests.kits.worker.NEVER`) names only modules that exist:
tests/unit/test_worker_imports.py."""
from __future__ import annotations

import pytest

import sys

from rhtc.client import make_chunks, remote_map
from tests.conftest import NANOAOD, needs_nanoaod
from tests.helpers import register_by_value
from tests.kits.worker import NEVER

register_by_value(__name__)


def read_then_list_modules(chunk):
    arrays = chunk.arrays(["Muon_pt", "nMuon"], how=dict)
    return int(len(arrays["nMuon"])), sorted(m for m in sys.modules if m.startswith("rhtc."))


def loaded_by_mistake(modules: list[str]) -> list[str]:
    """The modules of ``modules`` that a worker must never load (see :data:`NEVER`).

    >>> loaded_by_mistake(["rhtc.client.data.chunks", "rhtc.client.engine.maprun", "rhtc.client.api"])
    ['rhtc.client.engine.maprun', 'rhtc.client.api']
    """
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in NEVER)]


@needs_nanoaod
def test_a_worker_reading_chunks_loads_no_client_engine(workers):
    workers.start(1)
    chunks = make_chunks(str(NANOAOD / "nano_dy.root"), step=20)
    results = remote_map(read_then_list_modules, chunks, timeout=120)
    assert sum(n for n, _ in results) == chunks[-1].entry_stop
    for _, modules in results:
        assert "rhtc.client.data.chunks" in modules, modules      # the check sees what was read
        wrong = loaded_by_mistake(modules)
        assert not wrong, f"a worker reading a chunk loaded the client's engine or API: {wrong}"


@pytest.mark.heavy
def test_importing_the_chunk_code_loads_no_engine():
    """The same in a bare interpreter: ``import rhtc.client.data.chunks``."""
    import subprocess
    code = ("import sys, rhtc.client.data.chunks, rhtc.worker.main\n"
            "print('\\n'.join(m for m in sys.modules if m.startswith('rhtc.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wrong = loaded_by_mistake(out.stdout.split())
    assert not wrong, f"importing the chunk code loaded: {wrong}"
    assert "rhtc.client.data.chunks" in out.stdout.split()
