"""The node's disk tier (issue 19): safe for several processes at once, survives any
process dying at any instant, capped, never fills the disk, never serves a stale file;
and a worker replaced on the node comes back warm from it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from rhtc.client import imap_unordered, make_chunks
from rhtc.worker.disk import DiskTier, Seal, decode, encode
from tests.conftest import NANOAOD, ROOT, needs_nanoaod
from tests.helpers import wait_until

REAL = [str(NANOAOD / "nano_dimuon.root"), str(NANOAOD / "nano_dy.root")]

#: a process that writes entries whose value follows from the key, forever (until killed)
WRITER = textwrap.dedent("""
    import sys, numpy as np
    from rhtc.worker.disk import DiskTier
    d = DiskTier(sys.argv[1], size_limit=int(sys.argv[2]), min_free=0)
    i = int(sys.argv[3])
    print("ready", flush=True)
    while True:
        k = i % 40
        n = 20_000 + 1_000 * (i % 7)                   # several sizes for the same key
        d.put(f"k{k}", np.full(n, k, dtype=np.float64))
        i += 1
""")


def _writer(directory: Path, seed: int, size_limit: int = 10**9) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(size_limit), str(seed)],
                         stdout=subprocess.PIPE, cwd=str(ROOT))
    assert p.stdout.readline().strip() == b"ready"
    return p


def _check_all(directory: Path) -> int:
    """Every key reads as None or as its one right value; returns how many were found."""
    d = DiskTier(directory, size_limit=10**9, min_free=0)
    found = 0
    for k in range(40):
        v = d.get(f"k{k}")
        if v is not None:
            assert v.dtype == np.float64 and len(v) >= 20_000 and np.all(v == k), f"k{k} is wrong"
            found += 1
    d.close()
    return found


@pytest.mark.heavy  # starts and kills writer processes
def test_a_writer_killed_at_any_instant_leaves_no_torn_entry(tmp_path):
    for attempt in range(6):
        p = _writer(tmp_path, attempt)
        try:
            time.sleep(0.05 + 0.07 * attempt)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        _check_all(tmp_path)
    assert _check_all(tmp_path) > 0


@pytest.mark.heavy  # starts writer processes
def test_two_processes_writing_the_same_entries_at_once(tmp_path):
    a, b = _writer(tmp_path, 0), _writer(tmp_path, 3)
    try:
        deadline = time.monotonic() + 3
        reads = 0
        while time.monotonic() < deadline:
            reads += _check_all(tmp_path)
    finally:
        for p in (a, b):
            p.terminate()
            p.wait()
    assert reads > 0 and _check_all(tmp_path) == 40


def test_a_truncated_or_corrupt_entry_is_dropped_and_read_again(tmp_path):
    d = DiskTier(tmp_path, size_limit=10**9, min_free=0)
    value = np.arange(100_000, dtype=np.float32)
    assert d.put("v|k", value)
    files = [f for f in tmp_path.rglob("*.val")]
    assert files, "diskcache stores a large value in a file of its own"
    raw = files[0].read_bytes()
    files[0].write_bytes(raw[: len(raw) // 2])            # a node crash before the data hit the disk
    assert d.get("v|k") is None and d.dropped == 1
    assert d.get("v|k") is None and d.dropped == 1        # dropped: a plain miss now
    assert d.put("v|k", value) and np.array_equal(d.get("v|k"), value)
    d.close()
    seal = Seal(bytes(32))
    good = encode(value, "v|k", seal)
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    assert decode(bytes(flipped), "v|k", seal) is None


def test_the_tier_is_capped_in_bytes_across_its_writers(tmp_path):
    cap = 4_000_000
    d = DiskTier(tmp_path, size_limit=cap, min_free=0)
    rng = np.random.default_rng(1)
    for i in range(60):                                    # ~9.6 MB of incompressible data
        d.put(f"k{i}", rng.random(20_000))
    assert d.nbytes <= cap * 1.2, f"{d.nbytes} bytes on disk for a cap of {cap}"
    assert d.get("k59") is not None                        # the newest stays
    d.close()


def test_nothing_is_written_when_the_disk_is_nearly_full(tmp_path):
    import shutil
    size = shutil.disk_usage(tmp_path).total        # free space never exceeds it, whatever others delete
    d = DiskTier(tmp_path, size_limit=10**9, min_free=size + 1)    # as if the disk were full
    assert not d.put("k", np.ones(1000))
    assert d.get("k") is None and d.skipped == 1
    d.close()


def _pt_sum(chunk):
    import awkward as ak
    return float(ak.sum(chunk.arrays(["Muon_pt", "Muon_eta"], how=dict)["Muon_pt"]))


@needs_nanoaod
def test_a_worker_replaced_on_the_node_is_warm_from_its_disk(broker, workers, tmp_path):
    """Cold run fills the node's disk tier; every worker stops; new workers under new names
    on the same node (same directory) read nothing from the files."""
    env = {"RHTC_DISK_CACHE": str(tmp_path / "node-a")}
    workers.start(2, env=env)
    chunks = make_chunks(REAL, step=20)[:12]
    cold = {r.index: r for r in imap_unordered(_pt_sum, chunks, broker=broker)}
    assert all(r.meta["bytes_file"] > 0 for r in cold.values())
    workers.stop_all()
    time.sleep(0.5)
    workers.start(2, env=env)
    warm = {r.index: r for r in imap_unordered(_pt_sum, chunks, broker=broker)}
    assert [warm[i].value for i in range(len(chunks))] == [cold[i].value for i in range(len(chunks))]
    assert sum(r.meta["bytes_file"] for r in warm.values()) == 0, \
        {i: r.meta["bytes_file"] for i, r in warm.items() if r.meta["bytes_file"]}
    assert all(r.meta.get("bytes_disk", 0) > 0 for r in warm.values())


def _filled_node_a(broker, workers, tmp_path):
    """Two "nodes" on this host (two disk tiers); a map run on node A's worker, which
    then leaves. Returns the nodes' worker environments and the chunks."""
    env_a, env_b = {"RHTC_DISK_CACHE": str(tmp_path / "node-a")}, {"RHTC_DISK_CACHE": str(tmp_path / "node-b")}
    workers.start(1, env=env_a)
    chunks = make_chunks(REAL, step=20)
    list(imap_unordered(_pt_sum, chunks, broker=broker))
    workers.stop_all()
    time.sleep(0.5)
    return env_a, env_b, chunks


