"""``remote_map`` and friends: the analyst's side of the queue.

Three ways to run a function over a list of arguments (usually NanoAOD chunks):

* :func:`remote_map` blocks and returns the results in the order of the arguments
  (or one combined result with ``reduce=True``);
* :func:`imap_unordered` yields each :class:`~client.tasks.TaskResult` as it arrives;
* :func:`submit` returns a :class:`MapHandle` at once (progress, wait, cancel).

With no broker given or configured anywhere, the first call starts a local cluster
(a private redis-server and one worker per CPU) and reuses it for the session, the way
``dask.distributed.Client()`` does.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

from rhtc.broker.config import BrokerConfig, BrokerNotConfigured, StaleConfig
from rhtc.broker.storage import Storage
from rhtc.client.errors import MapCancelled, RemoteError
from rhtc.client.handleview import announce, html_view, live_display, text_view
from rhtc.client.maprun import MapRun
from rhtc.client.tasks import TaskResult
from rhtc.client.reduce import Reducer

log = logging.getLogger("rhtc.client")

_storages: dict[tuple, Storage] = {}
_storage_lock = threading.Lock()
_last: "MapHandle | None" = None


def resolve_config(broker=None) -> BrokerConfig:
    """The broker a call should use: an explicit URL / config / cluster, else the
    environment or config file, else the session's local default cluster."""
    if broker is None:
        try:
            return BrokerConfig.resolve()
        except BrokerNotConfigured as err:
            from rhtc.client.local import default_cluster
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
            s.flush()
        except Exception:
            pass


def live_workers(broker=None) -> list[dict]:
    """Status of the workers whose heartbeat is current.

    >>> from rhtc.client import LocalCluster, live_workers
    >>> with LocalCluster(n_workers=2) as c:           # doctest: +SKIP
    ...     len(live_workers(c))
    2
    """
    return storage_for(broker).live_workers()


def _start(fn, args, broker, wait_first: float = 0.0, **options) -> MapRun:
    args = list(args)
    storage = storage_for(broker)
    run = MapRun(storage, fn, args, **options)
    run.submit(wait_first=wait_first)
    return run


class MapHandle:
    """A map in flight: ``progress()``, ``done()``, ``wait()``, ``cancel()``, ``record``.

    >>> h = submit(pow, [(2, 3)] * 4)                   # doctest: +SKIP
    >>> h.wait()                                        # doctest: +SKIP
    """

    def __init__(self, run: MapRun, reduce=None, errors: str = "raise", progress: bool = False):
        if errors not in ("raise", "return"):
            raise ValueError("errors must be 'raise' (raise RemoteError after collecting the rest) "
                             "or 'return' (RemoteError objects in place of failed results)")
        self.run = run
        self.errors = errors
        self.reducer = Reducer(None if reduce is True else reduce) if reduce else None
        self.values: list[Any] | None = None if self.reducer else [None] * run.n
        self.failures: list[RemoteError] = []
        self.received = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._exc: BaseException | None = None
        self._bar = _progress_bar(run, progress)

    @property
    def map_id(self) -> str:
        return self.run.map_id

    def _add(self, results: list[TaskResult]) -> None:
        with self._lock:
            for r in results:
                self.received += 1
                if r.error is not None:
                    self.failures.append(r.error)
                    if self.values is not None:
                        self.values[r.index] = r.error
                elif self.reducer is not None:
                    try:
                        self.reducer.add(r.value)
                    except Exception as err:
                        raise _folding_failed(err, self.run, r.index)
                else:
                    self.values[r.index] = r.value
        if self._bar is not None and results:
            self._bar.update(len(results))

    def _collect(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.run.done:
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"map {self.map_id} ({self.run.label}) still has "
                                   f"{self.run.unfinished} of {self.run.n} tasks unfinished after {timeout} s")
            self._add(self.run.poll(left))
        self._add(self.run.poll(0))     # the provisional rejections, if any

    def _background(self) -> None:
        try:
            self._collect()
        except BaseException as err:  # handed to wait(); the map ends now, its keys go
            self._exc = err
            try:
                self.run.cancel()
            except Exception as also:     # the broker is gone too: the keys expire by themselves
                log.warning("map %s: could not remove its keys after %r: %s", self.map_id, err, also)

    def start_background(self) -> "MapHandle":
        self._thread = threading.Thread(target=self._background, name=f"map-{self.map_id}", daemon=True)
        self._thread.start()
        return self

    def progress(self) -> tuple[int, int]:
        """(results received, tasks in the map)."""
        return self.received, self.run.n

    def done(self) -> bool:
        """True once every result is in, or the collecting thread ended with an error
        (``wait()`` raises it)."""
        if self._exc is not None:
            return True
        return self.run.done and (self._thread is None or not self._thread.is_alive())

    def wait(self, timeout: float | None = None):
        """Block until every result is in; return them (ordered list, or the reduction)."""
        try:
            if self._thread is not None:
                self._thread.join(timeout)
                if self._thread.is_alive():
                    raise TimeoutError(f"map {self.map_id} not done after {timeout} s "
                                       f"({self.received}/{self.run.n} results)")
                if self._exc is not None:
                    raise self._exc
            else:
                self._collect(timeout)
        except KeyboardInterrupt:
            self.cancel()
            raise
        except TimeoutError:
            raise
        except BaseException:
            if not self.run.closed:
                self.cancel()
            raise
        return self._finish()

    def _finish(self):
        self.run.close()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.run.cancelled:
            raise MapCancelled(f"map {self.map_id} was cancelled")
        if self.failures and self.errors == "raise":
            failures = sorted(self.failures, key=lambda e: e.index)
            first = failures[0]
            first.more = failures[1:]
            raise first
        return self.reducer.value if self.reducer is not None else self.values

    def cancel(self) -> int:
        """Drop the map's queued tasks and delete its keys; returns how many tasks were dropped."""
        n = self.run.cancel()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        return n

    def record(self):
        """The run record (per-task worker, times, bytes), for saving and the timeline."""
        return record_of(self.run)

    def timeline(self, path: str | None = None) -> "Plot":
        """Plot the worker occupancy timeline of this map: shown inline in a notebook,
        saved as PNG with ``path``; ``.figure`` is the matplotlib Figure."""
        from rhtc.client.timeline import plot_timeline
        return Plot(plot_timeline(self.record(), path=path))

    def __repr__(self) -> str:
        return text_view(self)

    def _repr_html_(self) -> str:
        """Progress, workers busy on the map, a link to the dashboard (Jupyter)."""
        return html_view(self)

    def _ipython_display_(self) -> None:
        live_display(self)          # the same view, redrawn until the map is done


