"""What the tests of the node's disk tier (worker/disk.py, worker/tierdir.py,
worker/tierfiles.py) share: a tier opened with no cap to speak of, values LZ4 cannot shrink
(an entry in a file of its own), what a member of the tier's group could put where an
entry's file should be (a named pipe, a link), the modes of everything a tier holds, and
the task that reads a chunk's muons on workers of a node.

Nothing is mocked: real directories, modes, owners (``nobody`` owns what "another user"
owns; the tests run as root in CI) and named pipes.

Example::

    from tests.kits.disk import fifo, noise, tier, unblock

    t = tier(tmp_path / "rhtc-cache")
    assert t.put("v|A", noise(1))
"""
from __future__ import annotations

import os
import pwd
import shutil
import stat
from pathlib import Path

import numpy as np

from rhtc.worker.disk import DiskTier

NOBODY = pwd.getpwnam("nobody").pw_uid


def tier(path) -> DiskTier:
    return DiskTier(path, size_limit=10**9, min_free=0)


def noise(seed: int) -> np.ndarray:
    """400 kB that LZ4 cannot shrink: an entry in a file of its own."""
    return np.random.default_rng(seed).random(50_000)


def unblock(pipes) -> None:
    """Let a reader blocked on one of ``pipes`` go: open its writing end and close it."""
    for pipe in pipes:
        try:
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:                          # no reader waiting (ENXIO), or gone
            pass


# -- what can sit where an entry's file should be ---------------------------------------------

def fifo(path: Path, tmp: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def link_to_a_genuine_copy(path: Path, tmp: Path) -> None:     # intact and tagged: still never followed
    shutil.copyfile(path, tmp / "copy.val")
    path.unlink()
    path.symlink_to(tmp / "copy.val")


def link_to_a_fifo(path: Path, tmp: Path) -> None:
    os.mkfifo(tmp / "pipe.val", 0o600)
    path.unlink()
    path.symlink_to(tmp / "pipe.val")


# -- the modes of what a tier holds -----------------------------------------------------------

def private_throughout(modes: dict[str, int]) -> list[str]:
    """What is not 0700 (a folder) or 0600 (a file) among ``modes`` (path -> st_mode)."""
    return [f"{p} {oct(m)}" for p, m in sorted(modes.items())
            if stat.S_IMODE(m) != (0o700 if stat.S_ISDIR(m) else 0o600)]


def walk(top: Path) -> dict[str, int]:
    return {str(p.relative_to(top)): p.lstat().st_mode for p in top.rglob("*")}


# -- on workers --------------------------------------------------------------------------------

def pt_sum(chunk):
    import awkward as ak
    return float(ak.sum(chunk.arrays(["Muon_pt", "Muon_eta"], how=dict)["Muon_pt"]))
