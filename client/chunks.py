"""NanoAOD chunks: a file, a tree and an entry range, read through the worker's cache.

    >>> from rhtc.client import make_chunks
    >>> chunks = make_chunks(["../shared/data/nanoaod/nano_dy.root"], step=25)   # doctest: +SKIP
    >>> chunks[0].arrays(["Muon_pt"], how=dict)["Muon_pt"]                        # doctest: +SKIP
    <Array [[], [...], ..., [34.4, 24.5]] type='25 * var * float32'>

A chunk carries the file's UUID, so a cache can never confuse two files that share a
name, and its ``routing_key`` lets the client send it back to the worker that read it.
Files stay open between tasks, but every read first checks that the file is still the one
that was opened (:mod:`rhtc.client.freshness`): a file rewritten after ``make_chunks`` is
never read stale.
Files may be local paths or XRootD URLs (``root://host//path``); :mod:`rhtc.client.xrootd`
holds the XRootD specifics (settings, directory listing for globs, error messages).
"""
from __future__ import annotations

import collections
import dataclasses
import difflib
import glob
import os
import threading
import time
from typing import Any, Iterable, Sequence

from rhtc.broker import context
from rhtc.broker.config import settings
from rhtc.client import freshness, xrootd
from rhtc.client.arguments import positive_count
from rhtc.client.errors import BranchNotFound, ChunkFileError  # noqa: F401  (public here too)

# the files this process has open, least recently used first, at most Settings.open_files:
# an open NanoAOD tree's metadata (about a thousand branches) stays in memory with it
_open_files: collections.OrderedDict[tuple[str, str], "_OpenFile"] = collections.OrderedDict()
_open_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class _OpenFile:
    """One open file's tree, as this process keeps it between tasks."""

    tree: Any
    uuid: str
    branches: set
    stamp: freshness.Stamp | None      # None: a protocol we cannot stat (not local, not root://)

    @property
    def version(self) -> str | None:
        """Names the version of the file the tree was read from (branch-cache key prefix)."""
        return self.stamp.version if self.stamp is not None else None


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Entries ``[entry_start, entry_stop)`` of ``tree`` in ``file`` (path or URL)."""

    file: str
    tree: str
    entry_start: int
    entry_stop: int
    uuid: str

    @property
    def num_entries(self) -> int:
        return self.entry_stop - self.entry_start

    @property
    def routing_key(self) -> str:
        """Names this chunk for sticky routing: file UUID, tree, entry range."""
        return f"{self.uuid}:{self.tree}:{self.entry_start}-{self.entry_stop}"

    def arrays(self, branches: Sequence[str], **kwargs):
        """Read ``branches`` for this chunk's entries as awkward arrays (uproot's
        ``TTree.arrays``; pass ``how=dict`` for a dict of arrays, ``library="np"`` for numpy).

        On a worker the read goes through the worker's branch cache: a rerun of the same
        chunk reads nothing from the file. Outside a worker it reads the file directly.
        """
        if isinstance(branches, str):
            branches = [branches]
        ctx = context.current
        retries = xrootd.READ_RETRIES if xrootd.is_remote(self.file) else 0
        for attempt in range(retries + 1):
            try:
                return self._read(branches, ctx, kwargs)
            except ChunkFileError as err:
                if not err.transient:
                    raise
                if attempt == retries:
                    if retries:
                        err.args = (f"{err.args[0]} [{retries + 1} attempts in this task, "
                                    f"RHTC_XROOTD_RETRIES={retries}]",)
                    raise
                _forget(self.file, self.tree)          # reopen: the connection may be gone
                time.sleep(xrootd.retry_pause(attempt))

    def _read(self, branches: Sequence[str], ctx, kwargs: dict):
        for again in (False, True):   # once more when the file changed while it was read
            opened = _open_file(self.file, self.tree, self.uuid)
            _check_branches(opened, branches, self)
            cache = ctx.cache.view(self.routing_key, opened.version) \
                if ctx is not None and ctx.cache is not None else None
            source = opened.tree.file.source
            before = getattr(source, "num_requested_bytes", 0)
            try:
                out = opened.tree.arrays(list(branches), entry_start=self.entry_start,
                                         entry_stop=self.entry_stop, array_cache=cache, **kwargs)
            except Exception as err:
                remote = xrootd.is_remote(self.file)
                lost = remote and xrootd.is_transient(xrootd.explain(self.file, err)[0])
                if not lost and not _unchanged(self.file, opened):   # rewritten under us: look again
                    _forget(self.file, self.tree)
                    if not again:
                        continue
                    raise _changed_while_read(self.file) from err
                if not isinstance(err, (OSError, ValueError)):
                    raise
                where = f"reading {list(branches)} from {self.file} entries {self.entry_start}-{self.entry_stop}"
                if remote:
                    _forget(self.file, self.tree)
                    reason, message = xrootd.explain(self.file, err)
                    raise ChunkFileError(f"{where} failed: {message}", reason, xrootd.is_transient(reason)) from err
                raise ChunkFileError(f"{where} failed: {type(err).__name__}: {err}. "
                                     "Is the file complete and readable?") from err
            if not xrootd.is_remote(self.file) and not _unchanged(self.file, opened):
                _forget(self.file, self.tree)                 # what we read may mix two versions
                if not again:
                    continue
                raise _changed_while_read(self.file)
            if ctx is not None:
                ctx.bytes_from_file += getattr(source, "num_requested_bytes", 0) - before
            return out

    def open_tree(self):
        """The uproot TTree, from this process's cache of open files."""
        return _open_file(self.file, self.tree, self.uuid).tree

    def __repr__(self) -> str:
        return f"Chunk({os.path.basename(self.file)!r}, {self.tree!r}, {self.entry_start}-{self.entry_stop})"


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


