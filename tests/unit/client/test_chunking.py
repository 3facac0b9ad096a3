"""``make_chunks`` and the chunks it makes (client/chunking.py, client/data/chunks.py), in
this process: every entry once, in chunks that carry their file's UUID; a bad file, a
missing tree or branch named with what there is instead; a file changed since the chunks
were made refused; the branches the dimuon example reads all there; bad input refused at the call, naming
what to write instead (a step that is not a whole number above 0, a tree that is not a
name, a directory: glob it; files that are not paths). On the real CMS
NanoAOD samples. On workers: tests/scenarios/test_nanoaod_chunks_cached_routed_and_reduced.py."""
from __future__ import annotations

import shutil

import pytest

from rhtc.client import make_chunks
from rhtc.client.data.chunks import BranchNotFound, ChunkFileError
from rhtc.examples.dimuon import BRANCHES
from tests.conftest import NANOAOD, needs_nanoaod
from tests.kits.nanoaod import REAL

pytestmark = [needs_nanoaod, pytest.mark.timeout(90)]   # a refused call that was not refused would wait forever


def test_make_chunks_covers_every_entry_once():
    chunks = make_chunks(REAL, step=7)
    import uproot
    for path in REAL:
        mine = [c for c in chunks if c.file == path]
        n = uproot.open(path)["Events"].num_entries
        assert mine[0].entry_start == 0 and mine[-1].entry_stop == n
        assert all(a.entry_stop == b.entry_start for a, b in zip(mine, mine[1:]))
        assert all(c.num_entries <= 7 for c in mine)
        assert len({c.uuid for c in mine}) == 1
    assert chunks[0].uuid != [c for c in chunks if c.file == REAL[1]][0].uuid


@pytest.mark.parametrize("bad, message", [
    ("/no/such/file.root", "no such file"),
    (__file__, "is not a ROOT file"),
])
def test_bad_files_are_named(bad, message):
    with pytest.raises(ChunkFileError, match=message) as info:
        make_chunks([REAL[0], bad])
    assert bad in str(info.value)


def test_missing_tree_lists_the_trees():
    with pytest.raises(ChunkFileError, match=r"has no tree 'Evnts'.*Events"):
        make_chunks(REAL[0], tree="Evnts")


def test_missing_branch_names_branch_file_and_similar_ones():
    chunk = make_chunks(str(NANOAOD / "scouting_nano.root"), step=100)[0]
    with pytest.raises(BranchNotFound) as info:
        chunk.arrays(["Muon_pt"])
    text = str(info.value)
    assert "'Muon_pt'" in text and "scouting_nano.root" in text and "ScoutingMuon_pt" in text


def test_changed_file_is_detected(tmp_path):
    path = tmp_path / "f.root"
    shutil.copy(REAL[0], path)
    chunk = make_chunks(str(path), step=100)[0]
    shutil.copy(REAL[1], path)                              # same name, another file
    from rhtc.client.data import chunks as chunks_module
    chunks_module.close_files()                             # as a fresh process would
    with pytest.raises(ChunkFileError, match="has changed since the chunks were made"):
        chunk.arrays(["Muon_pt"])


def test_branches_match_what_the_example_reads():
    chunk = make_chunks(REAL[1], step=100)[0]
    arrays = chunk.arrays(BRANCHES, how=dict)
    assert set(arrays) == set(BRANCHES)


# -- bad input, refused at the call ----------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    ({"step": 2.5}, TypeError, r"step must be a whole number > 0.*not float 2.5"),
    ({"step": "5"}, TypeError, r"step must be a whole number > 0.*not str '5'"),
    ({"step": 0}, ValueError, r"step must be > 0"),
    ({"tree": 3}, TypeError, r"tree must be the name"),
], ids=["step-float", "step-str", "step-zero", "tree-int"])
def test_make_chunks_bad_step_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_chunks(str(NANOAOD / "nano_dy.root"), **kwargs)


def test_make_chunks_of_a_directory_says_to_glob():
    folder = str(NANOAOD)
    with pytest.raises(ChunkFileError, match=r"is a directory.*make_chunks\('.*\*\.root'\)") as info:
        make_chunks(folder)
    assert info.value.reason == "is a directory"


@pytest.mark.parametrize("files, match", [(5, r"files must be a path.*not int 5"),
                                          ([5], r"files holds int 5.*make_chunks\('data/\*\.root'\)")])
def test_make_chunks_files_that_are_not_paths_named(files, match):
    with pytest.raises(TypeError, match=match):
        make_chunks(files)
