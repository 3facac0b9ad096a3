"""The worker's branch cache (worker/cache.py): capped in bytes, least recently used out
first, the chunks it lets go of reported (the worker withdraws them from routing), and
the branches of one collection sharing their offsets. In this process, no worker: the
worker's side of it is in tests/scenarios/test_nanoaod_chunks_cached_routed_and_reduced.py."""
from __future__ import annotations

import numpy as np

from rhtc.client import make_chunks
from rhtc.worker.cache import BranchCache
from tests.conftest import NANOAOD, needs_nanoaod


def test_lru_by_bytes_and_evicted_chunks_are_reported():
    c = BranchCache(limit_bytes=100)
    a, b = c.view("chunk-a"), c.view("chunk-b")
    a["a1"] = np.zeros(10, np.float32)            # 40 bytes
    b["b1"] = np.zeros(10, np.float32)            # 80
    assert a.get("a1") is not None                # a1 is now the most recent
    b["b2"] = np.zeros(10, np.float32)            # 120 > 100: b1, the least recent, goes
    assert "b1" not in c and "a1" in c and "b2" in c and c.nbytes == 80
    assert c.drain_evicted() == set()             # chunk-b still has b2
    a["a2"] = np.zeros(20, np.float32)            # 160: a1 (40) then b2 (40) go
    assert set(c) == {"a2"} and c.nbytes == 80
    assert c.drain_evicted() == {"chunk-b"}
    c["huge"] = np.zeros(1000)                     # larger than the cap: not cached at all
    assert "huge" not in c and c.nbytes == 80


def test_restoring_an_entry_does_not_count_twice():
    c = BranchCache(limit_bytes=1000)
    v = c.view("t")
    v["k"] = np.zeros(10, np.float32)
    v["k"] = np.zeros(10, np.float32)
    assert c.nbytes == 40 and len(c) == 1


@needs_nanoaod
def test_branches_of_one_collection_share_their_offsets_in_the_cache():
    import awkward as ak
    from rhtc import context
    chunk = make_chunks(str(NANOAOD / "nano_dy.root"), step=40)[0]
    direct = chunk.arrays(["Muon_pt", "Muon_eta", "Muon_charge"], how=dict)
    cache = BranchCache(limit_bytes=10**8)
    saved, context.current = context.current, context.TaskContext(worker="t", cache=cache)
    try:
        chunk.arrays(["Muon_pt", "Muon_eta", "Muon_charge"], how=dict)
        again = chunk.arrays(["Muon_pt", "Muon_eta", "Muon_charge"], how=dict)
        assert context.current.bytes_from_cache > 0
    finally:
        context.current = saved
    for b in direct:
        assert ak.to_list(again[b]) == ak.to_list(direct[b])
    unshared = sum(direct[b].nbytes for b in direct)
    offsets = direct["Muon_pt"].layout.offsets.data.nbytes
    assert cache.nbytes == unshared - 2 * offsets      # three branches, one offsets array