def _folding_failed(err: Exception, run: MapRun, index: int) -> Exception:
    """The reduce function's own error, noted with the task whose result it was folding."""
    err.add_note(f"while folding the result of task {index} of map {run.map_id} ({run.label}) into "
                 f"the reduction; argument: {run.describe_argument(index)}. The map was cancelled: "
                 "fix the reduce function (or what the function returns) and run it again.")
    return err


class Plot:
    """A matplotlib figure that a notebook shows inline (as PNG) without pyplot."""

    def __init__(self, figure):
        self.figure = figure

    def _repr_png_(self) -> bytes:
        import io
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=100)
        return buf.getvalue()

    def savefig(self, path, **kwargs) -> None:
        self.figure.savefig(path, **kwargs)


def record_of(run: MapRun):
    """A :class:`~client.record.RunRecord` of a map: its tasks and the workers' metrics."""
    from rhtc.client.record import RunRecord
    rec = RunRecord(map_id=run.map_id, function=run.label, start=run.start or 0.0, n_tasks=run.n)
    for meta in run.metas:
        if "start" in meta and "stop" in meta:
            rec.add_task(meta, received=meta.get("received"))
    for attempt in run.ledger.attempts:
        rec.add_attempt(attempt)
    for sample in run.metric_samples:
        rec.add_metric(sample)
    rec.end = run.end or rec.end
    rec.n_tasks = run.n
    return rec


def _progress_bar(run: MapRun, progress):
    if not progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=run.n, desc=run.label, unit="task", leave=True)


