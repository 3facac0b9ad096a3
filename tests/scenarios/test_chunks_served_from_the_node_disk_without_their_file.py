"""A worker that replaced another on the node serves a chunk whose branches are all in the
node's disk tier without opening its file (client/data/cachedchunks.py), and never from an
old version of the file: a file rewritten under the same path (same UUID or not) gives the
new numbers or ChunkFileError ``changed``; a corrupt entry is dropped and the chunk read
from the file again. Real parts: ROOT files written here with uproot, real workers on a
real redis-server, a real disk tier directory. That what is served is exactly what uproot
returns, in this process: tests/unit/client/data/test_cachedchunks.py."""
from __future__ import annotations

import os
import uuid as uuidlib

import awkward as ak
import numpy as np
import pytest
import uproot

from rhtc import last_map
from rhtc.client import make_chunks, remote_map
from rhtc.client.data.chunks import ChunkFileError
from rhtc.client.errors import RemoteError
from rhtc.worker.disk import DiskTier
from tests.helpers import wait_until


STEP = 10_000


def write(path: str, value: float, uuid: uuidlib.UUID | None = None) -> None:
    """(Re)write ``path``: a TTree of 3 chunks of x = value + i / 1000 (floats LZ4 cannot
    shrink: each entry has a file of its own in the tier) and a jagged branch; an existing
    file keeps its inode and its mtime, as a rewrite within one second would."""
    before = os.stat(path) if os.path.exists(path) else None
    options = {"compression": uproot.LZ4(1)}
    if uuid is not None:
        options["uuid_function"] = lambda: uuid
    x = value + np.arange(3 * STEP) / 1000
    v = ak.Array([[value] * (i % 3) for i in range(3 * STEP)])
    with uproot.recreate(path, **options) as f:            # a TTree (a dict would make an RNTuple)
        f.mktree("Events", {"x": "float64", "v": "var * float64"}).extend({"x": x, "v": v})
    if before is not None:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def expected(value: float) -> list[float]:
    x = value + np.arange(3 * STEP) / 1000
    return [float(x[i * STEP:(i + 1) * STEP].sum()) for i in range(3)]


def read_sum(chunk) -> float:
    return float(chunk.arrays(["x", "v"], how=dict)["x"].to_numpy().sum())


def run(chunks, broker, **kwargs):
    return remote_map(read_sum, chunks, broker=broker, progress=False, timeout=120, **kwargs)


def tasks():
    return last_map().record().tasks


def settled(directory, entries: int, timeout: float = 30.0) -> None:
    """Wait until the stopped workers' background writes reached the tier (``entries``)."""
    def count() -> int:
        tier = DiskTier(directory, size_limit=10**12, min_free=0)
        n = len(tier)
        tier.close()
        return n
    wait_until(lambda: count() >= entries, timeout, lambda: f"{entries} entries in the tier ({count()} there)",
               interval=0.1)


@pytest.fixture
def node(broker, workers, tmp_path):
    """A node's disk tier filled by one worker that then leaves; returns (path, chunks,
    the next worker's environment)."""
    path, same = str(tmp_path / "skim.root"), uuidlib.uuid4()
    write(path, 1.0, uuid=same)
    env = {"RHTC_DISK_CACHE": str(tmp_path / "node-a")}
    workers.start(1, env=env)
    chunks = make_chunks(path, step=STEP)
    assert run(chunks, broker) == pytest.approx(expected(1.0))
    settled(tmp_path / "node-a", 2 * len(chunks))
    workers.stop_all()
    return path, same, chunks, env


def test_a_replaced_worker_opens_no_file_for_chunks_on_its_disk(broker, workers, node):
    path, _, chunks, env = node
    workers.start(1, env=env)
    assert run(chunks, broker) == pytest.approx(expected(1.0))
    assert [(t.files_opened, t.bytes_file) for t in tasks()] == [(0, 0)] * len(chunks)
    assert all(t.bytes_disk > 0 for t in tasks())
    assert run(chunks, broker) == pytest.approx(expected(1.0))          # then from its memory
    assert [(t.files_opened, t.bytes_file, t.bytes_disk) for t in tasks()] == [(0, 0, 0)] * len(chunks)
    assert all(t.bytes_cache > 0 for t in tasks())


def test_a_file_rewritten_with_the_same_uuid_is_never_served_from_the_disk(broker, workers, node):
    path, same, chunks, env = node
    write(path, 2.0, uuid=same)                     # same path, inode, mtime and UUID
    assert make_chunks(path, step=STEP) == chunks
    workers.start(1, env=env)
    assert run(chunks, broker) == pytest.approx(expected(2.0))
    assert all(t.bytes_file > 0 for t in tasks())


def test_a_file_rewritten_with_another_uuid_is_changed_not_served_from_the_disk(broker, workers, node):
    path, _, chunks, env = node
    write(path, 2.0)
    workers.start(1, env=env)
    for r in run(chunks, broker, errors="return"):
        assert isinstance(r, RemoteError) and isinstance(r.exception, ChunkFileError), r
        assert r.exception.reason == "changed", r


def test_a_corrupt_entry_is_dropped_and_the_chunk_read_from_the_file(broker, workers, node, tmp_path):
    _, _, chunks, env = node
    files = list((tmp_path / "node-a").rglob("*.val"))
    assert len(files) >= len(chunks)
    for f in files:                                  # a node that crashed: flipped bytes
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        f.write_bytes(bytes(raw))
    workers.start(1, env=env)
    assert run(chunks, broker) == pytest.approx(expected(1.0))
    assert all(t.bytes_file > 0 for t in tasks())
    settled(tmp_path / "node-a", 2 * len(chunks))
    workers.stop_all()
    workers.start(1, env=env)                        # written again: the next worker opens nothing
    assert run(chunks, broker) == pytest.approx(expected(1.0))
    assert [(t.files_opened, t.bytes_file) for t in tasks()] == [(0, 0)] * len(chunks)
