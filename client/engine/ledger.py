"""What each finished task of a map cost and where it ran, kept in flat columns.

A map of a million tasks keeps a million of these, so they are numpy columns (about
60 bytes a task) rather than a dict per task; the run record
(:func:`client.handle.record_of`) and the straggler check read them back.

Example::

    >>> from rhtc.broker.wire.messages import ResultMeta
    >>> led = Ledger(4)
    >>> led.add(2, ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=3.0), received=3.5)
    >>> led.add(0, None, error="WorkerLost: died", received=4.0)
    >>> [(m["index"], m.get("worker"), m["error"]) for m in led.metas()]
    [(2, 'w1', None), (0, None, 'WorkerLost: died')]
    >>> led.durations().tolist()
    [2.0]
    >>> led.feed_rows()                    # the dashboard's records (timed rows) and sums
    ([[2, 'w1', 1.0, 3.0, 0, 0, None, 0]], 0, 0, 0)
"""
from __future__ import annotations

from array import array

import numpy as np

import time

from ...broker.errors import ConnectionProblem
from ...broker.wire.messages import BYTES_SOURCES, RUN_COUNTERS, ResultMeta, parse_lost_run

_NONE = -1
_NAN = float("nan")
#: Failed attempts kept per map (each task has at most a few: retries, max_attempts).
MAX_ATTEMPTS_KEPT = 100_000