def _unchanged(path: str, opened: _OpenFile) -> bool:
    """True when ``path`` is still the file ``opened`` was read from (or we cannot tell)."""
    return freshness.unchanged(path, opened.stamp, opened.tree.file.source)


def _changed_error(path: str, file_uuid: str, uuid: str) -> ChunkFileError:
    return ChunkFileError(f"{path} has changed since the chunks were made (UUID {file_uuid}, "
                          f"expected {uuid}): call make_chunks again", "changed")


def _changed_while_read(path: str) -> ChunkFileError:
    return ChunkFileError(f"{path} changed while it was being read, twice: it is being rewritten; "
                          "wait until it is complete, then call make_chunks again", "changed")


def _open_file(path: str, treename: str, uuid: str | None) -> _OpenFile:
    """The open file's tree from this process's cache, checked against the file as it is now
    (:mod:`client.freshness`) before it is served: a file changed since it was opened is
    opened again, and a chunk of another version of the file is a ChunkFileError ``changed``."""
    key = (path, treename)
    with _open_lock:
        hit = _open_files.get(key)
        if hit is not None:
            _open_files.move_to_end(key)
    if hit is not None:
        if _unchanged(path, hit):
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
    opened = _OpenFile(tree, file_uuid, set(tree.keys()), stamp)
    with _open_lock:
        _open_files[key] = opened
        while len(_open_files) > settings().open_files:
            _, old = _open_files.popitem(last=False)
            old.tree.file.close()
    return opened


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


def _check_branches(opened: _OpenFile, branches: Sequence[str], chunk: Chunk) -> None:
    known = opened.branches
    for b in branches:
        if b not in known:
            prefix = b.split("_")[0]
            similar = difflib.get_close_matches(b, known, n=6, cutoff=0.6)
            similar += sorted(k for k in known if k.lower().startswith(prefix.lower()) and k not in similar)[:6]
            hint = f"; similar branches: {', '.join(similar)}" if similar else \
                f"; the tree has no branch starting with {prefix!r}"
            raise BranchNotFound(f"branch {b!r} is not in tree {chunk.tree!r} of {chunk.file} "
                                 f"({len(known)} branches){hint}")