def remote_map(fn: Callable, args: Iterable, *, broker=None, reduce: bool | Callable | None = None,
               progress: bool = True, errors: str = "raise", retries: int = 0,
               retry_on: tuple | None = None, routing: bool = True, stragglers: float | None = 3.0,
               timeout: float | None = None, label: str | None = None, task_timeout: float | None = None):
    """Run ``fn`` on every argument on the workers; return the results in argument order.

    Args:
        fn: any picklable callable (cloudpickle: lambdas and notebook functions work).
        args: the arguments, usually chunks from :func:`client.make_chunks`.
        broker: URL, BrokerConfig or LocalCluster; default: $RHTC_BROKER, the config
            file, else a local cluster started for the session.
        reduce: ``True`` to combine the results with ``+`` as they arrive (histograms,
            numbers, arrays, dicts of them) and return one value; or a function of two results.
        progress: show a progress bar (notebook-aware).
        errors: ``"raise"``: after the other results are in, raise the first
            :class:`RemoteError` (the others in ``.more``); ``"return"``: put them in the list.
        retries: how many times to rerun a task whose function raised (default 0). Tasks
            whose *worker* died are always retried, up to ``$RHTC_MAX_ATTEMPTS`` runs in all
            (default 3; :mod:`client.retry` decides every rerun).
        retry_on: only retry these exception types (or type names), e.g.
            ``(ChunkFileError, OSError)`` for transient remote reads.
        routing: send each chunk to a worker that has it cached (sticky routing).
        stragglers: in the map's tail, when a worker is idle, run a backup copy of a task
            that has run this many times longer than the median (first result wins);
            ``None`` turns it off. With fewer than three finished tasks (a small map) the
            longest finished one stands in for the median.
        timeout: seconds to wait before cancelling and raising TimeoutError.
        task_timeout: seconds one task may run without a result (default ``None``: no
            bound). Past it the task is backed up on an idle worker; if no copy has a
            result ``task_timeout`` seconds later (or no worker was free by twice the
            bound), it fails with a :class:`RemoteError` ``TaskTimeout`` naming the worker,
            the chunk and the time. For reads that may hang for good (a stalled FUSE
            mount, an XRootD server), e.g. ``task_timeout=600``.

    Example::

        >>> from rhtc.client import remote_map, LocalCluster
        >>> with LocalCluster(n_workers=2) as cluster:      # doctest: +SKIP
        ...     remote_map(lambda x: x * x, range(5), broker=cluster, progress=False)
        [0, 1, 4, 9, 16]

    Ctrl-C cancels the map: its queued tasks are dropped and its keys removed.
    """
    global _last
    args = list(args)
    if not args:
        return None if reduce else []
    # a small map waits for its first result in the same round trip as its submission
    run = _start(fn, args, broker, wait_first=0.05 if len(args) <= 4 else 0.0, retries=retries,
                 retry_on=retry_on, routing=routing, stragglers=stragglers, label=label,
                 task_timeout=task_timeout)
    handle = MapHandle(run, reduce=reduce, errors=errors, progress=progress)
    _last = handle
    try:
        return handle.wait(timeout)
    except TimeoutError:
        handle.cancel()
        raise


def submit(fn: Callable, args: Iterable, *, broker=None, reduce: bool | Callable | None = None,
           errors: str = "raise", retries: int = 0, retry_on: tuple | None = None,
           routing: bool = True, stragglers: float | None = 3.0, label: str | None = None,
           task_timeout: float | None = None) -> MapHandle:
    """Start a map and return at once; results are collected in the background. The
    options are :func:`remote_map`'s (``task_timeout=`` bounds one task's run time).

    >>> h = submit(abs, [-1, -2], progress=False)       # doctest: +SKIP
    >>> h.progress(), h.wait()                           # doctest: +SKIP
    ((2, 2), [1, 2])
    """
    global _last
    run = _start(fn, list(args), broker, retries=retries, retry_on=retry_on, routing=routing,
                 stragglers=stragglers, label=label, task_timeout=task_timeout)
    handle = MapHandle(run, reduce=reduce, errors=errors).start_background()
    _last = handle
    announce(handle)
    return handle


def imap_unordered(fn: Callable, args: Iterable, *, broker=None, retries: int = 0,
                   retry_on: tuple | None = None, routing: bool = True,
                   stragglers: float | None = 3.0, label: str | None = None,
                   task_timeout: float | None = None) -> Iterator[TaskResult]:
    """Yield a :class:`TaskResult` (index, value, meta, error) for each task as it finishes.
    The options are :func:`remote_map`'s (``task_timeout=``: a task that runs longer is
    backed up, then yielded with a ``TaskTimeout`` error).

    Errors are not raised: check ``result.error``. Leaving the loop early cancels the map.

    >>> for r in imap_unordered(abs, [-1, -2]):           # doctest: +SKIP
    ...     print(r.index, r.value, r.meta["worker"])
    """
    run = _start(fn, list(args), broker, retries=retries, retry_on=retry_on, routing=routing,
                 stragglers=stragglers, label=label, task_timeout=task_timeout)
    try:
        while not run.done:
            yield from run.poll(1.0)
        yield from run.poll(0)
    finally:
        if run.done:
            run.close()
        else:
            run.cancel()


def last_map() -> MapHandle | None:
    """The handle of the most recent map of this session (for ``last_map().timeline()``)."""
    return _last
