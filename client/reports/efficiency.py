"""How efficient was a map run: the headline numbers of a :class:`~client.reports.record.RunRecord`.

Definitions (all times from the record, in seconds):

* a worker's *busy* time is the union of its tasks' ``[start, stop]`` intervals
  (overlapping tasks count once), failed attempts included (a run that raised and was
  retried, or that died with its process, kept the worker busy);
* the map's *wall* time runs from its submission (``RunRecord.start``: the client's clock
  as ``remote_map`` starts to queue the tasks; 0, not recorded, falls back to the first
  task's start) to the last result reaching the client (``RunRecord.end``), widened to
  cover every task should a worker's clock run ahead (:func:`time_range`);
* **wall-clock efficiency** (``efficiency_wall``, the headline, shown first everywhere) =
  total busy / (workers x wall), where the workers are those that ran at least one of the
  map's tasks or attempts. For equal tasks it is tasks x duration / (workers x wall): the
  fraction of the ideal tasks/s the map delivered. Everything counts against it: the ramp
  (a worker waiting for its first task), the gaps between tasks and the tail (a worker done,
  waiting for the others). The workers that took part rather than the pool alive at the
  map's start, because the record names them (a saved record gives the same figure) and a
  worker the map never needed (fewer tasks than workers) measures the pool's size, not
  time this map lost; a worker that joined late is still charged the whole wall time, and
  two maps sharing workers at once each count the other's tasks as idle time. What it
  cannot see: a worker alive but never given a task while tasks waited (the record cannot
  tell it from one the map did not need; ``bench scale`` says when fewer of its workers
  took part than it started);
* a worker's *span* runs from its first task start to its last task stop, as in the
  seed's plot: time before its first task and after its last one is not counted; what is
  counted is the gaps the queue left between its tasks. *Per-worker* efficiency (the key
  ``efficiency``, kept for the benches and older code) = total busy / total span, ``per_worker``
  each worker's own. It flatters: a map whose workers are never idle between their first
  and last tasks reads 100 % however long the ramp and the tail;
* ``efficiency_to_end`` is the figure whose spans run to the end of the map, so a worker
  waiting for the others to finish counts as idle (the tail, not the ramp);
* *tail* = time from when 95% of the finished tasks had stopped to when the last one did.

The plot of the same record is :mod:`client.reports.timeline`; this module needs no matplotlib
and imports nothing of the plot, so :mod:`client.reports.record` can use it.

Example: two workers, one starting 1 s after the submission and one 2 s after (the ramp),
four 1 s tasks each back to back, the last result received 1 s after the last task
ended (the tail). Per worker: 100 %; by the wall clock: 8 busy seconds of 2 workers x 7 s::

    >>> from rhtc.client.reports.record import RunRecord
    >>> from rhtc.client.reports.efficiency import efficiency
    >>> rec = RunRecord(start=10.0, end=17.0)
    >>> for i in range(8):
    ...     worker, first = ("a", 11) if i < 4 else ("b", 12)
    ...     rec.add_task({"index": i, "worker": worker, "start": first + i % 4, "stop": first + i % 4 + 1})
    >>> eff = efficiency(rec)
    >>> round(eff["efficiency_wall"], 4), eff["efficiency"], round(eff["efficiency_to_end"], 4)
    (0.5714, 1.0, 0.7273)
    >>> eff["per_worker"], eff["busy"], eff["wall"]
    ({'a': 1.0, 'b': 1.0}, 8.0, 7.0)
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any, Protocol, Sequence

from .attempts import AttemptRecord
from .rows import TaskRecord


class RunRows(Protocol):
    """What the figures read of a run: its rows and its bounds (a
    :class:`~client.reports.record.RunRecord`, which imports this module for its summary)."""

    start: float
    end: float
    tasks: Sequence[TaskRecord]
    attempts: Sequence[AttemptRecord]

    @property
    def workers(self) -> list[str]:
        """The workers that ran a task or an attempt, in order of first start."""


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``[start, stop]`` intervals (overlaps counted once)."""
    total = 0.0
    cur_start = cur_stop = None
    for start, stop in sorted(intervals):
        if cur_stop is None or start > cur_stop:
            if cur_stop is not None:
                total += cur_stop - cur_start
            cur_start, cur_stop = start, stop
        else:
            cur_stop = max(cur_stop, stop)
    if cur_stop is not None:
        total += cur_stop - cur_start
    return total


