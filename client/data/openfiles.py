"""The files a process keeps open between tasks, with their trees' metadata: at most
``Settings.open_files`` (least recently used closed first), each checked against the file
as it is now (:mod:`client.data.freshness`) before it is served, so a file rewritten after
``make_chunks`` is never read stale. :mod:`client.data.chunks` reads chunks through it.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
import threading
from typing import Any

from rhtc import context
from ...broker.wire.config import settings
from . import freshness, xrootd
from ..errors import ChunkFileError

# the files this process has open, least recently used first, at most Settings.open_files:
# an open NanoAOD tree's metadata (about a thousand branches) stays in memory with it
_open_files: collections.OrderedDict[tuple[str, str], "_OpenFile"] = collections.OrderedDict()
_open_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class _OpenFile:
    """One open file's tree, as this process keeps it between tasks."""

    tree: Any
    uuid: str
    stamp: freshness.Stamp | None      # None: a protocol we cannot stat (not local, not root://)

    # The names are listed when first asked for, never at the open: uproot lists an RNTuple's
    # nested fields in time quadratic in their number (4 s of CPU for a NanoAOD's 1,900), and
    # make_chunks and coffea's reads need no names.
    @functools.cached_property
    def top_branches(self) -> frozenset[str]:
        """The names of the branches (an RNTuple's fields) at the top of the tree."""
        return frozenset(self.tree.keys(recursive=False))

    @functools.cached_property
    def branches(self) -> frozenset[str]:
        """Every branch name, nested ones by their full path (``Jet.pt``)."""
        return frozenset(self.tree.keys())

    def has_branches(self, names) -> bool:
        """Whether the tree has every one of ``names``; the nested names are listed only
        when one of ``names`` is not at the top."""
        top = self.top_branches
        return all(n in top for n in names) or all(n in top or n in self.branches for n in names)

    @property
    def version(self) -> str | None:
        """Names the version of the file the tree was read from (branch-cache key prefix)."""
        return self.stamp.version if self.stamp is not None else None


def _open(path: str):
    import uproot
    if xrootd.is_remote(path):
        return _open_remote(path)
    if "://" not in path and os.path.isfile(path):
        with open(path, "rb") as fh:
            magic = fh.read(4)
        if magic != b"root":
            raise ChunkFileError(f"{path} is not a ROOT file (it starts with {magic!r}, not b'root')", "not ROOT")
    try:
        if "://" not in path:        # local: pread, no I/O threads competing for cores, no mmap
            return uproot.open(path, handler=freshness.PreadSource)   # (a shrunk file is no SIGBUS)
        return uproot.open(path)
    except FileNotFoundError as err:
        raise ChunkFileError(f"{path}: no such file. Check the path (make_chunks takes paths, "
                             "globs or URLs that uproot opens, e.g. root://...)", "no such file") from err
    except ValueError as err:
        if "not a ROOT file" in str(err) or "first four bytes" in str(err):
            raise ChunkFileError(f"{path} is not a ROOT file ({err})", "not ROOT") from err
        raise ChunkFileError(f"{path} cannot be opened: {err}") from err
    except OSError as err:
        raise ChunkFileError(f"{path} cannot be opened: {type(err).__name__}: {err}") from err


def _open_remote(url: str):
    import uproot
    _check_url(url)
    try:
        options = xrootd.open_options()
    except ImportError as err:
        raise ChunkFileError(f"{url}: {err}", "no XRootD client") from err
    try:
        return uproot.open(url, **options)
    except ValueError as err:
        if "not a ROOT file" in str(err) or "first four bytes" in str(err):
            raise ChunkFileError(f"{url} is not a ROOT file ({err})", "not ROOT") from err
        raise ChunkFileError(f"{url} cannot be opened: {err}") from err
    except OSError as err:
        reason, message = xrootd.explain(url, err)
        raise ChunkFileError(message, reason, xrootd.is_transient(reason)) from err


def _check_url(url: str) -> None:
    """Refuse a malformed root:// URL before any request (reason ``bad URL``)."""
    try:
        xrootd.split_url(url)
    except ValueError as err:
        raise ChunkFileError(str(err), "bad URL") from None


