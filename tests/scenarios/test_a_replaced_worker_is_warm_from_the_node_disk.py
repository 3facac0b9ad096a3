"""A worker replaced on its node comes back warm from the node's disk tier: new workers
under new names on the same node (same directory) read nothing from the files; a worker of
another node reads the files, not the other node's disk; the broker remembers which node's
disk holds a chunk beyond the workers, so after every worker is replaced a chunk goes to
its node's new worker; a wiped disk costs a file read, not an error; ``rhtc status`` shows
each node's disk tier.

Real parts: a real redis-server, real worker processes (conftest) with ``RHTC_DISK_CACHE``,
two "nodes" on this host (two disk tiers), the real CMS NanoAOD samples. The tier itself:
tests/unit/worker/test_disk.py; several processes on one tier:
tests/integration/test_disk_tier_shared_by_processes.py."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from rhtc.client import imap_unordered, make_chunks
from rhtc.worker.disk import DiskTier
from tests.conftest import ROOT, needs_nanoaod
from tests.kits.disk import pt_sum
from tests.helpers import wait_until
from tests.kits.nanoaod import REAL


@needs_nanoaod
def test_a_worker_replaced_on_the_node_is_warm_from_its_disk(broker, workers, tmp_path):
    """Cold run fills the node's disk tier; every worker stops; new workers under new names
    on the same node (same directory) read nothing from the files."""
    env = {"RHTC_DISK_CACHE": str(tmp_path / "node-a")}
    workers.start(2, env=env)
    chunks = make_chunks(REAL, step=20)[:12]
    cold = {r.index: r for r in imap_unordered(pt_sum, chunks, broker=broker)}
    assert all(r.meta["bytes_file"] > 0 for r in cold.values())
    workers.stop_all()
    time.sleep(0.5)
    workers.start(2, env=env)
    warm = {r.index: r for r in imap_unordered(pt_sum, chunks, broker=broker)}
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
    list(imap_unordered(pt_sum, chunks, broker=broker))
    workers.stop_all()
    time.sleep(0.5)
    return env_a, env_b, chunks


@needs_nanoaod
def test_a_worker_of_another_node_reads_the_files_not_the_other_disk(broker, workers, tmp_path):
    env_a, env_b, chunks = _filled_node_a(broker, workers, tmp_path)
    a_entries = len(DiskTier(tmp_path / "node-a", size_limit=10**9, min_free=0))
    workers.start(1, env=env_b)
    on_b = list(imap_unordered(pt_sum, chunks, broker=broker))
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
    rerun = list(imap_unordered(pt_sum, chunks, broker=broker))
    on_a = [r for r in rerun if r.meta["worker"] == a2]
    assert len(on_a) >= len(chunks) - 1, [r.meta["worker"] for r in rerun]     # B may steal one
    assert all(r.meta["bytes_file"] == 0 and r.meta["bytes_disk"] > 0 for r in on_a)


@needs_nanoaod
def test_a_wiped_disk_costs_a_file_read_not_an_error(broker, workers, tmp_path):
    import shutil
    env = {"RHTC_DISK_CACHE": str(tmp_path / "node-a")}
    workers.start(1, env=env)
    chunks = make_chunks(REAL, step=30)[:4]
    first = [r.value for r in sorted(imap_unordered(pt_sum, chunks, broker=broker), key=lambda r: r.index)]
    workers.stop_all()
    shutil.rmtree(tmp_path / "node-a")                 # the node was reinstalled overnight
    workers.start(1, env=env)
    again = sorted(imap_unordered(pt_sum, chunks, broker=broker), key=lambda r: r.index)
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
