"""A map in flight, as the analyst holds it: :class:`MapHandle` (progress, wait, cancel,
the run record and its timeline), made by :func:`client.api.submit` and friends."""
from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from typing import Any

from .errors import MapCancelled, RemoteError, TasksFailedWarning, failed_tasks_left_out
from .handleview import html_view, live_display, text_view
from .engine.maprun import MapRun
from .engine.tasks import TaskResult
from .reduce import Reducer

log = logging.getLogger("rhtc.client")


class MapHandle:
    """A map in flight: ``progress()``, ``done()``, ``wait()``, ``cancel()``, ``record``.

    >>> from rhtc import submit
    >>> h = submit(abs, [-1, -2, -3, -4])
    >>> h.wait(), h.done()
    ([1, 2, 3, 4], True)
    """

    def __init__(self, run: MapRun, reduce=None, errors: str = "raise", progress: bool = False):
        self.run = run
        self.errors = errors
        self.reducer = Reducer(None if reduce is True else reduce) if reduce else None
        self.values: list[Any] | None = None if self.reducer else [None] * run.n
        self.failures: list[RemoteError] = []
        self.warn_failures = True     # a reduction that leaves failed tasks out says so
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
                    if r.merged:
                        continue        # folded on the worker into another result of this batch
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

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for :meth:`done`, and say whether it is: returns the moment
        the last result is in (a caller that checks on the map between waits, as
        ``RedisExecutor`` does for its progress bar, loses no poll's worth of time at the end)."""
        if self._thread is not None:
            self._thread.join(timeout)
        elif not self.done():
            try:
                self._collect(timeout)
            except TimeoutError:
                pass
        return self.done()

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
            raise _cancelled(self.run)
        if self.failures and self.errors == "raise":
            failures = sorted(self.failures, key=lambda e: e.index)
            first = failures[0]
            first.more = failures[1:]
            raise first
        if self.failures and self.reducer is not None and self.warn_failures:   # never silent
            warnings.warn(failed_tasks_left_out(self.failures, self.run.n, self.map_id, self.run.label),
                          TasksFailedWarning, stacklevel=_outside_rhtc())
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
        from .reports.timeline import plot_timeline
        return Plot(plot_timeline(self.record(), path=path))

    def __repr__(self) -> str:
        return text_view(self)

    def _repr_html_(self) -> str:
        """Progress, workers busy on the map, a link to the dashboard (Jupyter)."""
        return html_view(self)

    def _ipython_display_(self) -> None:
        live_display(self)          # the same view, redrawn until the map is done


def _outside_rhtc() -> int:
    """The ``stacklevel`` of the first caller outside this package (a warning points at the
    analyst's line, however many of our frames are between)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("rhtc."):
        frame, level = frame.f_back, level + 1
    return level


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
    """A :class:`~client.reports.record.RunRecord` of a map: its tasks and the workers' metrics."""
    from .reports.record import RunRecord
    run.settle()                         # (the runs lost with their process come with the end's reply)
    rec = RunRecord(map_id=run.map_id, function=run.label, start=run.start or 0.0, n_tasks=run.n)
    rec.use_arguments(run.args)          # (what each task read of its own chunk: rhtc warm)
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


def _cancelled(run: MapRun) -> MapCancelled:
    by = f" by {run.cancelled_by}" if run.cancelled_by else ""
    return MapCancelled(f"map {run.map_id} ({run.label}) was cancelled{by}")
