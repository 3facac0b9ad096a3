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
and the timeline as for ``chunk.arrays``. This module is the client's side (the executor:
submitting, progress, warnings and failures); what runs for an item on the worker, and the
cache strategy, are in :mod:`client.data.coffea_items`.

This module and :mod:`client.data.coffea_items` import coffea; the rest of the project
never does (``pip install 'redis-htcondor[coffea]'``).
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any, Callable, Iterable

# first: without coffea, this raises the ImportError that names the extra to install
from .data.coffea_items import (_RunItem, CoffeaTask, describe_item, routing_key,  # noqa: F401 (public here)
                                 worker_cache)

from coffea.processor import accumulate
from coffea.processor.executor import ExecutorBase
from coffea.util import rich_bar

from .api import submit
from .engine.options import MapOptions
from .data.coffea_parity import as_coffea_raises
from .errors import RemoteError, WorkItemFailed, item_failure_note


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
    each item's own reads, also from a kept-open file), ``maxchunks``, ``checkpointer``.
    ``retry_on`` and ``skipbadfiles`` match the processor's own exception, not coffea's
    wrapper. A failing item raises what IterativeExecutor raises: coffea's
    ``Exception("Failed processing file: ...")`` from the processor's own exception, or
    the reader's (``FileNotFoundError``, ``UprootMissTreeError``) from preprocessing, with
    a note naming the item and the worker; at the end of its ``__cause__`` chain is the
    :class:`RemoteError` with the remote traceback; of several failing items, the first to
    fail (as FuturesExecutor; the rest are cancelled). An exception that could not come back
    (it did not pickle) or a failure of ours (a worker lost three times, a timeout) raises
    :class:`WorkItemFailed`.

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
            handle.warn_failures = False      # a failed item raises below (as with coffea's executors), never left out
            with rich_bar() as bar:
                bar_id = bar.add_task(self.desc, total=len(tasks), unit=self.unit, disable=not self.status)
                while not handle.done():
                    if handle.failures:
                        raise self._failure(handle.failures[0], tasks)
                    if deadline is not None and time.monotonic() > deadline:
                        raise TimeoutError(f"{self.desc}: {handle.received}/{len(tasks)} items done "
                                           f"after {self.timeout} s (map {handle.map_id})")
                    bar.update(bar_id, completed=handle.received, refresh=True)
                    handle.join(0.05)     # back at once when the map ends: a sleep made each run 25 ms longer on average
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
    def _failure(error: RemoteError, tasks: list[CoffeaTask]) -> BaseException:
        """What the caller gets for a failed item: what coffea's IterativeExecutor raises
        (:func:`~client.data.coffea_parity.as_coffea_raises`), noting the item and the
        worker; :class:`WorkItemFailed` only where that cannot be rebuilt."""
        item = tasks[error.index].item
        raised = as_coffea_raises(error, item_failure_note(item, error, describe_item(item)))
        if raised is not None:
            return raised
        failed = WorkItemFailed(item, error, describe_item(item))
        failed.__cause__ = error.exception if error.exception is not None else error
        return failed
