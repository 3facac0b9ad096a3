"""Input files change between maps over an analyst's day: a skim is re-run and rewrites
its output in place (same path, new content). A worker keeps files open and caches their
branches; neither may ever serve the old file: old chunks fail as ``changed`` (make the
chunks again), a rewrite that keeps the UUID (ROOT's UPDATE mode) gives the new numbers,
a file that shrank under a worker does not crash its task process, and coffea's items and
a file on an xrootd server are never read stale either.

Real parts: ROOT files written here with uproot (tests/kits/rewrite.py: every rewrite keeps
the file's inode and mtime, so the checks cannot rely on mtime alone), real workers on a
real redis-server, a real xrootd server. The client's own reads, in this process:
tests/unit/client/data/test_openfiles.py.
"""
from __future__ import annotations

import functools
import os
import shutil
import tempfile
import uuid as uuidlib
import warnings

import numpy as np
import pytest
import uproot

from rhtc.client import make_chunks, remote_map
from rhtc.client.data.chunks import ChunkFileError
from rhtc.client.errors import RemoteError
from tests.kits.rewrite import close_files_after, write  # noqa: F401  (an autouse fixture)

STEP = 10_000


def read_sum(branch: str, chunk):
    """(sum of ``branch`` over the chunk, entries read, pid of the task process)."""
    values = chunk.arrays([branch], library="np")[branch]
    return float(values.sum()), len(values), os.getpid()


def task_pid(_) -> int:
    return os.getpid()


def run(branch: str, chunks, broker, **kwargs):
    return remote_map(functools.partial(read_sum, branch), chunks, broker=broker, progress=False,
                      timeout=120, **kwargs)


def assert_changed(results) -> None:
    for r in results:
        assert isinstance(r, RemoteError) and isinstance(r.exception, ChunkFileError), r
        assert r.exception.reason == "changed" and "make_chunks again" in str(r.exception), r


@pytest.mark.parametrize("compression", [uproot.LZ4(1), None], ids=["LZ4", "uncompressed"])
def test_a_file_rewritten_in_place_between_two_maps_is_never_read_stale(broker, workers, tmp_path,
                                                                        compression):
    path = str(tmp_path / "skim.root")
    write(path, 3 * STEP, 1.0, compression)
    workers.start(1)
    old = make_chunks(path, step=STEP)
    first = run("x", old, broker)
    assert [r[:2] for r in first] == [(1.0 * STEP, STEP)] * 3

    write(path, 3 * STEP, 2.0, compression)                   # the skim is re-run
    assert_changed(run("x", old, broker, errors="return"))    # the old chunks: changed, say so

    new = make_chunks(path, step=STEP)                        # same process: not the cached UUID
    assert new[0].uuid != old[0].uuid
    fresh = run("x", new, broker)
    assert [r[:2] for r in fresh] == [(2.0 * STEP, STEP)] * 3
    assert {r[2] for r in first + fresh} == {first[0][2]}      # one task process throughout


def test_a_file_rewritten_with_the_same_uuid_never_gets_the_old_numbers_from_the_cache(broker, workers,
                                                                                      tmp_path):
    """ROOT's UPDATE mode keeps a file's UUID: the chunks stay valid and must read the new
    numbers, from the file, not the old ones from the worker's branch cache."""
    from rhtc import last_map
    path, same = str(tmp_path / "updated.root"), uuidlib.uuid4()
    write(path, 3 * STEP, 1.0, uuid=same)
    workers.start(1)
    chunks = make_chunks(path, step=STEP)
    assert [r[0] for r in run("x", chunks, broker)] == [1.0 * STEP] * 3
    assert [r[0] for r in run("x", chunks, broker)] == [1.0 * STEP] * 3
    assert sum(t.bytes_cache for t in last_map().record().tasks) > 0   # the rerun came from the cache

    write(path, 3 * STEP, 2.0, uuid=same)
    assert make_chunks(path, step=STEP) == chunks              # same UUID, same entries: same chunks
    assert [r[0] for r in run("x", chunks, broker)] == [2.0 * STEP] * 3
    assert [r[0] for r in run("x", chunks, broker)] == [2.0 * STEP] * 3