def _runs(record: RunRows) -> list[tuple[str, float, float]]:
    """(worker, start, stop) of every task's row and of every timed failed attempt."""
    return [(t.worker, t.start, t.stop) for t in record.tasks] + \
        [(a.worker, a.start, a.stop) for a in record.attempts if a.timed]


def _bounds(start: float, end: float, first: float, last: float) -> tuple[float, float]:
    """The map's start and end (``start`` 0: not recorded) widened to ``[first, last]``,
    the first task start and the last task stop."""
    t0 = min(start, first) if start > 0 else first
    return t0, max(end, last, t0)


def time_range(record: RunRows) -> tuple[float, float]:
    """Map start and end, widened to cover every task (clocks of nodes may disagree).

    A ``start`` of 0 means "not recorded" and falls back to the first task start.
    """
    runs = _runs(record)
    first = min((start for _, start, _ in runs), default=record.start)
    last = max((stop for _, _, stop in runs), default=record.end)
    return _bounds(record.start, record.end, first, last)


def wall_efficiency(busy: float, workers: int, wall: float) -> float:
    """Busy seconds over what ``workers`` could give in ``wall`` seconds (see the module's
    definition: the workers that took part, the map's submission to its last result).

    Example: 30 tasks of 10 s on 100 workers, 4 s of ramp and tail on top::

        >>> wall_efficiency(busy=30 * 10.0, workers=100, wall=14.0) == 300 / 1400
        True
    """
    if workers <= 0:
        return 0.0
    return busy / (workers * wall) if wall > 0 else 1.0


def worker_figures(workers: dict[str, tuple[float, float, float]], t0: float, end: float) -> dict[str, Any]:
    """The efficiencies from each worker's (busy seconds, first start, last stop) and the
    map's bounds: ``efficiency_wall``, ``efficiency``, ``efficiency_to_end``,
    ``per_worker``, ``busy``, ``span`` (defined in the module docstring). The one place
    they are computed: :func:`efficiency` and :class:`MapTally` (the dashboard) call it.

    Example::

        >>> f = worker_figures({"a": (4.0, 1.0, 5.0), "b": (4.0, 2.0, 6.0)}, t0=0.0, end=7.0)
        >>> round(f["efficiency_wall"], 4), f["efficiency"], round(f["efficiency_to_end"], 4)
        (0.5714, 1.0, 0.7273)
    """
    per_worker: dict[str, float] = {}
    total_busy = total_span = total_to_end = 0.0
    for worker, (busy, first, last) in workers.items():
        span = last - first
        per_worker[worker] = busy / span if span > 0 else 1.0
        total_busy += busy
        total_span += span
        total_to_end += max(end - first, span)
    some = 1.0 if per_worker else 0.0
    return {
        "efficiency_wall": wall_efficiency(total_busy, len(per_worker), end - t0),
        "efficiency": total_busy / total_span if total_span > 0 else some,
        "efficiency_to_end": total_busy / total_to_end if total_to_end > 0 else some,
        "per_worker": per_worker,
        "busy": total_busy,
        "span": total_span,
    }