def _expand(files: str | Iterable[str]) -> list[str]:
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    elif not isinstance(files, Iterable):
        raise TypeError(f"files must be a path, a glob pattern, a URL or a list of them, not "
                        f"{type(files).__name__} {files!r:.60}")
    out = []
    for f in files:
        if not isinstance(f, (str, os.PathLike)):
            raise TypeError(f"files holds {type(f).__name__} {f!r:.60}: make_chunks takes paths, glob "
                            "patterns or URLs (strings), e.g. make_chunks('data/*.root')")
        f = os.fspath(f)
        if xrootd.is_remote(f):
            _check_url(f)
            try:
                matched = xrootd.expand(f)
            except ImportError as err:
                raise ChunkFileError(f"{f}: {err}", "no XRootD client") from err
            except xrootd.ListingFailed as err:
                raise ChunkFileError(str(err), err.reason, xrootd.is_transient(err.reason)) from err
            if not matched:
                raise ChunkFileError(f"{f}: the pattern matches no file on the server", "no such file")
            out += matched
        elif "://" not in f and any(c in f for c in "*?["):
            matched = sorted(glob.glob(os.path.expanduser(f)))
            if not matched:
                raise ChunkFileError(f"{f}: the pattern matches no file", "no such file")
            out += matched
        elif "://" not in f and os.path.isdir(os.path.expanduser(f)):
            pattern = os.path.join(f, "*.root")
            raise ChunkFileError(f"{f} is a directory, not a ROOT file: pass the files in it, e.g. "
                                 f"make_chunks({pattern!r})", "is a directory")
        else:
            out.append(f if "://" in f else os.path.abspath(os.path.expanduser(f)))
    if not out:
        raise ValueError("make_chunks needs at least one file")
    return out


def close_files() -> None:
    """Close every file this process holds open for chunk reading."""
    with _open_lock:
        while _open_files:
            _, opened = _open_files.popitem()
            opened.tree.file.close()


def file_info(path: str, tree: str = "Events") -> tuple[str, int, str]:
    """(path, number of entries, UUID) of one file's tree; errors name the file."""
    opened = _open_file(path, tree, None)
    return path, int(opened.tree.num_entries), opened.uuid


def make_chunks(files: str | Iterable[str], tree: str = "Events", step: int = 100_000, *,
                remote: bool = False, broker=None) -> list[Chunk]:
    """Split ROOT files into chunks of at most ``step`` entries.

    Args:
        files: paths, glob patterns or URLs uproot opens: ``root://host//dir/*.root``
            globs through the server's directory listing.
        tree: the TTree (NanoAOD: ``Events``).
        step: entries per chunk.
        remote: count the entries on the workers through ``remote_map`` (faster for
            hundreds of remote files); ``broker`` as for remote_map.

    Example::

        >>> chunks = make_chunks("../shared/data/nanoaod/*.root", step=50)    # doctest: +SKIP
        >>> chunks[0]                                                          # doctest: +SKIP
        Chunk('EGamma_2022E_v13.root', 'Events', 0-50)
        >>> make_chunks("root://eos.example.org//store/nano/*.root", step=500_000)  # doctest: +SKIP

    Every file is opened here (its entries counted, its UUID read), so a missing file, a
    wrong host or a permission problem is a :class:`ChunkFileError` naming the URL before
    any task is queued.
    """
    step = positive_count("step", step, "entries per chunk, e.g. step=100_000")
    if not isinstance(tree, str):
        raise TypeError(f"tree must be the name of the TTree (a string, 'Events' for NanoAOD), "
                        f"not {type(tree).__name__}")
    paths = _expand(files)
    if remote:
        infos = _file_infos_on_workers(paths, tree, broker)
    else:
        infos = [file_info(p, tree) for p in paths]
    chunks = []
    for path, n, uuid in infos:
        for start in range(0, n, step):
            chunks.append(Chunk(path, tree, start, min(n, start + step), uuid))
    return chunks


def _file_info_star(args):
    return file_info(*args)


def _file_infos_on_workers(paths: list[str], tree: str, broker) -> list[tuple[str, int, str]]:
    """file_info of each path, run on the workers; a file that fails there raises the
    same ChunkFileError as here, naming the worker (not a RemoteError)."""
    from rhtc.client.api import remote_map
    from rhtc.client.errors import RemoteError
    infos = remote_map(_file_info_star, [(p, tree) for p in paths], broker=broker,
                       progress=True, label="count entries", errors="return")
    for path, info in zip(paths, infos):
        if not isinstance(info, RemoteError):
            continue
        where = f" (on worker {info.worker})" if info.worker else ""
        if isinstance(info.exception, ChunkFileError):
            raise ChunkFileError(f"{info.exception}{where}", info.exception.reason,
                                 info.exception.transient) from info
        raise ChunkFileError(f"{path}: counting its entries failed{where}: {info.remote_type}: "
                             f"{info.message}. Is the file complete and readable on the workers?",
                             "unreadable") from info
    return infos
