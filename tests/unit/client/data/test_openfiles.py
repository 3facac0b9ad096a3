"""The files a process keeps open (client/data/openfiles.py) are checked against the file
as it is now before they are served: outside a worker too (a notebook reading a chunk,
``make_chunks``), a file rewritten in place (same path, inode and mtime) after the chunks
were made is refused as ``changed``, naming the file and saying to make the chunks again,
and new chunks read the new numbers. In this process; on workers and an xrootd server:
tests/scenarios/test_rewritten_files_are_never_read_stale.py."""
from __future__ import annotations

import pytest
import uproot

from rhtc.client import make_chunks
from rhtc.client.data.chunks import ChunkFileError
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
