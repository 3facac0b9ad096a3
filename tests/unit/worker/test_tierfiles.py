"""The files of the node's disk tier (worker/tierfiles.py): made private whatever the
umask, and opened so that an odd entry can neither block a worker nor be served.

Every folder the tier makes is 0700 and every file 0600, under any umask. A named pipe, a
symbolic link, a folder, a device or another user's file where an entry's file should be
is never opened in a way that can block, never read, counted in ``DiskTier.refused``,
logged by name, and the chunk is read from its input file.

The bug: a member of the tier's group replaced an entry's file with a named pipe (the
entry folders were 0775 under umask 002) and the next worker's map hung. Real parts:
real named pipes, links and owners (the tests run as root in CI: ``nobody`` owns what
"another user" owns), diskcache's real SQLite index. The umask is the whole process's: the
property test puts it back before anything else runs (no thread of this process makes
files meanwhile); a tier made in a process of its own under a umask:
tests/integration/test_disk_tier_shared_by_processes.py; a map on such a tier, with real
workers: tests/scenarios/test_a_tampered_node_disk_is_refused_not_served.py."""
from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rhtc.worker.disk import DiskTier
from rhtc.worker.tierfiles import OddEntry, open_entry
from tests.kits.disk import (NOBODY, fifo, link_to_a_fifo, link_to_a_genuine_copy, noise, private_throughout, tier,
                           unblock, walk)


# -- whatever the umask, what the tier makes is private ----------------------------------------

@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(umask=st.integers(0, 0o777))
def test_whatever_the_umask_what_the_tier_makes_is_private(tmp_path, umask):
    top = tmp_path / f"u{umask:03o}"
    old = os.umask(umask)
    try:
        d = DiskTier(top / "a" / "rhtc-cache", size_limit=10**9, min_free=0)
        assert d.put(f"v|{umask}", np.random.default_rng(umask).random(50_000))
        modes = walk(top)
        d.close()
    finally:
        os.umask(old)
    assert any(p.endswith(".val") for p in modes) and any(p.endswith("cache.db-wal") for p in modes)
    assert private_throughout(modes) == [], f"under umask {oct(umask)}"


# -- an odd entry: refused, counted, named; never a wait -------------------------------------

def entry_file(directory: Path, key: str) -> Path:
    with sqlite3.connect(directory / "cache.db") as db:
        (name,) = db.execute("SELECT filename FROM Cache WHERE key = ?", (key,)).fetchone()
    assert name, f"{key} has no file of its own"
    return directory / name


