"""A node's disk tier tampered with between two maps never serves a wrong value nor hangs
a map: after every worker is replaced, a row of the tier's index pointed at another
chunk's entry is refused (the chunk read from its file, the refusal in the worker's log),
and a named pipe and links put where entries' files should be are refused, named in the
log and removed, while the map finishes with the plain loop's numbers.

The bug: a member of the tier's group replaced an entry's file with a named pipe (the
entry folders were 0775 under umask 002) and the next worker's map hung ("4 of 4 tasks
unfinished after 90 s"). Real parts: real workers on a real redis-server, the real NanoAOD
samples and ROOT files written here with uproot, diskcache's real SQLite index tampered
with through sqlite3, real named pipes and links. Each refusal in this process:
tests/unit/worker/test_disk.py, test_tierfiles.py."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import uproot

from rhtc import last_map
from rhtc.client import imap_unordered, make_chunks, remote_map
from tests.conftest import NANOAOD, needs_nanoaod
from tests.kits.disk import fifo, link_to_a_fifo, link_to_a_genuine_copy, pt_sum, unblock
from tests.helpers import wait_until


# -- a row pointed at another chunk's entry ------------------------------------------------------

@needs_nanoaod
def test_a_rerun_after_every_worker_is_replaced_refuses_a_row_pointed_at_another_chunk(broker, workers, tmp_path):
    node = tmp_path / "node-a"
    env = {"RHTC_DISK_CACHE": str(node)}
    workers.start(1, env=env)
    chunks = make_chunks(str(NANOAOD / "nano_dimuon.root"), step=20)
    assert len(chunks) == 2
    cold = {r.index: r.value for r in imap_unordered(pt_sum, chunks, broker=broker)}
    assert cold[0] != cold[1]
    keys = [f"|{c.routing_key}|Muon_pt|ak" for c in chunks]

    def written() -> list:
        with sqlite3.connect(node / "cache.db") as db:
            return [db.execute("SELECT key, value FROM Cache WHERE key LIKE ?", (f"%{k}",)).fetchone() for k in keys]
    rows = wait_until(lambda: (lambda rows: all(rows) and rows)(written()), 30,   # written in the background
                      lambda: f"both chunks' rows in the tier (now: {written()})", interval=0.1)
    workers.stop_all()
    (key0, _), (_, value1) = rows
    with sqlite3.connect(node / "cache.db") as db:           # chunk 0's row now holds chunk 1's entry
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", (value1, key0))
    (w2,) = workers.start(1, env=env)
    warm = {r.index: r for r in imap_unordered(pt_sum, chunks, broker=broker)}
    assert [warm[i].value for i in range(2)] == [cold[i] for i in range(2)]
    assert warm[0].meta["bytes_file"] > 0, "chunk 0 was not read from its file"
    assert warm[1].meta["bytes_file"] == 0 and warm[1].meta["bytes_disk"] > 0
    assert "refused" in workers.log(w2), workers.log(w2)


# -- a named pipe and links for entries -----------------------------------------------------------

STEP = 10_000


def write(path: Path) -> None:
    """A TTree of 4 chunks of floats LZ4 cannot shrink: each chunk's entry is a file of its own."""
    x = 1.0 + np.arange(4 * STEP) / 1000
    with uproot.recreate(path, compression=uproot.LZ4(1)) as f:
        f.mktree("Events", {"x": "float64"}).extend({"x": x})


def read_sum(chunk) -> float:
    return float(chunk.arrays(["x"], how=dict)["x"].to_numpy().sum())


def entries_of(node: Path, chunks, timeout: float = 60.0) -> list[Path]:
    """Each chunk's entry file, once the stopped worker's background writes reached the tier."""
    def written() -> list:
        with sqlite3.connect(node / "cache.db") as db:
            return [db.execute("SELECT filename FROM Cache WHERE key LIKE ?", (f"%|{c.routing_key}|x|%",)).fetchone()
                    for c in chunks]
    rows = wait_until(lambda: (lambda rows: all(r and r[0] for r in rows) and rows)(written()), timeout,
                      lambda: f"every chunk's entry in the tier (now: {written()})", interval=0.1)
    return [node / r[0] for r in rows]


def test_a_map_on_a_tier_with_a_named_pipe_and_links_for_entries_finishes_exact(broker, workers, tmp_path):
    data, node = tmp_path / "skim.root", tmp_path / "node-a"
    write(data)
    chunks = make_chunks(str(data), step=STEP)
    assert len(chunks) == 4
    with uproot.open(data) as f:               # the plain single-process loop
        x = f["Events"]["x"].array(library="np")
    exact = [float(x[c.entry_start:c.entry_stop].sum()) for c in chunks]
    env = {"RHTC_DISK_CACHE": str(node)}
    workers.start(1, env=env)
    assert remote_map(read_sum, chunks, broker=broker, progress=False, timeout=120) == exact
    files = entries_of(node, chunks)
    workers.stop_all()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fifo(files[0], elsewhere)                 # what the group member did
    link_to_a_fifo(files[1], elsewhere)
    link_to_a_genuine_copy(files[2], elsewhere)
    pipes = [files[0], elsewhere / "pipe.val"]
    (w2,) = workers.start(1, env=env)
    try:                                       # before the fix: "4 of 4 tasks unfinished after 90 s"
        warm = remote_map(read_sum, chunks, broker=broker, progress=False, timeout=90)
    finally:
        unblock(pipes)
    assert warm == exact
    tasks = last_map().record().tasks
    assert [t.bytes_file > 0 for t in tasks] == [True, True, True, False], "an odd entry was served"
    assert tasks[3].bytes_disk > 0
    log = workers.log(w2)
    for f, said in zip(files[:3], ["is a named pipe", "is a symbolic link", "is a symbolic link"]):
        assert f"{f.relative_to(node).as_posix()} {said}" in log, log
    assert "refused (3 so far)" in log, log
    assert not files[0].exists() and not files[1].is_symlink(), "the odd entries were left in the tier"