def test_a_file_that_shrank_under_a_worker_does_not_crash_its_task_process(broker, workers, tmp_path):
    """The worker has the large file open; it is rewritten much smaller. Reading a branch
    that is not cached yet (y) used to touch bytes past the new end of the file."""
    path = str(tmp_path / "shrinks.root")
    write(path, 20 * STEP, 1.0, uproot.LZ4(1))
    workers.start(1)
    old = make_chunks(path, step=10 * STEP)
    first = run("x", old, broker)
    assert [r[0] for r in first] == [10.0 * STEP] * 2

    write(path, 100, 3.0, uproot.LZ4(1))
    assert os.path.getsize(path) < 100_000
    assert_changed(run("y", old, broker, errors="return"))
    pid = remote_map(task_pid, [0], broker=broker, progress=False, timeout=60)[0]
    assert pid == first[0][2], "the task process died (SIGBUS?) and was restarted"

    new = make_chunks(path, step=10 * STEP)
    assert [c.num_entries for c in new] == [100]
    again = run("y", new, broker)
    assert again[0][:2] == (3000.0, 100) and again[0][2] == pid


def test_coffea_never_serves_a_rewritten_file_from_the_worker(broker, workers, tmp_path):
    """coffea's items get the file from the worker's open files and their buffers from its
    branch cache: a rewrite with the same UUID must still give the new numbers."""
    pytest.importorskip("coffea")
    from coffea import processor
    from coffea.nanoevents import BaseSchema
    from rhtc.client.coffea import RedisExecutor, worker_cache

    path, same = str(tmp_path / "coffea.root"), uuidlib.uuid4()
    write(path, 3 * STEP, 1.0, uuid=same)
    workers.start(1)

    def total() -> float:
        runner = processor.Runner(executor=RedisExecutor(broker=broker.config, status=False),
                                  schema=BaseSchema, chunksize=STEP, cachestrategy=worker_cache)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return runner({"skim": [path]}, processor_instance=SumX(), treename="Events")["x"]

    assert total() == total() == 3.0 * STEP                   # the second run from the cache
    write(path, 3 * STEP, 2.0, uuid=same)
    assert total() == 6.0 * STEP


try:
    from coffea import processor as _processor

    class SumX(_processor.ProcessorABC):
        def process(self, events):
            return {"x": float(np.sum(events.x))}

        def postprocess(self, accumulator):
            return accumulator
except ImportError:                  # the coffea test skips
    pass


@pytest.fixture
def xrootd_server():
    """A real xrootd server on a free port, serving a world-readable temporary directory."""
    pytest.importorskip("XRootD.client", reason="the [xrootd] extra is not installed")
    from rhtc.bench.xrootd_server import XRootDServer, XRootDUnavailable
    if shutil.which("xrootd") is None:
        pytest.skip("xrootd-server is not installed")
    root = tempfile.mkdtemp(prefix="rhtc-day-files-")
    os.chmod(root, 0o755)
    server = XRootDServer(root)
    try:
        server.start()
    except XRootDUnavailable as err:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(str(err))
    yield server, root
    server.close()
    shutil.rmtree(root, ignore_errors=True)


def test_a_file_rewritten_on_an_xrootd_server_is_never_read_stale(xrootd_server):
    server, root = xrootd_server
    path = os.path.join(root, "remote.root")
    write(path, 2 * STEP, 1.0, uproot.LZ4(1))
    os.chmod(path, 0o644)
    url = server.url("remote.root")
    old = make_chunks(url, step=STEP)
    assert old[0].arrays(["x"], library="np")["x"].sum() == STEP   # the file is now open here

    write(path, 2 * STEP, 4.0, uproot.LZ4(1))
    with pytest.raises(ChunkFileError, match="make_chunks again") as info:
        old[0].arrays(["x"], library="np")
    assert info.value.reason == "changed" and url in str(info.value)
    new = make_chunks(url, step=STEP)
    assert new[0].uuid != old[0].uuid
    assert new[1].arrays(["x"], library="np")["x"].sum() == 4 * STEP
