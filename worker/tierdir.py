"""Who may write the node's disk tier (:mod:`worker.disk`): nobody but the analyst.

A worker reads back what the tier holds as branch arrays, so a directory that another user
of the node could write (one they created first in ``/var/tmp``, or under a parent they
can write) would let them hand the analysis their numbers. Before a worker uses a tier:

* the **directory** is the analyst's: owned by the worker's user and writable by no one
  else, its group included (it is made with mode 0700 when absent, and so are the parents
  made on the way, whatever the umask; the leaf with ``mkdir``, which never
  follows a link planted there); a symbolic link is followed once, and what it points to
  is checked and used from then on (the link may change, the tier does not);
* every **parent** up to ``/`` is owned by us or by root and writable by no one else, or
  is sticky (``/tmp``, ``/var/tmp``: mode 1777, where nobody can rename another's entry);
* the tier's **own files** (its id, its secret) are regular files owned by us, never
  links, written once (the first writer wins, atomically) with mode 0600; the secret is
  readable by nobody else;
* what the tier **holds** (:func:`private_contents`): its SQLite index is made by us with
  mode 0600 before SQLite opens it (SQLite gives its ``-wal`` and ``-shm`` files the
  index's mode), and every folder and file the tier makes is 0700/0600 whatever the umask
  (:mod:`worker.tierfiles`). A tier made before that was the rule (a folder 0775 under
  umask 002: the group could replace an entry) is tightened the first time it is opened.

Anything else raises :class:`DiskTierRefused`, one message naming the path, what is
wrong and what to do. The secret, 32 random bytes in ``rhtc-tier-key``, authenticates
every entry (:mod:`worker.entries`): only workers that can read it write entries that
are ever served.

    >>> import os, tempfile
    >>> d = private_directory(os.path.join(tempfile.mkdtemp(), "rhtc-cache"))
    >>> oct(os.stat(d).st_mode & 0o777), len(tier_secret(d)), tier_id(d) == tier_id(d)
    ('0o700', 32, True)
"""
from __future__ import annotations

import errno
import grp
import os
import pwd
import re
import secrets
import stat
import uuid

from ..errors import RhtcError
from .tierfiles import FILE_MODE, FOLDER_MODE, READ_FLAGS, create_file, kind, make_folder

TIER_ID_FILE = "rhtc-tier-id"
TIER_KEY_FILE = "rhtc-tier-key"
KEY_BYTES = 32
FIX = "point --disk-cache (RHTC_DISK_CACHE) at a directory of your own, e.g. mkdir -m 700 /scratch/$USER/rhtc-cache"
INDEX_FILES = ("cache.db", "cache.db-wal", "cache.db-shm", "cache.db-journal")   # diskcache's SQLite index
ENTRY_FOLDER = re.compile(r"[0-9a-f]{2}")          # diskcache's folders of entries: ab/cd/<name>.val


class DiskTierRefused(RhtcError):
    """The node's disk tier directory (or one of its files) is not private to this user:
    the worker runs without the tier (its RAM cache only) and says why."""


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"group {grp.getgrgid(gid).gr_name}, gid {gid}"
    except KeyError:
        return f"gid {gid}"


def _refuse(directory: str, what: str) -> DiskTierRefused:
    return DiskTierRefused(f"the disk cache {directory} is not private: {what}; it was not used "
                           f"(no disk tier: the worker reads the input files). Fix: {FIX}")


def private_directory(directory: str | os.PathLike) -> str:
    """The real path of ``directory`` once checked private (see the module), made with mode
    0700 when absent; :class:`DiskTierRefused` otherwise. Use the path returned, not the
    one given: a link on the way is not followed again.

    >>> import tempfile
    >>> private_directory(tempfile.mkdtemp()).startswith("/")
    True
    """
    given = os.path.abspath(os.fspath(directory))
    _check_parents(given, os.path.realpath(given))      # nothing is made under a parent others can replace
    if not os.path.lexists(given):
        parts = [p for p in given.split("/") if p]
        for here in ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]:
            if not os.path.lexists(here):        # each 0700 whatever the umask (os.makedirs: not its
                make_folder(here)                # parents); never follows a link planted there (EEXIST)
    real = os.path.realpath(given)
    shown = given if real == given else f"{given} -> {real}"
    if not os.path.lexists(real):
        raise _refuse(given, f"it is a symbolic link to {real}, which does not exist")
    _check_parents(shown, real)
    st = os.lstat(real)
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(shown, "it is not a directory")
    if st.st_uid != me:
        raise _refuse(shown, f"it belongs to {_who(st.st_uid)}, not to {_who(me)} who runs the worker")
    if st.st_mode & 0o022:
        who = "every user of the node" if st.st_mode & 0o002 else f"every member of its {_group(st.st_gid)}"
        raise _refuse(shown, f"it has mode {oct(st.st_mode & 0o7777)}: other users can write it ({who}); "
                             f"run chmod 700 {real}, or set RHTC_DISK_CACHE to another directory")
    return real


def _check_parents(shown: str, real: str) -> None:
    """Each existing parent of ``real``, from ``/`` down, is ours or root's, and writable by
    nobody else unless sticky."""
    parts = [p for p in real.split("/") if p]
    for here in ["/" + "/".join(parts[:i]) for i in range(len(parts))]:
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return                               # made by us, with mode 0700, then checked again
        if st.st_uid not in (os.geteuid(), 0):
            raise _refuse(shown, f"its parent {here} belongs to {_who(st.st_uid)}, who can replace it")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise _refuse(shown, f"its parent {here} has mode {oct(st.st_mode & 0o7777)}: other users "
                                 f"can replace it (neither private nor sticky like /tmp)")


