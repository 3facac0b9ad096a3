"""NanoAOD chunks: a file, a tree and an entry range, read through the worker's cache.

    >>> from rhtc import make_chunks
    >>> chunks = make_chunks(["../shared/data/nanoaod/nano_dy.root"], step=25)
    >>> chunks[0].arrays(["Muon_pt"], how=dict)["Muon_pt"]
    <Array [[], [], [], ..., [46.5, 40.7], [51.4, 39.6]] type='25 * var * float32'>

A chunk carries the file's UUID, so a cache can never confuse two files that share a
name, and its ``routing_key`` lets the client send it back to the worker that read it.
Files stay open between tasks, but every read first checks that the file is still the one
that was opened (:mod:`rhtc.client.data.freshness`): a file rewritten after ``make_chunks`` is
never read stale.
Files may be local paths or XRootD URLs (``root://host//path``); :mod:`rhtc.client.data.xrootd`
holds the XRootD specifics (settings, directory listing for globs, error messages).
"""
from __future__ import annotations

import dataclasses
import difflib
import glob
import os
import time
from typing import Iterable, Sequence

from rhtc import context
from . import xrootd
from .cachedchunks import cached_arrays, group, plain_call
from ..errors import BranchNotFound, ChunkFileError  # noqa: F401  (public here too)
from .openfiles import (_OpenFile, _changed_while_read, _check_url, _forget, _open_file, _unchanged,
                                   close_files, version_of)  # noqa: F401  (public here too)

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
        chunk reads nothing from the file, and a worker that has not opened the file yet
        serves a chunk whose branches are all cached without opening it
        (:mod:`rhtc.client.data.cachedchunks`). Outside a worker it reads the file directly.
        On a worker every array it returns is read-only, cold or warm, and stays so (copy
        it to change it: ``np.array(x)``, ``ak.copy(x)``; see :mod:`rhtc.worker.frozen`).
        """
        branches = [branches] if isinstance(branches, str) else list(branches)
        ctx = context.current
        cached = cached_arrays(self, branches, ctx, kwargs)     # a replaced worker: no file to open
        if cached is not None:
            ctx.note_read(self, branches, kwargs.get("library", "ak"))    # (rhtc warm reads them again)
            return cached
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
            if ctx is not None:
                ctx.note_read(self, branches, kwargs.get("library", "ak"))
            plain = plain_call(branches, kwargs)
            cache = ctx.cache.view(self.routing_key, opened.version, by_chunk=True, serves_back=bool(plain)) \
                if ctx is not None and ctx.cache is not None else None
            plain = plain if cache is not None else None
            source = opened.tree.file.source
            before = getattr(source, "num_requested_bytes", 0)
            try:
                out = opened.tree.arrays(list(branches), entry_start=self.entry_start,
                                         entry_stop=self.entry_stop, array_cache=cache,
                                         **(dict(kwargs, how=dict) if plain else kwargs))
            except Exception as err:
                remote = xrootd.is_remote(self.file)
                lost = remote and xrootd.is_transient(xrootd.explain(self.file, err)[0])
                if not lost and not _unchanged(self.file, opened, err):   # rewritten under us: look again
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
            if plain:                 # the cold read gets the cache's read-only views, as a warm one
                return group({b: cache.served(out[b]) for b in branches}, *plain)
            return out

    def open_tree(self):
        """The uproot TTree, from this process's cache of open files."""
        return _open_file(self.file, self.tree, self.uuid).tree

    def __repr__(self) -> str:
        return f"Chunk({os.path.basename(self.file)!r}, {self.tree!r}, {self.entry_start}-{self.entry_stop})"


def _check_branches(opened: _OpenFile, branches: Sequence[str], chunk: Chunk) -> None:
    if opened.has_branches(branches):
        return
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


def file_info(path: str, tree: str = "Events") -> tuple[str, int, str]:
    """(path, number of entries, UUID) of one file's tree; errors name the file."""
    opened = _open_file(path, tree, None)
    return path, int(opened.tree.num_entries), opened.uuid


def _file_info_star(args):
    return file_info(*args)


