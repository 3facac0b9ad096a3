"""Who may write the node's disk tier (worker/tierdir.py): nobody but the analyst. A
directory another user could write (their own, one its group or others can write, one
under a parent others can write, a link to one of those) is refused, with one message that
says what is wrong and what to do, and the worker runs without it; the tier's own files
(its secret, its id) are refused when they are not private to us; a tier made open to its
group before that was the rule (folders 0775, files 0664 under umask 002) is tightened
when it is next opened and stays warm; a link or another user's folder among the entries
is dealt with.

Real parts: real directories, owners and modes (the tests run as root in CI: ``nobody``
owns what "another user" owns), diskcache's real SQLite index."""
from __future__ import annotations

import logging
import os
import stat

import numpy as np
import pytest

from rhtc.errors import RhtcError
from rhtc.worker.disk import DiskTier, open_disk_tier
from tests.kits.disk import NOBODY, tier, walk

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")


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


# -- a tier made open to its group --------------------------------------------------------

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
    open_to_group = [f"{p} {oct(m)}" for p, m in walk(d).items() if m & 0o077 and p != "rhtc-tier-id"]
    assert open_to_group == [], "left open to the group"
    for k, v in values.items():
        assert np.array_equal(t.get(k), v), k
    assert (t.hits, t.refused, t.dropped) == (len(values), 0, 0)
    t.close()
    assert stat.S_IMODE(d.stat().st_mode) == 0o750   # the analyst's own choice: the group cannot write it


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
