"""NanoAOD chunks: a file, a tree and an entry range, read through the worker's cache.

    >>> from rhtc.client import make_chunks
    >>> chunks = make_chunks(["../shared/data/nanoaod/nano_dy.root"], step=25)   # doctest: +SKIP
    >>> chunks[0].arrays(["Muon_pt"], how=dict)["Muon_pt"]                        # doctest: +SKIP
    <Array [[], [...], ..., [34.4, 24.5]] type='25 * var * float32'>

A chunk carries the file's UUID, so a cache can never confuse two files that share a
name, and its ``routing_key`` lets the client send it back to the worker that read it.
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
from typing import Iterable, Sequence

from rhtc.broker import context
from rhtc.broker.config import settings
from rhtc.client import xrootd
from rhtc.client.arguments import positive_count

# the files this process has open, least recently used first, at most Settings.open_files:
# an open NanoAOD tree's metadata (about a thousand branches) stays in memory with it
_open_files: collections.OrderedDict = collections.OrderedDict()
_open_lock = threading.Lock()


class BranchNotFound(KeyError):
    """A branch the function asked for is not in the tree."""

    def __str__(self) -> str:
        return self.args[0]


class ChunkFileError(OSError):
    """A chunk's file is missing, unreadable, not ROOT, or changed since make_chunks.

    ``reason`` says which (``no such file``, ``permission denied``, ``timed out``,
    ``server unreachable``, ``changed``, ...) and ``transient`` whether a retry may cure it.
    """

    def __init__(self, message: str, reason: str = "unreadable", transient: bool = False):
        super().__init__(message)
        self.reason, self.transient = reason, transient

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        return (ChunkFileError, (self.args[0], self.reason, self.transient))


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
        cache = ctx.cache.view(self.routing_key) if ctx is not None and ctx.cache is not None else None
        retries = xrootd.READ_RETRIES if xrootd.is_remote(self.file) else 0
        for attempt in range(retries + 1):
            try:
                return self._read(branches, cache, ctx, kwargs)
            except ChunkFileError as err:
                if not err.transient or attempt == retries:
                    raise
                _forget(self.file, self.tree)          # reopen: the connection may be gone
                time.sleep(0.5 * 2 ** attempt)

    def _read(self, branches: Sequence[str], cache, ctx, kwargs: dict):
        tree = self.open_tree()
        _check_branches(tree, branches, self)
        source = tree.file.source
        before = getattr(source, "num_requested_bytes", 0)
        try:
            out = tree.arrays(list(branches), entry_start=self.entry_start, entry_stop=self.entry_stop,
                              array_cache=cache, **kwargs)
        except (OSError, ValueError) as err:
            where = f"reading {list(branches)} from {self.file} entries {self.entry_start}-{self.entry_stop}"
            if xrootd.is_remote(self.file):
                _forget(self.file, self.tree)
                reason, message = xrootd.explain(self.file, err)
                raise ChunkFileError(f"{where} failed: {message}", reason, xrootd.is_transient(reason)) from err
            raise ChunkFileError(f"{where} failed: {type(err).__name__}: {err}. "
                                 "Is the file complete and readable?") from err
        if ctx is not None:
            ctx.bytes_from_file += getattr(source, "num_requested_bytes", 0) - before
        return out

    def open_tree(self):
        """The uproot TTree, from this process's cache of open files."""
        return _tree(self.file, self.tree, self.uuid)

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
            raise ChunkFileError(f"{path} is not a ROOT file (it starts with {magic!r}, not b'root')")
    try:
        if "://" not in path:        # local: memory-mapped, no I/O threads competing for cores
            return uproot.open(path, handler=uproot.source.file.MemmapSource)
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


def _forget(path: str, treename: str) -> None:
    """Drop an open file from this process's cache (its connection may be broken)."""
    with _open_lock:
        hit = _open_files.pop((path, treename), None)
    if xrootd.is_remote(path):
        xrootd.forget_connections()
    if hit is not None:
        try:
            hit[0].file.close()
        except Exception:                  # closing a broken XRootD file may raise
            pass


def _tree(path: str, treename: str, uuid: str | None):
    key = (path, treename)
    with _open_lock:
        hit = _open_files.get(key)
        if hit is not None:
            _open_files.move_to_end(key)
    if hit is not None and (uuid is None or hit[1] == uuid):
        return hit[0]
    f = _open(path)
    if context.current is not None:
        context.current.files_opened += 1
    file_uuid = str(f.file.uuid)
    if uuid is not None and file_uuid != uuid:
        f.close()
        raise ChunkFileError(f"{path} has changed since the chunks were made (UUID {file_uuid}, "
                             f"expected {uuid}): call make_chunks again", "changed")
    try:
        tree = f[treename]
    except KeyError as err:
        trees = sorted({k.split(";")[0] for k, v in f.classnames().items() if v in ("TTree", "TNtuple")})
        f.close()
        raise ChunkFileError(f"{path} has no tree {treename!r}; its trees: {trees or 'none'}",
                             "no such tree") from err
    with _open_lock:
        _open_files[key] = (tree, file_uuid, set(tree.keys()))
        while len(_open_files) > settings().open_files:
            _, (old, _, _) = _open_files.popitem(last=False)
            old.file.close()
    return tree


def _check_branches(tree, branches: Sequence[str], chunk: Chunk) -> None:
    with _open_lock:
        known = _open_files.get((chunk.file, chunk.tree), (None, None, None))[2]
    if known is None:
        known = set(tree.keys())
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
            try:
                matched = xrootd.expand(f)
            except ImportError as err:
                raise ChunkFileError(f"{f}: {err}", "no XRootD client") from err
            except OSError as err:
                raise ChunkFileError(str(err), "listing failed") from err
            if not matched:
                raise ChunkFileError(f"{f}: the pattern matches no file on the server", "no such file")
            out += matched
        elif "://" not in f and any(c in f for c in "*?["):
            matched = sorted(glob.glob(os.path.expanduser(f)))
            if not matched:
                raise ChunkFileError(f"{f}: the pattern matches no file")
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
            _, (tree, _, _) = _open_files.popitem()
            tree.file.close()


def file_info(path: str, tree: str = "Events") -> tuple[str, int, str]:
    """(path, number of entries, UUID) of one file's tree; errors name the file."""
    t = _tree(path, tree, None)
    with _open_lock:
        uuid = _open_files[(path, tree)][1]
    return path, int(t.num_entries), uuid


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
        from rhtc.client.api import remote_map
        infos = remote_map(_file_info_star, [(p, tree) for p in paths], broker=broker,
                           progress=True, label="count entries")
    else:
        infos = [file_info(p, tree) for p in paths]
    chunks = []
    for path, n, uuid in infos:
        for start in range(0, n, step):
            chunks.append(Chunk(path, tree, start, min(n, start + step), uuid))
    return chunks


def _file_info_star(args):
    return file_info(*args)