def without_blocking(call, pipes, guard: float = 60.0):
    """``call()``'s value; the test fails (instead of hanging) when it is still blocked
    after ``guard`` s, i.e. waiting on one of the named pipes ``pipes``: the fixed code
    never waits on one at all, so the guard only ever matters for a broken build."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    t.join(guard)
    if t.is_alive():
        unblock(pipes)
        t.join(5)
        pytest.fail(f"the disk tier blocked opening an entry (a named pipe among {[str(p) for p in pipes]})")
    return out[0]


def _folder(path: Path, tmp: Path) -> None:
    path.unlink()
    path.mkdir(mode=0o700)


def _group_writable(path: Path, tmp: Path) -> None:              # ours, intact, but the group could rewrite it
    path.chmod(0o664)


def _another_users(path: Path, tmp: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(path, NOBODY, NOBODY)


def _device(path: Path, tmp: Path) -> None:
    path.unlink()
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))   # like /dev/null
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")


def _folder_on_the_way_is_a_link(path: Path, tmp: Path) -> None:  # ab/cd -> a copy of ab/cd elsewhere
    shutil.copytree(path.parent, tmp / "elsewhere")
    shutil.rmtree(path.parent)
    path.parent.symlink_to(tmp / "elsewhere")


def _folder_on_the_way_is_a_fifo(path: Path, tmp: Path) -> None:
    shutil.rmtree(path.parent)
    os.mkfifo(path.parent, 0o600)


ODD = {"a named pipe": (fifo, "is a named pipe"),
       "a link to a genuine copy": (link_to_a_genuine_copy, "is a symbolic link"),
       "a link to a named pipe": (link_to_a_fifo, "is a symbolic link"),
       "a folder": (_folder, "is a folder"),
       "a group-writable file": (_group_writable, "has mode 0o664: other users can write it"),
       "another user's file": (_another_users, f"belongs to uid {NOBODY}"),
       "a device": (_device, "is a character device"),
       "a link on the way": (_folder_on_the_way_is_a_link, "is a symbolic link, not a folder"),
       "a named pipe on the way": (_folder_on_the_way_is_a_fifo, "is a named pipe, not a folder")}


@pytest.mark.parametrize("odd", ODD)
def test_an_odd_entry_is_refused_counted_named_and_never_blocks(tmp_path, odd, caplog):
    d, value = tmp_path / "rhtc-cache", noise(1)
    first = tier(d)
    assert first.put("v|A|x|ak", value) and first.put("v|B|x|ak", np.arange(3))      # B: in the index
    first.close()
    path = entry_file(d, "v|A|x|ak")
    make, said = ODD[odd]
    make(path, tmp_path)
    pipes = [p for p in (path, path.parent, tmp_path / "pipe.val") if p.exists() and stat.S_ISFIFO(p.lstat().st_mode)]
    t = tier(d)
    with caplog.at_level(logging.WARNING, logger="rhtc.worker"):
        got = without_blocking(lambda: t.get("v|A|x|ak"), pipes)
    assert got is None, f"{odd} was served"
    assert (t.refused, t.hits, t.dropped) == (1, 0, 0)
    message = "\n".join(r.getMessage() for r in caplog.records)
    assert "'v|A|x|ak' was refused (1 so far)" in message and said in message, message
    assert path.relative_to(d).as_posix() in message, message                    # the entry's file, by name
    assert t.get("v|B|x|ak").tolist() == [0, 1, 2], "another entry was lost"
    assert t.put("v|A|x|ak", value) and np.array_equal(t.get("v|A|x|ak"), value)   # read again, kept again
    t.close()


def test_open_entry_reads_only_a_regular_private_file_of_ours(tmp_path):
    (tmp_path / "ab" / "cd").mkdir(parents=True)
    good = tmp_path / "ab" / "cd" / "good.val"
    good.write_bytes(b"ours")
    good.chmod(0o644)                          # readable by others is fine: written by us only
    fd = open_entry(str(tmp_path), "ab/cd/good.val")
    assert os.read(fd, 10) == b"ours"
    os.close(fd)
    os.mkfifo(tmp_path / "ab" / "cd" / "pipe.val")
    with pytest.raises(OddEntry, match="the file ab/cd/pipe.val is a named pipe"):
        open_entry(str(tmp_path), "ab/cd/pipe.val")
    with pytest.raises(FileNotFoundError):     # evicted meanwhile: a plain miss, not a refusal
        open_entry(str(tmp_path), "ab/cd/gone.val")


# -- whatever sits there: the exact value, or refused; never a wait ---------------------------

KINDS = ["file", "fifo", "link to the file", "folder"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), mode=st.integers(0, 0o777))
def test_whatever_sits_in_an_entrys_place_the_value_is_exact_or_refused(tmp_path, kind, mode):
    d = tmp_path / f"t-{kind.replace(' ', '-')}-{mode:o}"
    if d.exists():
        shutil.rmtree(d)
    value, key = noise(mode), f"v|{mode}|x|ak"
    t = tier(d)
    assert t.put(key, value)
    path = entry_file(d, key)
    if kind == "fifo":
        fifo(path, d)
    elif kind == "link to the file":
        shutil.copyfile(path, d / "copy")
        path.unlink()
        path.symlink_to(d / "copy")
    elif kind == "folder":
        _folder(path, d)
    if not path.is_symlink():
        path.chmod(mode)
    got = without_blocking(lambda: t.get(key), [path])
    private_file = kind == "file" and not mode & 0o022
    if private_file:
        assert np.array_equal(got, value) and t.refused == 0
    else:
        assert got is None and t.refused == 1, (kind, oct(mode))
    t.close()