class Ledger:
    """Per-task outcomes of one map, in the order the results arrived (append-only
    columns: a few attribute appends per result, about 70 bytes a task)."""

    def __init__(self, n: int):
        self.n = n
        self._index = array("q")
        self._worker = array("i")
        self._host = array("i")
        self._pid = array("q")
        self._start = array("d")
        self._stop = array("d")
        self._received = array("d")
        self._counts = {name: array("q") for name in RUN_COUNTERS}    # bytes_cache, bytes_file...
        self._count_items = tuple(self._counts.items())
        self._events = array("q")
        self._reads = array("i")                # what it read (broker/wire/reads.py), interned with the names
        self._retries = array("h")
        self._backup = bytearray()
        self._errors: dict[int, str] = {}
        self._names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.attempts: list[dict] = []          # failed attempts: retried, or lost with their process
        self._histories_read: set[int] = set()

    def _name(self, name: str | None) -> int:
        if name is None:
            return _NONE
        i = self._name_ids.get(name)
        if i is None:
            i = self._name_ids[name] = len(self._names)
            self._names.append(name)
        return i

    def add(self, index: int, meta: ResultMeta | None, *, error: str | None = None,
            retries: int = 0, received: float | None = None, backup: bool = False) -> None:
        """Record task ``index``'s outcome (at most once per task: the caller's state
        table guarantees it)."""
        self._index.append(index)
        if meta is not None:
            ids = self._name_ids               # (inlined _name: once per result)
            w, h = ids.get(meta.worker), ids.get(meta.host)
            self._worker.append(self._name(meta.worker) if w is None else w)
            self._host.append(self._name(meta.host) if h is None else h)
            self._pid.append(meta.pid or 0)
            self._start.append(meta.start)
            self._stop.append(meta.stop)
            d = meta.__dict__
            for name, col in self._count_items:
                col.append(d[name] or 0)
            self._events.append(_NONE if meta.events is None else meta.events)
            self._reads.append(self._name(meta.reads) if meta.reads else _NONE)
        else:
            for col, v in ((self._worker, _NONE), (self._host, _NONE), (self._pid, 0), (self._start, _NAN),
                           (self._stop, _NAN), (self._events, _NONE), (self._reads, _NONE)):
                col.append(v)
            for col in self._counts.values():
                col.append(0)
        self._received.append(_NAN if received is None else received)
        self._retries.append(retries)
        self._backup.append(backup)
        if error is not None:
            self._errors[index] = error[:200]

    def attempt(self, index: int, meta: ResultMeta | None, error: str, outcome: str,
                backoff: float = 0.0, worker: str | None = None) -> None:
        """Note a failed attempt of task ``index``: ``outcome`` ``"retried"`` (its function
        raised and it runs again after ``backoff`` s) or ``"lost"`` (the process running it
        died). The task's own row is added by :meth:`add` when it ends."""
        if len(self.attempts) >= MAX_ATTEMPTS_KEPT:
            return
        row = {"index": index, "error": error[:200], "outcome": outcome, "backoff": backoff, "worker": worker}
        if meta is not None:
            row.update(worker=meta.worker, host=meta.host, pid=meta.pid, start=meta.start, stop=meta.stop)
        self.attempts.append(row)

    def lost_runs(self, index: int, history: str, final: bool = False) -> ResultMeta | None:
        """Note the runs of task ``index`` that died with their process, from its history
        (one line per run, see :func:`broker.wire.messages.lost_run_line`). ``final``: the task
        failed with them (WorkerLost): its last run is returned as the task's own row."""
        if index in self._histories_read:
            return None
        self._histories_read.add(index)
        runs = [parse_lost_run(line) for line in history.splitlines() if line.strip()]
        last = runs.pop() if final and runs else None
        for run in runs:           # a run its line gives no times for is counted, not drawn
            self.attempt(index, _run_meta(run) if "start" in run else None, run["why"], "lost",
                         worker=run["worker"])
        return _run_meta(last) if last else None

    def read_lost_runs(self, storage, map_id: str) -> None:
        """Every run of the map that died with its process, from the broker's histories
        (read once, when the map ends, before its keys go)."""
        try:
            self.note_lost_runs(storage.maps.attempt_histories(map_id))
        except ConnectionProblem:
            pass            # the record lacks them; the results are whole

    def note_lost_runs(self, histories: dict[int, str]) -> None:
        """:meth:`lost_runs` of every task in ``histories`` (index -> its history, as the
        broker kept it), as they come with the reply of the write that ended the map."""
        for index, history in histories.items():
            self.lost_runs(index, history)

    def __len__(self) -> int:
        return len(self._index)

    def durations(self, last: int = 2000) -> np.ndarray:
        """Run times of the latest ``last`` tasks that reported a start and a stop."""
        k = len(self._index)
        d = np.frombuffer(self._stop, dtype=float)[max(0, k - last):] - \
            np.frombuffer(self._start, dtype=float)[max(0, k - last):]
        return d[~np.isnan(d)]

    def last_received(self) -> float | None:
        """When the latest result arrived (unix time)."""
        got = np.frombuffer(self._received, dtype=float)
        got = got[~np.isnan(got)]
        return float(got.max()) if got.size else None

    def feed_rows(self, start: int = 0, rows: bool = True) -> tuple[list[list], int, int, int]:
        """The rows from the ``start``-th on as the dashboard's task records (in the order
        of :data:`broker.feed.TASK_FIELDS`; rows without times are left out; none without
        ``rows``), and the sums of their events, cache bytes and file bytes: :meth:`metas`
        without a dict per row."""
        names, errors, end = self._names, self._errors, len(self._index)
        cache, files = self._counts["bytes_cache"][start:end], self._counts["bytes_file"][start:end]
        events = self._events[start:end]
        sums = sum(ev for ev in events if ev != _NONE), sum(cache), sum(files)
        if not rows:
            return [], *sums
        rows = []
        for index, w, t0, t1, c, f, ev in zip(self._index[start:end], self._worker[start:end],
                                               self._start[start:end], self._stop[start:end], cache, files, events):
            if t0 == t0 and t1 == t1:
                rows.append([index, names[w] if w != _NONE else None, round(t0, 3), round(t1, 3), c, f,
                             None if ev == _NONE else ev, int(bool(errors.get(index)))])
        return rows, *sums

    def metas(self, start: int = 0):
        """Each outcome as the dict a worker's metadata reads as (plus ``index``, ``error``,
        ``retries``, ``received``, ``backup``), in the order they arrived (from the
        ``start``-th on)."""
        names = self._names
        for k in range(start, len(self._index)):
            index = self._index[k]
            d: dict = {"index": index, "error": self._errors.get(index),
                       "retries": self._retries[k], "backup": bool(self._backup[k])}
            start, stop, received = self._start[k], self._stop[k], self._received[k]
            if received == received:
                d["received"] = received
            w = self._worker[k]
            if w != _NONE:
                d["worker"] = names[w]
            if start == start and stop == stop:
                h = self._host[k]
                d.update(start=start, stop=stop, host=names[h] if h != _NONE else "", pid=self._pid[k])
                d.update((name, col[k]) for name, col in self._counts.items())
                d["bytes_read"] = sum(d[name] for name in BYTES_SOURCES)
                if self._events[k] != _NONE:
                    d["events"] = self._events[k]
                if self._reads[k] != _NONE:
                    d["reads"] = names[self._reads[k]]
            yield d


def _run_meta(run: dict) -> ResultMeta | None:
    """A lost run as the metadata of a result (times of the run when its line says them)."""
    if "start" not in run:
        now = time.time()
        return ResultMeta(worker=run["worker"], host="", pid=0, start=now, stop=now)
    return ResultMeta(worker=run["worker"], host="", pid=0, start=run["start"], stop=run["stop"])
