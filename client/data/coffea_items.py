"""A coffea item as one of our tasks, and what runs for it on a worker.

A coffea ``WorkItem`` (file, tree, entry range, file UUID) is the same thing as a
:class:`~client.data.chunks.Chunk`, and is treated as one: it has a chunk's routing key
(:func:`routing_key`), so a rerun goes to the worker that holds its columns; on that worker
its file comes from the worker's cache of open files, checked against the item's file
UUID and against the file as it is now (a rewritten file is a :class:`ChunkFileError`,
never stale data); :func:`worker_cache` hands NanoEvents the worker's byte-capped
branch cache as ``buffer_cache``, counted in the run record as ``chunk.arrays`` is; and the
NanoEvents built from the chunk are kept in that cache for the next item on the same chunk
(:mod:`client.data.coffea_events`).
:class:`CoffeaTask` is what travels to the worker; the executor that submits them is
:class:`client.coffea.RedisExecutor`.

    >>> item = WorkItem("ttbar", "a.root", "Events", 0, 100, _uuid.UUID(int=1).bytes)
    >>> CoffeaTask(item, routing_key(item))
    CoffeaTask(dataset 'ttbar', file a.root, tree 'Events', entries 0-100)

This module imports coffea (``pip install 'redis-htcondor[coffea]'``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid as _uuid
import warnings
from typing import Any, Callable, MutableMapping

try:
    import uproot
    from coffea.processor.executor import WorkItem

    import coffea.processor.executor as _executor_module   # whose uproot.open coffea's items call
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("rhtc.coffea needs coffea: pip install 'redis-htcondor[coffea]'") from err

from rhtc import context
from . import xrootd
from .chunks import Chunk
from .coffea_events import events_kept
from .heap import fewer_collections
from .coffea_parity import (MAX_WARNINGS_PER_ITEM, _bytes_requested, _per_item_bytes, _processor_error,
                            _worth_sending)
from .freshness import PreadSource
from .openfiles import _forget, version_of

# The routing key of the item this worker process is running, for worker_cache().
_current_key: str | None = None
_warned_no_stand_in = False
# The version of the item's file as the worker holds it open (client.data.freshness): it
# prefixes the item's keys in the branch cache, so a rewritten file never gets old buffers.
_current_version: str | None = None


def describe_item(item: Any) -> str:
    """A WorkItem (or preprocessing FileMeta) in words, for errors and warnings.

    >>> describe_item(WorkItem("ttbar", "/data/a.root", "Events", 0, 100, b""))
    "dataset 'ttbar', file /data/a.root, tree 'Events', entries 0-100"
    """
    text = f"dataset {getattr(item, 'dataset', '?')!r}, file {getattr(item, 'filename', '?')}, " \
           f"tree {getattr(item, 'treename', '?')!r}"
    if isinstance(item, WorkItem):
        return text + f", entries {item.entrystart}-{item.entrystop}"
    return text + " (preprocessing)"


def routing_key(item: Any) -> str | None:
    """The routing key of a coffea WorkItem: that of the :class:`Chunk` with the same
    file UUID, tree and entry range (``None`` for preprocessing items, which have no UUID).

    >>> item = WorkItem("ttbar", "a.root", "Events", 0, 100, _uuid.UUID(int=1).bytes)
    >>> routing_key(item)
    '00000000-0000-0000-0000-000000000001:Events:0-100'
    """
    chunk = _as_chunk(item)
    return chunk.routing_key if chunk else None


def _as_chunk(item: Any) -> Chunk | None:
    """The :class:`Chunk` a WorkItem reads (None for preprocessing items: no UUID yet)."""
    if not isinstance(item, WorkItem) or not item.fileuuid:
        return None
    uuid = item.fileuuid
    uuid = str(_uuid.UUID(bytes=uuid)) if isinstance(uuid, bytes) and len(uuid) == 16 else str(uuid)
    return Chunk(item.filename, item.treename, item.entrystart, item.entrystop, uuid)


@dataclasses.dataclass(frozen=True)
class CoffeaTask:
    """What travels to a worker: one coffea item and its routing key."""

    item: Any
    routing_key: str | None = None

    @property
    def num_entries(self) -> int | None:
        """Events in the item (the run record counts them)."""
        return len(self.item) if isinstance(self.item, WorkItem) else None

    def __repr__(self) -> str:
        return f"CoffeaTask({describe_item(self.item)})"


class _Borrowed:
    """An open file lent to coffea for one item: ``with`` gives the directory and leaves it
    open (it stays in the worker's cache of open files for the next item)."""

    def __init__(self, directory):
        self.directory = directory

    def __enter__(self):
        return self.directory

    def __exit__(self, *exc) -> None:
        pass


class _KeepFilesOpen:
    """Stands in for the ``uproot`` module inside coffea's per-item function, on a worker.

    coffea opens the item's file, parses its tree's metadata (a NanoAOD tree has about a
    thousand branches: 0.3 s) and closes it again, for every item. This hands it instead
    the file from the worker's cache of open files (:meth:`Chunk.open_tree`, checked
    against the item's file UUID and against the file as it is now), so the next item of
    the same file, and every item of a rerun, skips both. A file rewritten since the item
    was made is a :class:`ChunkFileError` ``changed`` (an OSError: ``skipbadfiles`` skips
    it). Anything but that plain open (other uproot options, another file, a file that
    fails to open here) goes to uproot itself, local files read without a memory map (a
    file that shrinks is then an error, not SIGBUS), so coffea's own errors and
    ``skipbadfiles`` behave as always.
    """

    def __init__(self, chunk: Chunk):
        self.chunk = chunk
        self.bytes_before: int | None = None   # the kept-open file's read counter when lent

    def __getattr__(self, name: str):
        return getattr(uproot, name)

    def open(self, files, *args, **kwargs):
        path = next(iter(files)) if isinstance(files, dict) and list(files.values()) == [None] else files
        if path == self.chunk.file and not args and not set(kwargs) - {"timeout"}:
            try:
                directory = self._open_checked()
            except OSError as err:
                if getattr(err, "reason", None) == "changed":      # a ChunkFileError
                    raise
            else:
                self.bytes_before = _bytes_requested(directory)
                return _Borrowed(directory)
        if context.current is not None:
            context.current.files_opened += 1
        if isinstance(path, str) and "://" not in path and "handler" not in kwargs and not args:
            kwargs["handler"] = PreadSource
        return uproot.open(files, *args, **kwargs)

    def _open_checked(self):
        """The item's file from the worker's open files (counts its own opens), checked."""
        global _current_version
        directory = self.chunk.open_tree().file.root_directory
        _current_version = version_of(self.chunk.file, self.chunk.tree)
        return directory


@contextlib.contextmanager
def _files_kept_open(item: Any):
    """While coffea runs ``item`` here, its file comes from the worker's open files; yields
    the stand-in (None when coffea opens the file itself)."""
    chunk = _as_chunk(item)
    if chunk is None:
        yield None
        return
    if getattr(_executor_module, "uproot", None) is not uproot:
        global _warned_no_stand_in
        if not _warned_no_stand_in:
            _warned_no_stand_in = True
            warnings.warn("this coffea does not open files through coffea.processor.executor.uproot: "
                          "the worker cannot keep files open for it (files_opened counts nothing)",
                          RuntimeWarning, stacklevel=2)
        yield None
        return
    global _current_version
    stand_in = _KeepFilesOpen(chunk)
    _executor_module.uproot, _current_version = stand_in, None
    try:
        yield stand_in
    finally:
        _executor_module.uproot, _current_version = uproot, None


class _RunItem:
    """Runs coffea's per-item function on a worker; returns (output, warnings), each warning
    as (text, item described, category). A failing item raises the processor's own
    exception (see :func:`_processor_error`)."""

    def __init__(self, function: Callable, keep_files_open: bool = True, keep_events: bool = True):
        self.function, self.keep_files_open = function, keep_files_open
        self.keep_events = keep_events and keep_files_open   # client.data.coffea_events
        self.__name__ = getattr(function, "__name__", "coffea")

    def __call__(self, task: CoffeaTask) -> tuple[Any, list[tuple[str, str, type]]]:
        global _current_key
        _current_key = task.routing_key
        path = getattr(task.item, "filename", "")
        retries = xrootd.READ_RETRIES if xrootd.is_remote(path) else 0   # as in Chunk.arrays
        try:
            for attempt in range(retries + 1):
                try:
                    with warnings.catch_warnings(record=True) as caught, \
                            (_files_kept_open(task.item) if self.keep_files_open else contextlib.nullcontext()) as lent, \
                            (events_kept() if self.keep_events else contextlib.nullcontext()), \
                            fewer_collections():
                        warnings.simplefilter("default")   # each distinct warning once per worker
                        try:
                            out = self.function(task.item)
                        except Exception as err:
                            own = _processor_error(err)
                            if own is err:
                                raise
                            own.add_note(f"(coffea: {err})")
                            raise own
                        _per_item_bytes(out, lent)
                    break
                except Exception as err:
                    if attempt == retries or not xrootd.transient_failure(path, err):
                        raise
                    _forget(path, getattr(task.item, "treename", ""))   # reopen afresh
                    time.sleep(xrootd.retry_pause(attempt))
        finally:
            _current_key = None
        kept = [w for w in caught if _worth_sending(w)][:MAX_WARNINGS_PER_ITEM]
        return out, [(str(w.message), describe_item(task.item), w.category) for w in kept]


class _Buffers(MutableMapping):
    """The worker's branch cache as NanoEvents' ``buffer_cache`` for one WorkItem.

    Reads and stores go through the cache's per-chunk view (which counts hits, the bytes
    served from memory and advertises the chunk for routing); a buffer NanoEvents had to
    read is added to the task's ``bytes_from_file`` (uncompressed bytes, as NanoEvents
    hands them over).
    """

    def __init__(self, view: MutableMapping, ctx: context.TaskContext):
        self.view, self.ctx = view, ctx

    def get(self, key, default=None):
        return self.view.get(key, default)

    def __getitem__(self, key):
        return self.view[key]

    def __setitem__(self, key, value) -> None:
        self.view[key] = value
        self.ctx.bytes_from_file += int(getattr(value, "nbytes", 0))

    def __delitem__(self, key) -> None:
        del self.view[key]

    def __iter__(self):
        return iter(self.view)

    def __len__(self) -> int:
        return len(self.view)


def worker_cache() -> MutableMapping | None:
    """coffea cache strategy: on one of our workers, the worker's branch cache.

    Pass it as ``processor.Runner(cachestrategy=rhtc.coffea.worker_cache)``. coffea calls
    it on the worker before it builds NanoEvents and hands the mapping over as
    ``buffer_cache``. Outside a worker (IterativeExecutor, a notebook) it returns
    ``None``, so coffea reads the files directly.

    >>> worker_cache() is None        # not inside a worker
    True
    """
    ctx = context.current
    if ctx is None or ctx.cache is None:
        return None
    view = ctx.cache.view(_current_key, _current_version) if _current_key else ctx.cache
    return _Buffers(view, ctx)