def _forget(path: str, treename: str) -> None:
    """Drop an open file from this process's cache (its connection may be broken)."""
    with _open_lock:
        hit = _open_files.pop((path, treename), None)
    if xrootd.is_remote(path):
        xrootd.forget_connections()
    if hit is not None:
        try:
            hit.tree.file.close()
        except Exception:                  # closing a broken XRootD file may raise
            pass


def _unchanged(path: str, opened: _OpenFile, failed: Exception | None = None) -> bool:
    """True when ``path`` is still the file ``opened`` was read from (or we cannot tell:
    also when a server fails to answer after a read already ``failed``, which is reported)."""
    try:
        return freshness.unchanged(path, opened.stamp, opened.tree.file.source)
    except Exception:
        if failed is None:
            raise
        return True


def _changed_error(path: str, file_uuid: str, uuid: str) -> ChunkFileError:
    return ChunkFileError(f"{path} has changed since the chunks were made (UUID {file_uuid}, "
                          f"expected {uuid}): call make_chunks again", "changed")


def _changed_while_read(path: str) -> ChunkFileError:
    return ChunkFileError(f"{path} changed while it was being read, twice: it is being rewritten; "
                          "wait until it is complete, then call make_chunks again", "changed")


def _open_file(path: str, treename: str, uuid: str | None) -> _OpenFile:
    """The open file's tree from this process's cache, checked against the file as it is now
    (:mod:`client.data.freshness`) before it is served: a file changed since it was opened is
    opened again, and a chunk of another version of the file is a ChunkFileError ``changed``."""
    key = (path, treename)
    with _open_lock:
        hit = _open_files.get(key)
        if hit is not None:
            _open_files.move_to_end(key)
    if hit is not None:
        try:
            same = _unchanged(path, hit)
        except Exception as err:             # a root:// server that fails to answer: as a read
            _forget(path, treename)
            reason, message = xrootd.explain(path, err)
            raise ChunkFileError(f"checking {path} before reading it failed: {message}", reason,
                                 xrootd.is_transient(reason)) from err
        if same:
            if uuid is not None and hit.uuid != uuid:
                raise _changed_error(path, hit.uuid, uuid)
            return hit
        _forget(path, treename)
    stamp = None
    if "://" not in path:
        try:
            stamp = freshness.local_stamp(path)       # before opening: a later change shows
        except OSError:
            pass                                      # _open says what is wrong
    try:
        f = _open(path)
    except ChunkFileError as err:
        if hit is None or err.transient or err.reason in ("no such file", "permission denied"):
            raise
        raise ChunkFileError(f"{path} changed since it was opened and cannot be opened now ({err}): "
                             "if it is being rewritten, wait until it is complete, then call "
                             "make_chunks again", "changed") from err
    if context.current is not None:
        context.current.files_opened += 1
    file_uuid = str(f.file.uuid)
    if uuid is not None and file_uuid != uuid:
        f.close()
        raise _changed_error(path, file_uuid, uuid)
    try:
        tree = f[treename]
    except KeyError as err:
        trees = sorted({k.split(";")[0] for k, v in f.classnames().items() if v in ("TTree", "TNtuple")})
        f.close()
        raise ChunkFileError(f"{path} has no tree {treename!r}; its trees: {trees or 'none'}",
                             "no such tree") from err
    if xrootd.is_remote(path):
        stamp = freshness.stamp(path, f.file.source)
    opened = _OpenFile(tree, file_uuid, stamp)
    with _open_lock:
        _open_files[key] = opened
        while len(_open_files) > settings().open_files:
            _, old = _open_files.popitem(last=False)
            old.tree.file.close()
    return opened


def is_open(path: str, treename: str) -> bool:
    """True when this process holds ``path``'s tree ``treename`` open (its metadata read).

    >>> is_open("/nowhere/a.root", "Events")
    False
    """
    with _open_lock:
        return (path, treename) in _open_files


def version_of(path: str, treename: str) -> str | None:
    """The version token (:attr:`freshness.Stamp.version`) of the file as this process has it
    open, or of the local file as it is now; None when it cannot tell (coffea's cache keys)."""
    with _open_lock:
        hit = _open_files.get((path, treename))
    if hit is not None:
        return hit.version
    try:
        stamp = freshness.stamp(path)
    except OSError:
        return None
    return stamp.version if stamp is not None else None


def close_files() -> None:
    """Close every file this process holds open for chunk reading."""
    with _open_lock:
        while _open_files:
            _, opened = _open_files.popitem()
            opened.tree.file.close()
