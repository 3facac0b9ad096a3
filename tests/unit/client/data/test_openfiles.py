"""The files a process keeps open (client/data/openfiles.py) are checked against the file
as it is now before they are served: outside a worker too (a notebook reading a chunk,
``make_chunks``), a file rewritten in place (same path, inode and mtime) after the chunks
were made is refused as ``changed``, naming the file and saying to make the chunks again,
and new chunks read the new numbers. In this process; on workers and an xrootd server:
tests/scenarios/test_rewritten_files_are_never_read_stale.py.

The branch names of an open tree are listed when a read first needs them, never at the open:
uproot lists an RNTuple's nested fields in time quadratic in their number (4 s of CPU for one
of coffea's RNTuple NanoAOD samples, 1,900 fields; 12.6 s for another), and ``make_chunks``
paid it on the analyst's machine for every RNTuple file, for names it never used."""
from __future__ import annotations

import awkward as ak
import pytest
import uproot

from rhtc.client import make_chunks
from rhtc.client.data.chunks import BranchNotFound, ChunkFileError
from rhtc.client.data.openfiles import _open_file
from tests.kits.rewrite import close_files_after, write  # noqa: F401  (an autouse fixture)

STEP = 10_000


def test_a_file_read_by_the_client_itself_is_reopened_when_rewritten(tmp_path):
    """Outside a worker (a notebook reading a chunk, make_chunks) the same holds."""
    path = str(tmp_path / "local.root")
    write(path, 2 * STEP, 1.0, uproot.LZ4(1))
    old = make_chunks(path, step=STEP)
    assert old[0].arrays(["x"], library="np")["x"].sum() == STEP
    write(path, 2 * STEP, 5.0, uproot.LZ4(1))
    with pytest.raises(ChunkFileError, match="make_chunks again") as info:
        old[0].arrays(["x"], library="np")
    assert info.value.reason == "changed" and path in str(info.value)
    new = make_chunks(path, step=STEP)
    assert new[0].uuid != old[0].uuid and new[0].arrays(["x"], library="np")["x"].sum() == 5 * STEP


def _rntuple_with_collections(path, n: int = 30) -> None:
    """An RNTuple of ``n`` jet-like collections (``Jet<i>.pt``, ``Jet<i>.eta``) and ``run``."""
    fields = {f"Jet{i}": ak.Array([[{"pt": 1.0 + i, "eta": 0.1}], [], [{"pt": 2.0, "eta": 0.2}]]) for i in range(n)}
    fields["run"] = ak.Array([1, 2, 3])
    with uproot.recreate(path) as f:
        f.mkrntuple("Events", ak.zip(fields, depth_limit=1))


@pytest.fixture
def nested_listings(monkeypatch):
    """The recursive listings of an RNTuple's fields that this process makes (the real
    uproot call, counted)."""
    calls = []
    cls = uproot.behaviors.RNTuple.HasFields
    real = cls.iterkeys

    def counted(self, *args, **kwargs):
        if kwargs.get("recursive", True):
            calls.append(self)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(cls, "iterkeys", counted)
    return calls


def test_an_rntuples_nested_fields_are_not_listed_to_make_chunks_or_open_its_tree(tmp_path, nested_listings):
    """make_chunks and coffea's reads (``Chunk.open_tree``) list no names; a read of
    branches lists what it needs (uproot's own read lists them too), and a name that is not
    there is refused naming the nearest ones."""
    path = str(tmp_path / "rntuple.root")
    _rntuple_with_collections(path)
    [chunk] = make_chunks(path, step=STEP)
    assert chunk.num_entries == 3 and chunk.open_tree().num_entries == 3
    assert nested_listings == [], "make_chunks or opening the tree listed the nested fields"
    assert chunk.arrays(["Jet3.pt"])["Jet3"].pt.tolist() == [[4.0], [], [2.0]]
    top = chunk.arrays(["run", "Jet3"])
    assert top["run"].tolist() == [1, 2, 3] and top["Jet3"].eta.tolist() == [[0.1], [], [0.2]]
    with pytest.raises(BranchNotFound, match=r"'Jet3\.ptt' is not in tree 'Events' .*Jet3\.pt") as info:
        chunk.arrays(["Jet3.ptt"])
    assert path in str(info.value) and "(91 branches)" in str(info.value)


def test_a_ttrees_names_are_its_branches(tmp_path):
    path = str(tmp_path / "ttree.root")
    write(path, STEP, 1.0, uproot.LZ4(1))
    opened = _open_file(path, "Events", None)
    assert opened.branches == opened.top_branches == {"x", "y"}
    assert opened.has_branches(["x", "y"]) and not opened.has_branches(["x", "z"])
    with pytest.raises(BranchNotFound, match="'z' is not in tree 'Events'"):
        make_chunks(path, step=STEP)[0].arrays(["z"])
