"""No odd entry can hang a worker or be served (the disk tier is the analyst's alone): a
named pipe, a symbolic link, a folder, a device or another user's file where an entry's
file should be is never opened in a way that can block, never read, counted in
``DiskTier.refused``, logged by name, and the chunk is read from its input file.

The bug: a member of the tier's group replaced an entry's file with a named pipe (the
entry folders were 0775 under umask 002) and the next worker's map hung. Real parts:
real named pipes, links and owners (the tests run as root in CI: ``nobody`` owns what
"another user" owns), diskcache's real SQLite index, real workers on a real redis-server
reading ROOT files written here with uproot."""
from __future__ import annotations

import logging
import os
import pwd
import shutil
import sqlite3
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
import uproot
from hypothesis import HealthCheck, given, settings, strategies as st

from rhtc import last_map
from rhtc.client import make_chunks, remote_map
from rhtc.worker.disk import DiskTier
from rhtc.worker.tierfiles import OddEntry, open_entry
from tests.helpers import wait_until

NOBODY = pwd.getpwnam("nobody").pw_uid


def tier(path) -> DiskTier:
    return DiskTier(path, size_limit=10**9, min_free=0)


def noise(seed: int) -> np.ndarray:
    """400 kB that LZ4 cannot shrink: an entry in a file of its own."""
    return np.random.default_rng(seed).random(50_000)


def entry_file(directory: Path, key: str) -> Path:
    with sqlite3.connect(directory / "cache.db") as db:
        (name,) = db.execute("SELECT filename FROM Cache WHERE key = ?", (key,)).fetchone()
    assert name, f"{key} has no file of its own"
    return directory / name


def unblock(pipes) -> None:
    """Let a reader blocked on one of ``pipes`` go: open its writing end and close it."""
    for pipe in pipes:
        try:
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:                          # no reader waiting (ENXIO), or gone
            pass


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


# -- what can sit where an entry's file should be ---------------------------------------------

def _fifo(path: Path, tmp: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def _link_to_a_genuine_copy(path: Path, tmp: Path) -> None:     # intact and tagged: still never followed
    shutil.copyfile(path, tmp / "copy.val")
    path.unlink()
    path.symlink_to(tmp / "copy.val")


def _link_to_a_fifo(path: Path, tmp: Path) -> None:
    os.mkfifo(tmp / "pipe.val", 0o600)
    path.unlink()
    path.symlink_to(tmp / "pipe.val")


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


ODD = {"a named pipe": (_fifo, "is a named pipe"),
       "a link to a genuine copy": (_link_to_a_genuine_copy, "is a symbolic link"),
       "a link to a named pipe": (_link_to_a_fifo, "is a symbolic link"),
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
        _fifo(path, d)
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


# -- end to end: real workers -----------------------------------------------------------------

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
    _fifo(files[0], elsewhere)                 # what the group member did
    _link_to_a_fifo(files[1], elsewhere)
    _link_to_a_genuine_copy(files[2], elsewhere)
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
