"""``bench dimuon``'s guard on its peers (bench/dimuon_dask.py): a dask that cannot start
within its bound is reported in one line and leaves no process behind. Starts a dask
cluster: the full suite only. The bench's pure guards: tests/unit/bench/test_dimuon_runs.py."""
from __future__ import annotations

import psutil
import pytest

from rhtc.client import make_chunks
from tests.conftest import NANOAOD, needs_nanoaod


@pytest.mark.heavy  # starts a dask cluster
@needs_nanoaod
@pytest.mark.timeout(120)
def test_a_dask_that_cannot_start_in_time_is_one_line_and_leaves_nothing():
    pytest.importorskip("dask.distributed")
    from rhtc.bench.dimuon_dask import run_dask
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    chunks = make_chunks(str(NANOAOD / "nano_dy.root"), step=20)
    out = run_dask(chunks, chunks[:1], workers=2, cache_bytes=10**8, start_bound=0.5, progress=False)
    assert "dask did not start within" in out.get("error", ""), out
    assert "cold_s" not in out
    assert "--dask-workers" in out["error"] and "\n" not in out["error"]
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], left
