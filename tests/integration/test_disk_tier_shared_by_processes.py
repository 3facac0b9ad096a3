"""The node's disk tier is private whatever the umask: every folder it makes is 0700 and
every file 0600 (its SQLite index and the index's ``-wal``/``-shm`` files, its entries and
their folders, its id and secret, the parents it makes on the way); a tier made before
that was the rule (folders 0775 under umask 002) is tightened when it is next opened and
stays warm; a tier directory its group can write is refused, naming it and the fix.

The umask is the whole process's: the tests that change it do so in a process of their
own, or put it back before anything else runs (the property test: no thread of this
process makes files meanwhile). Real parts: real directories, modes, owners and SQLite."""
from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rhtc.errors import RhtcError
from rhtc.worker.disk import DiskTier
from tests.conftest import ROOT

NOBODY = pwd.getpwnam("nobody").pw_uid

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


def _private_throughout(modes: dict[str, int]) -> list[str]:
    """What is not 0700 (a folder) or 0600 (a file) among ``modes`` (path -> st_mode)."""
    return [f"{p} {oct(m)}" for p, m in sorted(modes.items())
            if stat.S_IMODE(m) != (0o700 if stat.S_ISDIR(m) else 0o600)]


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
    assert _private_throughout(modes) == [], f"under umask {oct(umask)}"


def _walk(top: Path) -> dict[str, int]:
    return {str(p.relative_to(top)): p.lstat().st_mode for p in top.rglob("*")}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(umask=st.integers(0, 0o777))
def test_whatever_the_umask_what_the_tier_makes_is_private(tmp_path, umask):
    top = tmp_path / f"u{umask:03o}"
    old = os.umask(umask)
    try:
        d = DiskTier(top / "a" / "rhtc-cache", size_limit=10**9, min_free=0)
        assert d.put(f"v|{umask}", np.random.default_rng(umask).random(50_000))
        modes = _walk(top)
        d.close()
    finally:
        os.umask(old)
    assert any(p.endswith(".val") for p in modes) and any(p.endswith("cache.db-wal") for p in modes)
    assert _private_throughout(modes) == [], f"under umask {oct(umask)}"


def test_a_tier_made_open_to_its_group_is_tightened_and_stays_warm(tmp_path):
    """What the bug's tier looked like: made ``mkdir -m 750``, filled under umask 002 by
    workers before the fix (folders 0775, files 0664: a member of the group could replace
    an entry). Opened again, it is closed to the group and nothing in it is lost."""
    d = tmp_path / "rhtc-cache"
    d.mkdir(mode=0o750)
    t = DiskTier(d, size_limit=10**9, min_free=0)
    values = {f"v|{i}": np.random.default_rng(i).random(50_000) for i in range(6)}
    for k, v in values.items():
        assert t.put(k, v)
    t.close()
    for p in d.rglob("*"):                           # as the workers before the fix left it
        p.chmod(0o775 if p.is_dir() else 0o664)
    (d / "rhtc-tier-key").chmod(0o600)
    (d / "rhtc-tier-id").chmod(0o644)
    t = DiskTier(d, size_limit=10**9, min_free=0)
    open_to_group = [f"{p} {oct(m)}" for p, m in _walk(d).items() if m & 0o077 and p != "rhtc-tier-id"]
    assert open_to_group == [], "left open to the group"
    for k, v in values.items():
        assert np.array_equal(t.get(k), v), k
    assert (t.hits, t.refused, t.dropped) == (len(values), 0, 0)
    t.close()
    assert stat.S_IMODE(d.stat().st_mode) == 0o750   # the analyst's own choice: the group cannot write it


@pytest.mark.parametrize("mode", [0o770, 0o775, 0o730, 0o1770], ids=oct)
def test_a_tier_directory_its_group_can_write_is_refused_naming_it_and_the_fix(tmp_path, mode):
    d = tmp_path / "rhtc-cache"
    d.mkdir()
    d.chmod(mode)
    with pytest.raises(RhtcError) as caught:
        DiskTier(d, size_limit=10**9, min_free=0)
    message = str(caught.value)
    assert type(caught.value).__name__ == "DiskTierRefused", message
    for part in (str(d), f"mode {oct(mode)}", "its group", f"chmod 700 {d}", "RHTC_DISK_CACHE"):
        assert part in message, message
    assert list(d.iterdir()) == []                    # nothing written in it


def test_a_link_or_another_users_folder_among_the_entries_is_dealt_with(tmp_path):
    d = tmp_path / "rhtc-cache"
    t = DiskTier(d, size_limit=10**9, min_free=0)
    assert t.put("v|A", np.random.default_rng(0).random(50_000))
    t.close()
    (folder,) = [p for p in d.iterdir() if p.is_dir()]
    folder.chmod(0o777)                              # open to all: what it holds is checked
    (tmp_path / "theirs").mkdir()
    (folder / "zz").symlink_to(tmp_path / "theirs")  # a way out of the tier: removed
    DiskTier(d, size_limit=10**9, min_free=0).close()
    assert not (folder / "zz").is_symlink() and (tmp_path / "theirs").exists()
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    planted = d / "ee"                               # another user's folder of entries: refused
    planted.mkdir(mode=0o777)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(RhtcError, match=f"{planted} belongs to nobody"):
        DiskTier(d, size_limit=10**9, min_free=0)
