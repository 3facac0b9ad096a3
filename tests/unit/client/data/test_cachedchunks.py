"""A chunk served from the worker's caches without opening its file
(client/data/cachedchunks.py): when every branch a call asks for is in the node's disk
tier, a worker that replaced another (nothing open, a new cache over the same directory)
opens no file and returns exactly what uproot returns, for every ``library`` and ``how``.
In this process, on the real NanoAOD sample; with real workers and files rewritten under
them: tests/scenarios/test_chunks_served_from_the_node_disk_without_their_file.py."""
from __future__ import annotations

import functools

import awkward as ak
import numpy as np
import pytest

from rhtc import context
from rhtc.client import make_chunks
from rhtc.client.data.openfiles import close_files
from rhtc.worker.cache import BranchCache
from rhtc.worker.disk import DiskTier
from tests.conftest import NANOAOD, needs_nanoaod


@functools.cache
def _second_chunk():
    """The chunk the test reads (made once: making it opens and reads the file's header)."""
    return make_chunks(str(NANOAOD / "nano_dy.root"), step=20)[1]


@needs_nanoaod
@pytest.mark.parametrize("how", [dict, tuple, list, None], ids=["dict", "tuple", "list", "None"])
@pytest.mark.parametrize("library", ["ak", "np"])
def test_a_chunk_served_without_its_file_is_what_uproot_returns(tmp_path, how, library):
    chunk = _second_chunk()
    branches = ["Muon_pt", "nMuon", "Muon_charge"]
    kwargs = {"library": library} | ({"how": how} if how is not None else {})
    saved = context.current

    def read(worker: str):
        context.current = context.TaskContext(worker=worker, cache=BranchCache(
            10**9, disk=DiskTier(tmp_path, size_limit=10**9, min_free=0)))
        out = chunk.arrays(branches, **kwargs)
        context.current.cache.disk.flush()
        return out, context.current

    try:
        close_files()
        direct = chunk.arrays(branches, **kwargs)
        read("first")                                # fills the disk tier (the file open since the direct read)
        close_files()                                # a new process: nothing open
        served, ctx = read("replaced")
    finally:
        context.current = saved
        close_files()
    assert type(served) is type(direct)
    if library == "ak":                               # np's jagged arrays hold objects: not kept
        assert (ctx.files_opened, ctx.bytes_from_file) == (0, 0) and ctx.bytes_from_disk > 0
    if how is None and library == "ak":
        assert served.type == direct.type and ak.array_equal(served, direct)
        return
    pairs = zip(served.values(), direct.values()) if isinstance(direct, dict) else zip(served, direct)
    if isinstance(direct, dict):
        assert list(served) == list(direct)
    for a, b in pairs:
        assert type(a) is type(b)
        if library == "ak":
            assert a.type == b.type and ak.array_equal(a, b)
        else:
            assert a.dtype == b.dtype and all(np.array_equal(x, y) for x, y in zip(a, b))
