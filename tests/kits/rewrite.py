"""ROOT files rewritten in place, as an analyst's skim is re-run between two maps (same
path, new content), for the tests that a worker or the client never reads such a file
stale; and the autouse fixture that closes what this process opened.

Every rewrite keeps the file's inode and mtime (set back with os.utime, as a rewrite
within the same second would), so the checks cannot rely on mtime alone.

Example::

    from tests.kits.rewrite import close_files_after, write  # noqa: F401  (an autouse fixture)

    write(path, 20_000, 1.0, uproot.LZ4(1))
    chunks = make_chunks(path, step=10_000)
    write(path, 20_000, 5.0, uproot.LZ4(1))           # same path, inode and mtime
"""
from __future__ import annotations

import os
import uuid as uuidlib

import numpy as np
import pytest
import uproot


def write(path: str, entries: int, value: float, compression=None, uuid: uuidlib.UUID | None = None) -> None:
    """(Re)write ``path`` in place with branches x = value and y = 10 * value; an existing
    file keeps its inode and its mtime."""
    before = os.stat(path) if os.path.exists(path) else None
    options = {"compression": compression}
    if uuid is not None:
        options["uuid_function"] = lambda: uuid
    with uproot.recreate(path, **options) as f:
        f["Events"] = {"x": np.full(entries, value), "y": np.full(entries, 10 * value)}
    if before is not None:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(path)
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.fixture(autouse=True)
def close_files_after():
    """This process's open files (make_chunks, chunks read here) do not outlive the test."""
    yield
    from rhtc.client.data.chunks import close_files
    close_files()
