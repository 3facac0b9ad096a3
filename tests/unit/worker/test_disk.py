"""The node's disk tier's store (worker/disk.py, its entries: worker/entries.py): safe when
an entry is torn or damaged (a node that crashed: dropped, and read again), capped in bytes
across its writers, never filling the disk; memory-mapped entries too. What it serves is
its own: nothing in the tier is ever unpickled, and an entry is served only when it
carries the tag of the tier's secret for its own key (a row pointed at another chunk's
entry, at a file outside the tier, or an entry written with another secret is refused).

Real parts: real directories and diskcache's real SQLite index tampered with through
sqlite3, in this process. Several processes on one tier:
tests/integration/test_disk_tier_shared_by_processes.py; workers replaced on a node:
tests/scenarios/test_a_replaced_worker_is_warm_from_the_node_disk.py."""
from __future__ import annotations

import pickle
import shutil
import sqlite3
from pathlib import Path

import numpy as np

from rhtc.worker.disk import DiskTier, Seal, decode, encode
from tests.kits.disk import noise, tier


# -- damaged entries, the cap, a full disk -----------------------------------------------------

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


def test_a_corrupt_or_truncated_mapped_entry_is_a_miss(tmp_path):
    """Entries of MAP_FROM bytes and more are memory-mapped: damage is still a miss."""
    from rhtc.worker.disk import MAP_FROM
    d = DiskTier(tmp_path, size_limit=10**9, min_free=0)
    value = np.arange(MAP_FROM // 4 + 10, dtype=np.float64)
    for damage in ("flip", "truncate"):
        assert d.put("v|big", value)
        (f,) = list(tmp_path.rglob("*.val"))
        assert f.stat().st_size >= MAP_FROM
        assert np.array_equal(d.get("v|big"), value)
        raw = bytearray(f.read_bytes())
        if damage == "flip":
            raw[len(raw) * 2 // 3] ^= 0x01
        else:
            del raw[len(raw) - 100:]
        f.write_bytes(bytes(raw))
        dropped = d.dropped
        assert d.get("v|big") is None and d.dropped == dropped + 1
        assert not list(tmp_path.rglob("*.val"))          # dropped: the next worker reads the file
    d.close()


# -- the entries: never a pickle, only our own ---------------------------------------------------

class Marker:
    """A pickle that, when loaded, creates the file ``path``: what an attacker would plant."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_pickle_planted_in_the_index_is_never_loaded(tmp_path):
    d = tmp_path / "rhtc-cache"
    first = tier(d)
    value = noise(0)
    assert first.put("v|big", value) and first.put("v|small", np.arange(3))
    first.close()
    markers = [tmp_path / f"ran-{where}" for where in ("from-a-file", "from-the-index", "as-a-key")]
    ((big_file, _),) = _rows(d, "v|big")
    (d / big_file).write_bytes(pickle.dumps(Marker(markers[0])))
    with sqlite3.connect(d / "cache.db") as db:              # PICKLE rows: the value in a file, in the index
        db.execute("UPDATE Cache SET mode = 4 WHERE key = 'v|big'")
        db.execute("UPDATE Cache SET mode = 4, value = ? WHERE key = 'v|small'", (pickle.dumps(Marker(markers[1])),))
        db.execute("INSERT INTO Cache (key, raw, store_time, mode, value) VALUES (?, 0, 0, 1, ?)",
                   (pickle.dumps(Marker(markers[2])), b"x"))  # a pickled key
    d2 = tier(d)
    got = [d2.get("v|big"), d2.get("v|small")]
    keys = list(d2._store)                                    # the index's keys, decoded (iteration)
    assert not any(m.exists() for m in markers), "a pickle from the tier was loaded"
    assert got == [None, None] and d2.refused == 2 and d2.hits == 0
    assert None in keys
    assert d2.put("v|big", value) and np.array_equal(d2.get("v|big"), value)     # written again: served
    d2.close()


def _rows(d: Path, *keys: str) -> list[tuple]:
    with sqlite3.connect(d / "cache.db") as db:
        return [db.execute("SELECT filename, value FROM Cache WHERE key = ?", (k,)).fetchone() for k in keys]


def test_a_row_pointed_at_another_chunks_entry_is_refused(tmp_path):
    d = tmp_path / "rhtc-cache"
    first = tier(d)
    a, b = noise(1), noise(2)
    assert first.put("v|A|Muon_pt|ak", a) and first.put("v|B|Muon_pt|ak", b)
    first.close()
    (fa, _), (fb, _) = _rows(d, "v|A|Muon_pt|ak", "v|B|Muon_pt|ak")
    assert fa and fb
    with sqlite3.connect(d / "cache.db") as db:              # swap the two rows' files
        db.execute("UPDATE Cache SET filename = ? WHERE key = ?", (fb, "v|A|Muon_pt|ak"))
        db.execute("UPDATE Cache SET filename = ? WHERE key = ?", (fa, "v|B|Muon_pt|ak"))
    d2 = tier(d)
    assert d2.get("v|A|Muon_pt|ak") is None, "served another chunk's entry"
    assert d2.get("v|B|Muon_pt|ak") is None
    assert (d2.refused, d2.dropped, d2.hits) == (2, 0, 0)
    assert d2.put("v|A|Muon_pt|ak", a) and np.array_equal(d2.get("v|A|Muon_pt|ak"), a)
    d2.close()


def test_a_row_naming_a_file_outside_the_tier_is_never_read_nor_deleted(tmp_path):
    d = tmp_path / "rhtc-cache"
    first = tier(d)
    assert first.put("v|A", noise(1))
    first.close()
    ((fa, _),) = _rows(d, "v|A")
    outside = tmp_path / "thesis.val"                        # a genuine entry, copied out of the tier
    shutil.copyfile(d / fa, outside)
    with sqlite3.connect(d / "cache.db") as db:
        db.execute("UPDATE Cache SET filename = ? WHERE key = ?", (str(outside), "v|A"))
    d2 = tier(d)
    assert d2.get("v|A") is None and d2.refused == 1
    assert outside.exists(), "a file outside the tier was deleted"
    d2.close()


def test_an_entry_written_with_another_secret_is_refused(tmp_path):
    theirs, ours = tmp_path / "their-cache", tmp_path / "rhtc-cache"
    t = tier(theirs)
    assert t.put("v|A", noise(7)) and t.put("v|small", np.arange(3))
    t.close()
    tier(ours).close()                                        # our tier, with its own secret
    for item in theirs.iterdir():                             # their index and entries, not their key
        if not item.name.startswith("rhtc-tier-"):
            (shutil.copytree if item.is_dir() else shutil.copyfile)(item, ours / item.name)
    d = tier(ours)
    assert d.get("v|A") is None and d.get("v|small") is None, "served an entry made without our secret"
    assert (d.refused, d.dropped) == (2, 0)
    d.close()
