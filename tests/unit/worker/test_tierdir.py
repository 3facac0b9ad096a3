"""The node's disk tier is the analyst's alone (issue 28, item 3): a directory another user
could write is refused, with one message that says what is wrong and what to do; nothing
in the tier is ever unpickled; an entry is served only when it carries the tag of the
tier's secret for its own key. Real parts: real directories, owners and modes (the tests
run as root in CI: `nobody` owns what "another user" owns), diskcache's real SQLite index
tampered with through sqlite3, real workers reading the real NanoAOD samples."""
from __future__ import annotations

import logging
import os
import pickle
import pwd
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rhtc.client import imap_unordered, make_chunks
from rhtc.errors import RhtcError
from rhtc.worker.disk import DiskTier, open_disk_tier
from tests.conftest import NANOAOD, needs_nanoaod
from tests.helpers import wait_until

NOBODY = pwd.getpwnam("nobody").pw_uid
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")


def tier(path) -> DiskTier:
    return DiskTier(path, size_limit=10**9, min_free=0)


def refused(path, *wanted: str) -> str:
    """Opening a tier at ``path`` raises the refusal; its message names ``wanted`` and the fix."""
    with pytest.raises(RhtcError) as caught:
        tier(path)
    message = str(caught.value)
    assert type(caught.value).__name__ == "DiskTierRefused", message
    for part in (*wanted, "not private", "mkdir -m 700"):
        assert part in message, message
    return message


# -- the directory -----------------------------------------------------------------------

@as_root
def test_a_directory_owned_by_another_user_is_refused_and_the_worker_runs_without_it(tmp_path, caplog):
    theirs = tmp_path / "rhtc-cache"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    refused(theirs, str(theirs), f"belongs to nobody (uid {NOBODY})")

    class Settings:                                # what open_disk_tier reads of the worker's settings
        disk_cache, disk_cache_size = str(theirs), 10**9
    with caplog.at_level(logging.ERROR, logger="rhtc.worker"):
        assert open_disk_tier(Settings, "w1") is None
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert str(theirs) in record.getMessage() and "mkdir -m 700" in record.getMessage()
    assert list(theirs.iterdir()) == []            # nothing written in it


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777], ids=oct)
def test_a_directory_others_can_write_is_refused(tmp_path, mode):
    shared = tmp_path / "rhtc-cache"
    shared.mkdir()
    shared.chmod(mode)
    refused(shared, str(shared), f"mode {oct(mode)}", "other users can write it")


def test_a_directory_under_a_parent_others_can_write_is_refused(tmp_path):
    parent = tmp_path / "shared"                   # world-writable, not sticky: anyone may rename our dir
    parent.mkdir()
    parent.chmod(0o777)
    refused(parent / "rhtc-cache", f"its parent {parent} has mode 0o777")
    refused(parent / "deeper" / "rhtc-cache", f"its parent {parent} has mode 0o777")
    assert list(parent.iterdir()) == []            # nothing made under it


@as_root
def test_a_sticky_world_writable_parent_is_fine_but_not_a_sibling_another_user_made(tmp_path):
    vartmp = tmp_path / "var-tmp"                  # like /var/tmp: root's, mode 1777
    vartmp.mkdir()
    vartmp.chmod(0o1777)
    d = tier(vartmp / "rhtc-cache")
    assert d.put("k", np.arange(10)) and d.get("k").tolist() == list(range(10))
    d.close()
    made = vartmp / "rhtc-cache"
    assert made.stat().st_mode & 0o7777 == 0o700
    for own in ("rhtc-tier-id", "rhtc-tier-key"):
        assert (made / own).stat().st_mode & 0o777 == 0o600, own
    planted = vartmp / "their-cache"               # made first by another user of the node
    planted.mkdir(mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    refused(planted, "belongs to nobody")


@as_root
def test_a_link_at_the_leaf_is_judged_by_what_it_points_to(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    link = tmp_path / "rhtc-cache"
    link.symlink_to(theirs)
    refused(link, f"{link} -> {theirs}", "belongs to nobody")
    mine = tmp_path / "mine"                       # a link to our own private directory: used through
    mine.mkdir(mode=0o700)                         # its target (the link may change, the tier does not)
    link.unlink()
    link.symlink_to(mine)
    d = tier(link)
    assert d.directory == str(mine)
    d.close()
    link.unlink()
    link.symlink_to(tmp_path / "nowhere")          # a dangling link: never followed to make a directory
    refused(link, "which does not exist")
    assert not (tmp_path / "nowhere").exists()


# -- the tier's own files ----------------------------------------------------------------

@pytest.mark.parametrize("damage", ["mode 0644", "owner nobody", "a link", "short"])
def test_a_key_file_not_private_to_us_is_refused(tmp_path, damage):
    d = tmp_path / "rhtc-cache"
    d.mkdir(mode=0o700)
    key = d / "rhtc-tier-key"
    if damage == "a link":
        elsewhere = tmp_path / "key"
        elsewhere.write_bytes(os.urandom(32))
        elsewhere.chmod(0o600)
        key.symlink_to(elsewhere)
        wanted = "is a symbolic link"
    else:
        key.write_bytes(os.urandom(32 if damage != "short" else 5))
        key.chmod(0o644 if damage == "mode 0644" else 0o600)
        wanted = {"mode 0644": "has mode 0o644: other users can read it (chmod 600", "short": "holds 5 bytes, not 32"}.get(damage, "")
        if damage == "owner nobody":
            if os.geteuid() != 0:
                pytest.skip("needs root")
            os.chown(key, NOBODY, NOBODY)
            wanted = "belongs to nobody"
    refused(d, str(key), wanted)


def test_a_tier_id_file_that_is_a_link_is_refused(tmp_path):
    d = tmp_path / "rhtc-cache"
    d.mkdir(mode=0o700)
    (tmp_path / "id").write_text("feedfacecafe")
    (d / "rhtc-tier-id").symlink_to(tmp_path / "id")
    refused(d, "rhtc-tier-id is a symbolic link")


# -- the entries ---------------------------------------------------------------------------

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


def noise(seed: int) -> np.ndarray:
    """400 kB that LZ4 cannot shrink: an entry in a file of its own."""
    return np.random.default_rng(seed).random(50_000)


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


# -- end to end: real workers ---------------------------------------------------------------

def _pt_sum(chunk):
    import awkward as ak
    return float(ak.sum(chunk.arrays(["Muon_pt", "Muon_eta"], how=dict)["Muon_pt"]))


@needs_nanoaod
def test_a_rerun_after_every_worker_is_replaced_refuses_a_row_pointed_at_another_chunk(broker, workers, tmp_path):
    node = tmp_path / "node-a"
    env = {"RHTC_DISK_CACHE": str(node)}
    workers.start(1, env=env)
    chunks = make_chunks(str(NANOAOD / "nano_dimuon.root"), step=20)
    assert len(chunks) == 2
    cold = {r.index: r.value for r in imap_unordered(_pt_sum, chunks, broker=broker)}
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
    warm = {r.index: r for r in imap_unordered(_pt_sum, chunks, broker=broker)}
    assert [warm[i].value for i in range(2)] == [cold[i] for i in range(2)]
    assert warm[0].meta["bytes_file"] > 0, "chunk 0 was not read from its file"
    assert warm[1].meta["bytes_file"] == 0 and warm[1].meta["bytes_disk"] > 0
    assert "refused" in workers.log(w2), workers.log(w2)