def private_contents(directory: str) -> None:
    """Make what ``directory`` (a checked private tier) holds private before diskcache opens
    it: its SQLite index made by us with mode 0600 (SQLite gives its ``-wal`` and ``-shm``
    files the index's mode). What an older tier holds is set to 0600 (the index) and 0700
    (the folders of entries; what they hold too when others could write in them: a walk,
    once per folder). :class:`DiskTierRefused` for an index or a folder of entries that is
    not ours, or is a link: nobody else could have made it unless they could once write the
    tier.

    >>> import tempfile; d = tempfile.mkdtemp(); private_contents(d)
    >>> oct(os.stat(os.path.join(d, "cache.db")).st_mode & 0o777)
    '0o600'
    """
    try:
        os.close(create_file(os.path.join(directory, INDEX_FILES[0])))
    except FileExistsError:                      # an older tier, or another worker came first
        pass
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in sorted(os.listdir(dir_fd)):
            if name in INDEX_FILES or ENTRY_FOLDER.fullmatch(name):
                _set_mode(directory, name, dir_fd, folder=name not in INDEX_FILES)
    finally:
        os.close(dir_fd)


def _set_mode(directory: str, name: str, dir_fd: int, folder: bool | None) -> None:
    """Set ``name`` (in the folder ``dir_fd`` of the tier ``directory``) to 0700 (a folder)
    or 0600 (a file), on a descriptor, never through a link. ``folder`` True/False: it
    must be a folder/a regular file of ours, else refused. None (below a folder of
    entries): a link is removed, a folder must be ours, and any other thing that is not a
    regular file of ours is left to be refused when read. A folder others could write in
    has what it holds set first (so a walk cut short is done again); one they could only
    read is closed to them, and what it holds with it."""
    shown = os.path.join(directory, name) if folder is not None else name
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)           # no link, no wait (a named pipe)
    except FileNotFoundError:                    # removed meanwhile (another worker's eviction)
        return
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        if folder is None:
            os.unlink(name, dir_fd=dir_fd)       # never an entry's way to elsewhere
            return
        raise _refuse(directory, f"{shown} is a symbolic link (remove it: rm {shown})") from None
    try:
        st = os.fstat(fd)
        is_dir, mine = stat.S_ISDIR(st.st_mode), st.st_uid == os.geteuid()
        if folder is None and not is_dir and not (stat.S_ISREG(st.st_mode) and mine):
            return                               # a named pipe, another user's file: refused when read
        if folder is not None and (is_dir != folder or not is_dir and not stat.S_ISREG(st.st_mode)):
            raise _refuse(directory, f"{shown} is {kind(st.st_mode)}, not {'a folder' if folder else 'a regular file'} "
                                     f"(remove it: rm -r {shown})")
        if not mine:
            raise _refuse(directory, f"{shown} belongs to {_who(st.st_uid)}, not to {_who(os.geteuid())} who "
                                     f"runs the worker (remove it: rm -r {shown})")
        if is_dir and st.st_mode & 0o022:        # others could write in it: what it holds, first
            for inner in os.listdir(fd):
                _set_mode(directory, inner, fd, None)
        if st.st_mode & 0o077:
            os.fchmod(fd, FOLDER_MODE if is_dir else FILE_MODE)
    finally:
        os.close(fd)


def _read_own(path: str, private: bool) -> bytes:
    """The bytes of one of the tier's own files, checked on the file opened (no link,
    a regular file of ours, nobody else may write it, nor read it when ``private``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)  # (a FIFO: no wait)
    except OSError as err:
        if os.path.islink(path):
            raise _refuse(os.path.dirname(path), f"{path} is a symbolic link") from None
        raise err
    try:
        st = os.fstat(fd)
        wrong = 0o077 if private else 0o022
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(os.path.dirname(path), f"{path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise _refuse(os.path.dirname(path), f"{path} belongs to {_who(st.st_uid)}, not to {_who(os.geteuid())} "
                                                 f"who runs the worker")
        if st.st_mode & wrong:
            raise _refuse(os.path.dirname(path), f"{path} has mode {oct(st.st_mode & 0o7777)}: other users can "
                                                 f"{'read' if private else 'write'} it (chmod 600 {path})")
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _first_writer_wins(path: str, data: bytes, private: bool) -> bytes:
    """The content of ``path``, written with ``data`` by whoever comes first: a file of
    mode 0600 made whole under a name of its own, then linked in place (atomic)."""
    try:
        return _read_own(path, private)
    except FileNotFoundError:
        pass
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    fd = create_file(tmp)                        # 0600 whatever the umask
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return _read_own(path, private)


def tier_id(directory: str) -> str:
    """The identity of the disk tier in ``directory`` (a checked private directory), made
    by its first user: what the broker calls the node (the workers that share the
    directory share it). A directory wiped clean gets a new one, so what the broker knew
    of the old contents is not used.

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> tier_id(d) == tier_id(d) and len(tier_id(d)) == 12
    True
    """
    # read-only for others is accepted: tiers made before 0600 was the rule have such ids
    known = _first_writer_wins(os.path.join(directory, TIER_ID_FILE), uuid.uuid4().hex[:12].encode(), False)
    return known.decode("ascii", "replace").strip()


def tier_secret(directory: str) -> bytes:
    """The tier's secret (:data:`KEY_BYTES` random bytes in ``rhtc-tier-key``, mode 0600),
    made by its first user: every entry is authenticated with it (:mod:`worker.entries`).

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> tier_secret(d) == tier_secret(d)
    True
    """
    path = os.path.join(directory, TIER_KEY_FILE)
    key = _first_writer_wins(path, secrets.token_bytes(KEY_BYTES), True)
    if len(key) != KEY_BYTES:
        raise _refuse(directory, f"{path} holds {len(key)} bytes, not {KEY_BYTES} (remove it: a new one is made)")
    return key
