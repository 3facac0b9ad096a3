"""The worker's branch cache: capped in bytes, least recently used out first, and what it
holds is what the worker advertises for routing."""
from __future__ import annotations

import numpy as np
import pytest

from rhtc.client import imap_unordered, make_chunks
from tests.conftest import NANOAOD, needs_nanoaod
from tests.test_nanoaod import REAL, muon_pt_sum
from rhtc.worker.cache import BranchCache


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
def test_a_worker_with_a_tiny_cache_reads_again_and_withdraws_its_chunks(broker, workers, storage):
    name = workers.start(1, extra=("--cache-size", "400"))[0]
    chunks = make_chunks(REAL, step=20)
    list(imap_unordered(muon_pt_sum, chunks, broker=broker))
    again = list(imap_unordered(muon_pt_sum, chunks, broker=broker))
    assert sum(r.meta["bytes_file"] for r in again) > 0          # evicted, so read again
    held = {k.decode() for k in storage.r.smembers(storage.keys.holds(name))}
    assert len(held) < len(chunks)                                # evicted chunks withdrawn


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


def muon_eta_sum(chunk):
    import awkward as ak
    return float(ak.sum(chunk.arrays(["Muon_eta"], how=dict)["Muon_eta"]))


@needs_nanoaod
@pytest.mark.parametrize("limit, reopened", [(2, 4), (16, 0)])
def test_a_worker_keeps_at_most_rhtc_open_files_open(broker, workers, tmp_path, limit, reopened):
    """Four files, one chunk each, through one worker: with room for 16 open files a second
    branch opens none; with room for 2, cycling through 4 files opens each one again. A
    chunk whose branches are all in the cache needs no open file (its stamp is checked)."""
    import shutil
    from rhtc import last_map, remote_map
    paths = []
    for i in range(4):
        paths.append(str(tmp_path / f"dy{i}.root"))
        shutil.copy(NANOAOD / "nano_dy.root", paths[-1])
    workers.start(1, env={"RHTC_OPEN_FILES": str(limit)})
    chunks = make_chunks(paths, step=10 ** 6)
    assert len(chunks) == 4
    opened = []
    for fn in (muon_pt_sum, muon_eta_sum, muon_pt_sum):
        remote_map(fn, chunks, broker=broker, progress=False, routing=False, timeout=60)
        opened.append(sum(t.files_opened for t in last_map().record().tasks))
    assert opened == [4, reopened, 0]
