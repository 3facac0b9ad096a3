"""coffea processors on our workers: an executor and a cache strategy.

A coffea user changes one line (two, for the warm cache)::

    >>> import rhtc
    >>> from coffea import processor
    >>> from coffea.nanoevents import NanoAODSchema
    >>> run = processor.Runner(executor=rhtc.coffea.RedisExecutor(),          # was IterativeExecutor()
    ...                        cachestrategy=rhtc.coffea.worker_cache,         # the workers' branch caches
    ...                        schema=NanoAODSchema, chunksize=100_000)        # doctest: +SKIP
    >>> out = run(fileset, processor_instance=MyProcessor(), treename="Events")  # doctest: +SKIP
    >>> rhtc.last_map().timeline("coffea-run.png")                           # doctest: +SKIP

:class:`RedisExecutor` runs coffea's preprocessing (one task per file) and processing
(one task per WorkItem) through our queue. Each WorkItem is routed home by its file
UUID, tree and entry range, the same routing key as :class:`client.data.chunks.Chunk`'s, so a
rerun goes to the worker that holds its columns. :func:`worker_cache` hands NanoEvents,
on that worker, the worker's byte-capped branch cache as ``buffer_cache``: a rerun reads
no branch data from the files, and the cache's hits and bytes appear in the run record
and the timeline as for ``chunk.arrays``.

This module imports coffea; the rest of the project never does (``pip install
'redis-htcondor[coffea]'``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid as _uuid
import warnings
from typing import Any, Callable, Iterable, MutableMapping

try:
    import uproot
    from coffea.processor import accumulate
    from coffea.processor.executor import ExecutorBase, WorkItem
    from coffea.util import rich_bar

    import coffea.processor.executor as _executor_module   # whose uproot.open coffea's items call
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("rhtc.coffea needs coffea: pip install 'redis-htcondor[coffea]'") from err

from rhtc import context
from .data.freshness import PreadSource
from .data.openfiles import _forget, version_of
from .api import submit
from .engine.options import MapOptions
from .data import xrootd
from .data.chunks import Chunk
from .errors import RemoteError, WorkItemFailed
from .data.coffea_parity import (MAX_WARNINGS_PER_ITEM, _bytes_requested, _per_item_bytes,
                                       _processor_error, _worth_sending)

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

    def __init__(self, function: Callable, keep_files_open: bool = True):
        self.function, self.keep_files_open = function, keep_files_open
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
                            (_files_kept_open(task.item) if self.keep_files_open else contextlib.nullcontext()) as lent:
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


def _fold(a: tuple[Any, list], b: tuple[Any, list]) -> tuple[Any, list]:
    """Adds one item's output into the running total with coffea's ``accumulate``."""
    (total, notes), (out, more) = a, b
    return accumulate([out], total), notes + more


@dataclasses.dataclass
class RedisExecutor(ExecutorBase):
    """A coffea executor that runs every item on redis-htcondor workers.

    Args:
        broker: URL, BrokerConfig or LocalCluster (as for :func:`rhtc.remote_map`);
            default: the environment/config file, else the session's local cluster.
        task_retries: reruns of an item whose processor raised (on any worker). A worker
            that dies is never a failed item: its items always run again elsewhere.
        retry_on: only retry these exception types (or names), e.g. ``(OSError,)``.
        routing: send each WorkItem to the worker that holds its columns.
        stragglers: backup copies of slow items in the map's tail (see remote_map).
        task_timeout: seconds one item may run without a result before it is backed up
            on an idle worker and then fails as ``TaskTimeout`` (see remote_map); None:
            no bound.
        merge: each worker accumulates its items' outputs (coffea's ``accumulate``) and
            hands in one partial every few items, so the notebook adds far fewer outputs
            (see remote_map's ``merge``); False: every item's output comes alone.
        keep_files_open: a worker keeps each file it opened (and its tree's metadata) open
            for the next item of that file and for reruns, instead of coffea's open and
            parse per item; checked against the item's file UUID. Items run with extra
            ``uproot_options`` open their files as coffea does.
        timeout: seconds before the run is cancelled with TimeoutError.
        status, desc, unit: coffea's progress bar.

        retries: coffea's own in-task retries, as for IterativeExecutor (whose default is 3;
            ours is 0, as ``task_retries`` reruns through the queue): the Runner reruns a
            failing item this many times inside its task before ``skipbadfiles`` decides.

    The Runner's options behave as with IterativeExecutor: ``skipbadfiles`` (a bad item
    returns nothing; its "Skipping bad file" warning is repeated on the client, naming
    the item), ``use_result_type`` (an ``Err``), ``savemetrics`` (``bytesread`` counts
    each item's own reads, also from a kept-open file), ``maxchunks``. ``retry_on`` and
    ``skipbadfiles`` match the processor's own exception, not coffea's wrapper.

    >>> from coffea import processor
    >>> run = processor.Runner(executor=RedisExecutor(), cachestrategy=worker_cache)  # doctest: +SKIP
    """

    broker: Any = None
    task_retries: int = 0
    retry_on: tuple | None = None
    routing: bool = True
    stragglers: float | None = 3.0
    keep_files_open: bool = True
    timeout: float | None = None
    retries: int = 0
    task_timeout: float | None = None
    merge: bool = True

    def map_options(self) -> MapOptions:
        """The map options of the runs (coffea's executors are configured by fields: ours
        name the map options coffea-style, ``task_retries`` for MapOptions' ``retries``
        since ``retries`` is coffea's in-task retries)."""
        return MapOptions(retries=self.task_retries, retry_on=self.retry_on, routing=self.routing,
                          stragglers=self.stragglers, label=self.function_name or self.desc,
                          task_timeout=self.task_timeout, merge=self.merge)

    def __post_init__(self) -> None:
        self.map_options()           # a wrong option raises here, naming it
        for name in ("retries", "task_retries"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"RedisExecutor({name}={value!r}): give a whole number >= 0 "
                                 "(how many times a failing item runs again)")

    def __call__(self, items: Iterable, function: Callable, accumulator: Any) -> tuple[Any, int]:
        tasks = [CoffeaTask(item, routing_key(item) if self.routing else None) for item in items]
        if not tasks:
            return accumulator, 0
        handle = None
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:                      # Ctrl-C at any instant, from the submission on, cancels the map
            handle = submit(_RunItem(function, self.keep_files_open), tasks, broker=self.broker, reduce=_fold,
                            errors="return", options=self.map_options())
            handle.warn_failures = False      # a failed item raises below (WorkItemFailed), never left out
            with rich_bar() as bar:
                bar_id = bar.add_task(self.desc, total=len(tasks), unit=self.unit, disable=not self.status)
                while not handle.done():
                    if handle.failures:
                        raise self._failure(handle.failures[0], tasks)
                    if deadline is not None and time.monotonic() > deadline:
                        raise TimeoutError(f"{self.desc}: {handle.received}/{len(tasks)} items done "
                                           f"after {self.timeout} s (map {handle.map_id})")
                    bar.update(bar_id, completed=handle.received, refresh=True)
                    time.sleep(0.05)
                bar.update(bar_id, completed=handle.received, refresh=True)
            value = handle.wait()
        except BaseException:
            if handle is not None:
                handle.cancel()
            raise
        if handle.failures:
            raise self._failure(sorted(handle.failures, key=lambda e: e.index)[0], tasks)
        total, notes = value if value is not None else (None, [])
        first_seen = {text: (item, category) for text, item, category in reversed(notes)}
        for text, (item, category) in first_seen.items():   # each distinct warning once, first item
            if not (isinstance(category, type) and issubclass(category, Warning)):
                category = RuntimeWarning
            warnings.warn(f"{text} (on a worker, in {item})", category, stacklevel=2)
        return accumulate([total], accumulator), 0

    @staticmethod
    def _failure(error: RemoteError, tasks: list[CoffeaTask]) -> WorkItemFailed:
        failed = WorkItemFailed(tasks[error.index].item, error, describe_item(tasks[error.index].item))
        failed.__cause__ = error.exception if error.exception is not None else error
        return failed
