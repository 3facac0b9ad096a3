"""The task of a warm map (client/data/warmread.py): a :class:`WarmChunk` routes and weighs
as the chunk a run read (same routing key, same entries), carries the branches with the
uproot library each was read as, and reads them (grouped by library, in first-read order)
from a real NanoAOD file, outside a worker here; a branch the file does not have fails as
the analysis' read would. Through a worker's caches: tests/scenarios/test_warm_fills_a_new_pool_from_a_run_record.py."""
from __future__ import annotations

import pytest

from rhtc.client import make_chunks
from rhtc.client.data.chunks import BranchNotFound, Chunk
from rhtc.client.data.warmread import WarmChunk, by_library, read_branches
from tests.conftest import NANOAOD, needs_nanoaod


def test_a_warm_chunk_routes_as_its_chunk_and_says_its_branches():
    chunk = Chunk("/data/nano_dy.root", "Events", 10, 30, "uuid")
    warm = WarmChunk(*(getattr(chunk, f) for f in ("file", "tree", "entry_start", "entry_stop", "uuid")),
                     (("Muon_pt", "ak"), ("nMuon", "np")))
    assert (warm.routing_key, warm.num_entries) == (chunk.routing_key, chunk.num_entries)
    assert repr(warm) == "Chunk('nano_dy.root', 'Events', 10-30, 2 branches)"


def test_branches_are_grouped_by_library_in_first_read_order():
    assert by_library([("a", "np"), ("b", "ak"), ("c", "np"), ("d", "pd")]) == \
        {"np": ["a", "c"], "ak": ["b"], "pd": ["d"]}
    assert list(by_library([("x", "ak"), ("y", "np")])) == ["ak", "np"] and by_library(()) == {}


@needs_nanoaod
def test_the_branches_are_read_from_the_file():
    chunk = make_chunks(str(NANOAOD / "nano_dy.root"), step=20)[0]
    warm = WarmChunk(chunk.file, chunk.tree, chunk.entry_start, chunk.entry_stop, chunk.uuid,
                     (("Muon_pt", "ak"), ("nMuon", "np"), ("Muon_eta", "ak")))
    assert read_branches(warm) == 3


@needs_nanoaod
def test_a_branch_the_file_lacks_fails_as_the_analysis_would():
    chunk = make_chunks(str(NANOAOD / "nano_dy.root"), step=20)[0]
    warm = WarmChunk(chunk.file, chunk.tree, chunk.entry_start, chunk.entry_stop, chunk.uuid,
                     (("Muon_pt", "ak"), ("No_Such_Branch", "np")))
    with pytest.raises(BranchNotFound, match="No_Such_Branch"):
        read_branches(warm)
