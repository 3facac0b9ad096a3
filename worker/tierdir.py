"""Who may write the node's disk tier (:mod:`worker.disk`): nobody but the analyst.

A worker reads back what the tier holds as branch arrays, so a directory that another user
of the node could write (one they created first in ``/var/tmp``, or under a parent they
can write) would let them hand the analysis their numbers. Before a worker uses a tier:

* the **directory** is the analyst's: owned by the worker's user and writable by no one
  else (it is made with mode 0700 when absent, the leaf with ``mkdir``, which never
  follows a link planted there); a symbolic link is followed once, and what it points to
  is checked and used from then on (the link may change, the tier does not);
* every **parent** up to ``/`` is owned by us or by root and writable by no one else, or
  is sticky (``/tmp``, ``/var/tmp``: mode 1777, where nobody can rename another's entry);
* the tier's **own files** (its id, its secret) are regular files owned by us, never
  links, written once (the first writer wins, atomically) with mode 0600; the secret is
  readable by nobody else.

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

import os
import pwd
import secrets
import stat
import uuid

from ..errors import RhtcError

TIER_ID_FILE = "rhtc-tier-id"
TIER_KEY_FILE = "rhtc-tier-key"
KEY_BYTES = 32
FIX = "point --disk-cache (RHTC_DISK_CACHE) at a directory of your own, e.g. mkdir -m 700 /scratch/$USER/rhtc-cache"


class DiskTierRefused(RhtcError):
    """The node's disk tier directory (or one of its files) is not private to this user:
    the worker runs without the tier (its RAM cache only) and says why."""


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


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
        os.makedirs(os.path.dirname(given), mode=0o700, exist_ok=True)
        try:
            os.mkdir(given, 0o700)               # never follows a link planted at the leaf (EEXIST)
        except FileExistsError:                  # another worker of the node made it first
            pass
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
        raise _refuse(shown, f"it has mode {oct(st.st_mode & 0o7777)}: other users can write it "
                             f"(chmod 700 {real}, or use a new directory)")
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


def _read_own(path: str, private: bool) -> bytes:
    """The bytes of one of the tier's own files, checked on the file opened (no link,
    a regular file of ours, nobody else may write it, nor read it when ``private``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)    # (a FIFO: no wait)
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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
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
