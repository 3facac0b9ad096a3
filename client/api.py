"""``remote_map`` and friends: the analyst's side of the queue.

Three ways to run a function over a list of arguments (usually NanoAOD chunks):

* :func:`remote_map` blocks and returns the results in the order of the arguments
  (or one combined result with ``reduce=True``);
* :func:`imap_unordered` yields each :class:`~client.engine.tasks.TaskResult` as it arrives;
* :func:`submit` returns a :class:`MapHandle` at once (progress, wait, cancel).

With no broker given, a call inside ``with LocalCluster(...):`` runs on that cluster (as
dask's ``Client`` becomes the default); else on the broker of the environment or config
file; with none configured anywhere, the first call starts a local cluster (a private
redis-server and one worker per CPU) and reuses it for the session.

Bad arguments are refused at the call, before anything is queued
(:mod:`client.arguments`), and Ctrl-C at any instant of a blocking call cancels the map.
"""
from __future__ import annotations

import atexit
import logging
import threading
import warnings
from typing import Callable, Iterable, Iterator

from ..broker.wire.config import BrokerConfig, BrokerNotConfigured, StaleConfig
from ..broker.storage import Storage
from .arguments import map_call
from .engine.options import MapOptions, documented
from .handle import MapHandle, _cancelled
from .handleview import announce
from .engine.maprun import MapRun
from .engine.tasks import TaskResult

log = logging.getLogger("rhtc.client")

_storages: dict[tuple, Storage] = {}
_storage_lock = threading.Lock()
_last: "MapHandle | None" = None


def resolve_config(broker=None) -> BrokerConfig:
    """The broker a call should use: an explicit URL / config / cluster, else the cluster
    of the innermost ``with LocalCluster()`` block, else the environment or config file,
    else the session's local default cluster."""
    if broker is None:
        from .local import active_cluster
        cluster = active_cluster()
        if cluster is not None:
            return cluster.config
        try:
            return BrokerConfig.resolve()
        except BrokerNotConfigured as err:
            from .local import default_cluster
            if isinstance(err, StaleConfig):
                warnings.warn(f"{err}; starting a local cluster for this session instead",
                              RuntimeWarning, stacklevel=3)
            return default_cluster().config
    config = getattr(broker, "config", broker)
    if isinstance(config, BrokerConfig):
        return config
    if isinstance(broker, str):
        return BrokerConfig.resolve(url=broker)
    raise TypeError(f"broker must be a URL, a BrokerConfig or a LocalCluster, not {type(broker).__name__}")


def storage_for(broker=None) -> Storage:
    """A connected :class:`~broker.storage.Storage`, reused across calls."""
    config = resolve_config(broker)
    ident = (config.url, config.namespace, config.key)
    with _storage_lock:
        s = _storages.get(ident)
        if s is None:
            s = Storage(config)
            s.ping()
            _storages[ident] = s
            if len(_storages) == 1:
                atexit.register(_flush_all)
    return s


def _flush_all() -> None:
    """At exit: delete the keys of maps that ended lazily."""
    for s in list(_storages.values()):
        try:
            s.maps.flush()
        except Exception:
            pass


def live_workers(broker=None) -> list[dict]:
    """Status of the workers whose heartbeat is current.

    >>> from rhtc.client import LocalCluster, live_workers
    >>> with LocalCluster(n_workers=2) as c:
    ...     len(live_workers(c))
    2
    """
    return storage_for(broker).pool.live_workers()


def _start(fn, args: list, broker, options: MapOptions, wait_first: float = 0.0, reduce=None) -> MapRun:
    """A map, submitted; whatever stops the submission (Ctrl-C too) cancels it. With
    ``reduce``, its workers merge results (``options.merge``)."""
    run = MapRun(storage_for(broker), fn, args, options, reduce=reduce)
    try:
        run.submit(wait_first=wait_first)
    except BaseException:
        run.cancel()
        raise
    return run