@needs_nanoaod
def test_a_worker_of_another_node_reads_the_files_not_the_other_disk(broker, workers, tmp_path):
    env_a, env_b, chunks = _filled_node_a(broker, workers, tmp_path)
    a_entries = len(DiskTier(tmp_path / "node-a", size_limit=10**9, min_free=0))
    workers.start(1, env=env_b)
    on_b = list(imap_unordered(_pt_sum, chunks, broker=broker))
    assert all(r.meta["bytes_file"] > 0 and not r.meta.get("bytes_disk") for r in on_b)
    assert len(DiskTier(tmp_path / "node-a", size_limit=10**9, min_free=0)) == a_entries
    assert len(DiskTier(tmp_path / "node-b", size_limit=10**9, min_free=0)) > 0


@needs_nanoaod
def test_a_chunk_on_node_a_disk_goes_to_node_a_after_a_restart(broker, workers, storage, tmp_path):
    """The broker remembers which node's disk holds a chunk, beyond the workers: after
    every worker is replaced (new names), the client routes the chunk to node A's new
    worker, not to node B's, and it reads nothing from the file."""
    env_a, env_b, chunks = _filled_node_a(broker, workers, tmp_path)
    (a2,) = workers.start(1, env=env_a)
    (b1,) = workers.start(1, env=env_b)
    keys = [c.routing_key for c in chunks]

    def located_on_a2() -> bool:
        where, live = storage.pool.locate(keys)
        return set(live) >= {a2, b1} and all(where.get(k) == a2 for k in keys)
    # a new worker says which disk tier it serves with its heartbeats: wait for them, not a time
    wait_until(located_on_a2, 30, lambda: f"{a2} and {b1} live, every chunk located on {a2} "
                                          f"(where, live: {storage.pool.locate(keys)})", interval=0.1)
    rerun = list(imap_unordered(_pt_sum, chunks, broker=broker))
    on_a = [r for r in rerun if r.meta["worker"] == a2]
    assert len(on_a) >= len(chunks) - 1, [r.meta["worker"] for r in rerun]     # B may steal one
    assert all(r.meta["bytes_file"] == 0 and r.meta["bytes_disk"] > 0 for r in on_a)


@needs_nanoaod
def test_a_wiped_disk_costs_a_file_read_not_an_error(broker, workers, tmp_path):
    import shutil
    env = {"RHTC_DISK_CACHE": str(tmp_path / "node-a")}
    workers.start(1, env=env)
    chunks = make_chunks(REAL, step=30)[:4]
    first = [r.value for r in sorted(imap_unordered(_pt_sum, chunks, broker=broker), key=lambda r: r.index)]
    workers.stop_all()
    shutil.rmtree(tmp_path / "node-a")                 # the node was reinstalled overnight
    workers.start(1, env=env)
    again = sorted(imap_unordered(_pt_sum, chunks, broker=broker), key=lambda r: r.index)
    assert [r.value for r in again] == first
    assert all(r.meta["bytes_file"] > 0 for r in again)


def test_rhtc_status_shows_each_nodes_disk_tier(broker, workers, tmp_path):
    import re
    env = {"RHTC_DISK_CACHE": str(tmp_path / "node-a"), "RHTC_DISK_CACHE_SIZE": "3GB"}
    workers.start(2, env=env)
    workers.start(1)                                            # no disk tier
    tier = (tmp_path / "node-a" / "rhtc-tier-id").read_text().strip()
    wanted = rf"node disk {tier} on \S+: 2 workers, [0-9.]+ GB of 3.0 GB"
    for _ in range(20):              # the task processes publish their tier's figures at start
        out = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "status"], cwd=str(ROOT), capture_output=True,
                             text=True, env=dict(os.environ, **broker.config.env()), timeout=60)
        assert out.returncode == 0, out.stderr
        if re.search(wanted, out.stdout):
            break
        time.sleep(0.5)
    assert re.search(wanted, out.stdout), out.stdout
