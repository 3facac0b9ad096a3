"""How efficient was a map run: the headline numbers of a :class:`~client.reports.record.RunRecord`.

Definitions (all times from the record, in seconds):

* a worker's *busy* time is the union of its tasks' ``[start, stop]`` intervals
  (overlapping tasks count once), failed attempts included (a run that raised and was
  retried, or that died with its process, kept the worker busy);
* its *span* runs from its first task start to its last task stop, as in the seed's
  plot: time before its first task (the job had not started) and after its last one
  (nothing left to take) is not counted; what is counted is the gaps the queue left
  between its tasks;
* per-worker efficiency = busy / span; overall efficiency = total busy / total span;
* ``efficiency_to_end`` is the stricter figure whose spans run to the end of the map,
  so a worker waiting for the others to finish counts as idle (the tail's cost);
* *tail* = time from when 95% of the finished tasks had stopped to when the last one did.

The plot of the same record is :mod:`client.reports.timeline`; this module needs no matplotlib
and imports nothing of the plot, so :mod:`client.reports.record` can use it.

Example::

    >>> from rhtc.client.reports.record import RunRecord
    >>> from rhtc.client.reports.efficiency import efficiency
    >>> rec = RunRecord(start=100.0, end=110.0)
    >>> rec.add_task({"index": 0, "worker": "a", "start": 100, "stop": 105})
    >>> rec.add_task({"index": 1, "worker": "a", "start": 106, "stop": 110})
    >>> rec.add_task({"index": 2, "worker": "b", "start": 102, "stop": 110})
    >>> eff = efficiency(rec)
    >>> eff["per_worker"], round(eff["efficiency"], 4), round(eff["efficiency_to_end"], 4)
    ({'a': 0.9, 'b': 1.0}, 0.9444, 0.9444)
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .record import RunRecord


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


def _runs(record: RunRecord) -> list[tuple[str, float, float]]:
    """(worker, start, stop) of every task's row and of every timed failed attempt."""
    return [(t.worker, t.start, t.stop) for t in record.tasks] + \
        [(a.worker, a.start, a.stop) for a in record.attempts if a.timed]


def time_range(record: RunRecord) -> tuple[float, float]:
    """Map start and end, widened to cover every task (clocks of nodes may disagree).

    A ``start`` of 0 means "not recorded" and falls back to the first task start.
    """
    runs = _runs(record)
    first = min((start for _, start, _ in runs), default=record.start)
    last = max((stop for _, _, stop in runs), default=record.end)
    t0 = min(record.start, first) if record.start > 0 else first
    return t0, max(record.end, last, t0)


def efficiency(record: RunRecord) -> dict[str, Any]:
    """The headline numbers of a run, as plain floats, ints and dicts.

    Keys: ``efficiency`` (overall, 0..1), ``efficiency_to_end`` (spans to the map's
    end), ``per_worker`` ({worker: 0..1}),
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
        >>> e["efficiency"], e["efficiency_to_end"], e["events_per_s"], e["cache_hit"], e["errors"]
        (1.0, 0.5, 20.0, 0.75, 0)
    """
    t0, end = time_range(record)
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for worker, start, stop in _runs(record):
        intervals[worker].append((start, max(start, stop)))

    per_worker: dict[str, float] = {}
    total_busy = total_span = total_to_end = 0.0
    for worker in record.workers:
        busy = _busy_seconds(intervals[worker])
        first = min(start for start, _ in intervals[worker])
        span = max(stop for _, stop in intervals[worker]) - first
        per_worker[worker] = busy / span if span > 0 else 1.0
        total_busy += busy
        total_span += span
        total_to_end += max(end - first, span)

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
    values = list(per_worker.values())
    return {
        "efficiency": total_busy / total_span if total_span > 0 else (1.0 if values else 0.0),
        "efficiency_to_end": total_busy / total_to_end if total_to_end > 0 else (1.0 if values else 0.0),
        "per_worker": per_worker,
        "worker_min": min(values) if values else 0.0,
        "worker_median": float(statistics.median(values)) if values else 0.0,
        "busy": total_busy,
        "span": total_span,
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