@documented
def remote_map(fn: Callable, args: Iterable, *, broker=None, reduce: bool | Callable | None = None,
               progress: bool = True, errors: str = "raise", timeout: float | None = None,
               options: MapOptions | None = None, **map_options):
    """Run ``fn`` on every argument on the workers; return the results in argument order.

    Args:
        fn: any picklable callable (cloudpickle: lambdas and notebook functions work).
        args: the arguments, usually chunks from :func:`client.make_chunks`.
        broker: URL, BrokerConfig or LocalCluster; default: $RHTC_BROKER, the config
            file, else a local cluster started for the session.
        reduce: ``True`` to combine the results with ``+`` as they arrive (histograms,
            numbers, arrays, dicts of them) and return one value; or a function of two
            results, which may change and return its first argument (``a += b; return a``:
            the first is always a value the reduction owns, never what a task returned or
            a cache holds) but not its second.
        progress: show a progress bar (notebook-aware).
        errors: ``"raise"``: after the other results are in, raise the first
            :class:`RemoteError` (the others in ``.more``); ``"return"``: put them in the
            list; with ``reduce``, return the reduction of the tasks that succeeded and warn
            (:class:`rhtc.TasksFailedWarning`) naming the tasks left out of it.
        timeout: seconds to wait before cancelling and raising TimeoutError.
        options: a :class:`~client.engine.options.MapOptions` to start from (the keywords below
            override it).

    The map options (keywords, or ``options=MapOptions(...)``; they are the same for
    :func:`submit`, :func:`imap_unordered` and the coffea executor):

        {map_options}

    Example::

        >>> from rhtc.client import remote_map, LocalCluster
        >>> with LocalCluster(n_workers=2) as cluster:
        ...     remote_map(lambda x: x * x, range(5), broker=cluster, progress=False)
        [0, 1, 4, 9, 16]

    Ctrl-C cancels the map: its queued tasks are dropped and its keys removed.
    """
    global _last
    opts = MapOptions.of(options, **map_options)
    args = map_call(fn, args, reduce=reduce, errors=errors, timeout=timeout)
    if not args:
        return None if reduce else []
    # a small map waits for its first result in the same round trip as its submission
    run = _start(fn, args, broker, opts, wait_first=0.05 if len(args) <= 4 else 0.0, reduce=reduce)
    handle = None
    try:
        handle = MapHandle(run, reduce=reduce, errors=errors, progress=progress)
        _last = handle
        return handle.wait(timeout)
    except BaseException:              # Ctrl-C at any instant, a timeout: nothing left behind
        if not run.closed:
            (handle or run).cancel()
        raise


def submit(fn: Callable, args: Iterable, *, broker=None, reduce: bool | Callable | None = None,
           errors: str = "raise", options: MapOptions | None = None, **map_options) -> MapHandle:
    """Start a map and return at once; results are collected in the background. The
    arguments and map options are :func:`remote_map`'s (:class:`~client.engine.options.MapOptions`).

    >>> h = submit(abs, [-1, -2])
    >>> h.wait(), h.progress()
    ([1, 2], (2, 2))
    """
    global _last
    opts = MapOptions.of(options, **map_options)
    run = _start(fn, map_call(fn, args, reduce=reduce, errors=errors), broker, opts, reduce=reduce)
    try:
        handle = MapHandle(run, reduce=reduce, errors=errors).start_background()
    except BaseException:
        run.cancel()
        raise
    _last = handle
    announce(handle)
    return handle


def imap_unordered(fn: Callable, args: Iterable, *, broker=None, options: MapOptions | None = None,
                   **map_options) -> Iterator[TaskResult]:
    """Yield a :class:`TaskResult` (index, value, meta, error) for each task as it finishes.
    The map options are :func:`remote_map`'s (:class:`~client.engine.options.MapOptions`;
    ``task_timeout=``: a task that runs longer is backed up, then yielded with a
    ``TaskTimeout`` error).

    Errors are not raised: check ``result.error``. Leaving the loop early cancels the map
    (so does Ctrl-C); a map cancelled elsewhere (``rhtc cancel``) raises MapCancelled.
    The arguments are checked at the call; the map starts with the first iteration.

    >>> for r in sorted(imap_unordered(abs, [-1, -2]), key=lambda r: r.index):
    ...     print(r.index, r.value, r.error)
    0 1 None
    1 2 None
    """
    opts = MapOptions.of(options, **map_options)
    return _unordered(fn, map_call(fn, args), broker, opts)


def _unordered(fn, args: list, broker, options: MapOptions) -> Iterator[TaskResult]:
    run = _start(fn, args, broker, options)
    try:
        while not run.done:
            yield from run.poll(1.0)
        yield from run.poll(0)
        if run.cancelled:
            raise _cancelled(run)
    finally:
        if run.done and not run.cancelled:
            run.close()
        else:
            run.cancel()


def last_map() -> MapHandle | None:
    """The handle of the most recent map of this session (for ``last_map().timeline()``)."""
    return _last
