"""The node's disk tier (worker/disk.py) shared by several processes, as the workers of a
node share it: a writer killed at any instant leaves no torn entry; two processes writing
the same entries at once leave each key's one right value; a tier made by a process under
any umask (the umask is the whole process's: each is made in a process of its own) is 0700
and 0600 throughout, its SQLite index and the index's ``-wal``/``-shm`` files, its entries
and their folders, its id and secret, and the parents it makes on the way.

Real parts: real ``python -c`` processes (stopped by pid), directories, modes and SQLite;
no Redis, no worker. One process: tests/unit/worker/test_disk.py, test_tierfiles.py."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from rhtc.worker.disk import DiskTier
from tests.conftest import ROOT
from tests.kits.disk import private_throughout


# -- writers killed, writers at once ----------------------------------------------------------

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


# -- a tier made under any umask ----------------------------------------------------------------

#: a tier made and used under a umask, its every folder and file listed while it is open
#: (SQLite's -wal and -shm files exist only then)
UNDER_UMASK = textwrap.dedent("""
    import json, os, sys, numpy as np
    os.umask(int(sys.argv[2], 8))
    from rhtc.worker.disk import DiskTier
    d = DiskTier(sys.argv[1], size_limit=10**9, min_free=0)
    assert d.put("v|big", np.random.default_rng(0).random(50_000)) and d.put("v|small", np.arange(3))
    d.put_later("v|later", np.random.default_rng(1).random(50_000))
    assert d.flush(60) and d.get("v|big") is not None and d.get("v|later") is not None
    top = sys.argv[3]
    modes = {os.path.relpath(os.path.join(here, n), top): oct(os.lstat(os.path.join(here, n)).st_mode)
             for here, folders, files in os.walk(top) for n in folders + files}
    print(json.dumps(modes))
    d.close()
""")


@pytest.mark.heavy
@pytest.mark.parametrize("umask", [0o002, 0o000, 0o022, 0o277], ids=oct)
def test_a_tier_made_under_any_umask_is_0700_and_0600_throughout(tmp_path, umask):
    top = tmp_path / "scratch"                       # the parents made on the way are the tier's too
    top.mkdir(mode=0o700)
    out = subprocess.run([sys.executable, "-c", UNDER_UMASK, str(top / "me" / "rhtc-cache"), oct(umask), str(top)],
                         capture_output=True, text=True, cwd=str(ROOT), timeout=300)
    assert out.returncode == 0, out.stderr
    modes = {p: int(m, 8) for p, m in json.loads(out.stdout).items()}
    names = {Path(p).name for p in modes}
    assert {"me", "rhtc-cache", "cache.db", "cache.db-wal", "cache.db-shm", "rhtc-tier-id", "rhtc-tier-key"} <= names
    assert sum(p.endswith(".val") for p in modes) == 2, modes          # two entries in files of their own
    assert private_throughout(modes) == [], f"under umask {oct(umask)}"