class MapTally:
    """A map's efficiencies for a reader that sees its tasks one at a time and cannot keep
    them all (the dashboard, which reads every finished task from the broker's feed): per
    worker, the sum of its tasks' durations (a worker's tasks do not overlap) and its
    first start and last stop. Failed attempts are not in the feed, so it counts only the
    tasks' own runs.

    Example (the module docstring's map)::

        >>> tally = MapTally()
        >>> for k in range(4):
        ...     tally.add("a", 11.0 + k, 12.0 + k)
        ...     tally.add("b", 12.0 + k, 13.0 + k)
        >>> f = tally.figures(start=10.0, end=17.0)
        >>> round(f["efficiency_wall"], 4), f["efficiency"]
        (0.5714, 1.0)
    """

    def __init__(self) -> None:
        self.workers: dict[str, list[float]] = {}      # worker -> [busy, first start, last stop]

    def add(self, worker: str, start: float, stop: float) -> None:
        """One finished task of the map."""
        stop = max(start, stop)
        row = self.workers.get(worker)
        if row is None:
            self.workers[worker] = [stop - start, start, stop]
        else:
            row[0] += stop - start
            row[1] = min(row[1], start)
            row[2] = max(row[2], stop)

    def figures(self, start: float, end: float) -> dict[str, Any]:
        """:func:`worker_figures` over the map from ``start`` (its submission) to ``end``
        (its last result), widened to cover its tasks as :func:`time_range` does."""
        rows = self.workers.values()
        first = min((r[1] for r in rows), default=start)
        last = max((r[2] for r in rows), default=end)
        t0, stop = _bounds(start, end, first, last)
        return worker_figures({w: tuple(r) for w, r in self.workers.items()}, t0, stop)


def efficiency(record: RunRows) -> dict[str, Any]:
    """The headline numbers of a run, as plain floats, ints and dicts.

    Keys: ``efficiency_wall`` (by the wall clock, 0..1: the headline), ``efficiency``
    (per worker, each from its first task to its last, 0..1), ``efficiency_to_end``
    (spans to the map's end), ``per_worker`` ({worker: 0..1}),
    ``worker_min``, ``worker_median``, ``busy`` and ``span`` (summed over workers, s),
    ``wall`` (map start to end, s), ``tail`` (s), ``tail_start`` (s since map start when
    95% of tasks were done), ``events`` and ``events_per_s`` (None if no task reported
    events), ``cache_hit`` (fraction of bytes read from cache, None if nothing was
    read), ``files_opened`` (files the tasks had to open: 0 on a warm rerun),
    ``errors`` (tasks that failed, whatever ended them), ``failed_attempts`` (attempts
    before a task's end that failed: ``retried`` after an error, ``lost`` with their
    process), ``lost_attempts`` and ``backoff`` (seconds of retry pauses, summed).

    Example::

        >>> from rhtc.client.reports.record import RunRecord
        >>> rec = RunRecord(start=0.0, end=4.0)
        >>> rec.add_task({"index": 0, "worker": "w", "start": 0, "stop": 2, "events": 80,
        ...               "bytes_cache": 3, "bytes_file": 1})
        >>> e = efficiency(rec)
        >>> e["efficiency_wall"], e["efficiency"], e["efficiency_to_end"], e["events_per_s"], e["cache_hit"]
        (0.5, 1.0, 0.5, 20.0, 0.75)
    """
    t0, end = time_range(record)
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for worker, start, stop in _runs(record):
        intervals[worker].append((start, max(start, stop)))
    figures = worker_figures({worker: (_busy_seconds(intervals[worker]), min(s for s, _ in intervals[worker]),
                                       max(e for _, e in intervals[worker])) for worker in record.workers}, t0, end)

    stops = sorted(task.stop for task in record.tasks)
    if stops:
        k = -(-95 * len(stops) // 100)  # ceil(0.95 n) without float rounding
        tail, tail_start = stops[-1] - stops[k - 1], stops[k - 1] - t0
    else:
        tail = tail_start = 0.0

    wall = end - t0
    counted = [task.events for task in record.tasks if task.events is not None]
    events = float(sum(counted)) if counted else None
    cache = sum(task.bytes_cache for task in record.tasks)
    read = cache + sum(task.bytes_file for task in record.tasks)
    values = list(figures["per_worker"].values())
    return {
        **figures,
        "worker_min": min(values) if values else 0.0,
        "worker_median": float(statistics.median(values)) if values else 0.0,
        "wall": wall,
        "tail": tail,
        "tail_start": tail_start,
        "events": events,
        "events_per_s": events / wall if events is not None and wall > 0 else None,
        "cache_hit": cache / read if read > 0 else None,
        "files_opened": sum(task.files_opened for task in record.tasks),
        "errors": sum(1 for task in record.tasks if task.error),
        "failed_attempts": len(record.attempts),
        "lost_attempts": sum(1 for a in record.attempts if a.outcome == "lost"),
        "backoff": sum(a.backoff for a in record.attempts),
    }
