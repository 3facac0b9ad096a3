"""What each finished task of a map cost and where it ran, kept in flat columns.

A map of a million tasks keeps a million of these, so they are numpy columns (about
60 bytes a task) rather than a dict per task; the run record
(:func:`client.api.record_of`) and the straggler check read them back.

Example::

    >>> from rhtc.broker.protocol import ResultMeta
    >>> led = Ledger(4)
    >>> led.add(2, ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=3.0), received=3.5)
    >>> led.add(0, None, error="WorkerLost: died", received=4.0)
    >>> [(m["index"], m.get("worker"), m["error"]) for m in led.metas()]
    [(2, 'w1', None), (0, None, 'WorkerLost: died')]
    >>> led.durations().tolist()
    [2.0]
"""
from __future__ import annotations

import numpy as np

from rhtc.broker.protocol import ResultMeta

_NONE = -1


class Ledger:
    """Per-task outcomes of one map, in the order the results arrived."""

    def __init__(self, n: int):
        self.n = n
        self._order = np.empty(n, dtype=np.int64)     # task index of the k-th outcome
        self._k = 0
        self._worker = np.full(n, _NONE, dtype=np.int32)
        self._host = np.full(n, _NONE, dtype=np.int32)
        self._pid = np.zeros(n, dtype=np.int64)
        self._times = np.full((n, 3), np.nan)            # start, stop, received
        self._bytes = np.zeros((n, 2), dtype=np.int64)   # from cache, from file
        self._events = np.full(n, _NONE, dtype=np.int64)
        self._retries = np.zeros(n, dtype=np.int16)
        self._backup = np.zeros(n, dtype=bool)
        self._errors: dict[int, str] = {}
        self._names: list[str] = []
        self._name_ids: dict[str, int] = {}

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
        if self._k >= self.n:
            return
        self._order[self._k] = index
        self._k += 1
        if meta is not None:
            self._worker[index] = self._name(meta.worker)
            self._host[index] = self._name(meta.host)
            self._pid[index] = meta.pid
            self._times[index, 0] = meta.start
            self._times[index, 1] = meta.stop
            self._bytes[index] = (meta.bytes_cache, meta.bytes_file)
            if meta.events is not None:
                self._events[index] = meta.events
        if received is not None:
            self._times[index, 2] = received
        self._retries[index] = retries
        self._backup[index] = backup
        if error is not None:
            self._errors[index] = error[:200]

    def __len__(self) -> int:
        return self._k

    def durations(self, last: int = 2000) -> np.ndarray:
        """Run times of the latest ``last`` tasks that reported a start and a stop."""
        idx = self._order[max(0, self._k - last):self._k]
        d = self._times[idx, 1] - self._times[idx, 0]
        return d[~np.isnan(d)]

    def last_received(self) -> float | None:
        """When the latest result arrived (unix time)."""
        got = self._times[self._order[:self._k], 2]
        got = got[~np.isnan(got)]
        return float(got.max()) if got.size else None

    def metas(self):
        """Each outcome as the dict a worker's metadata reads as (plus ``index``, ``error``,
        ``retries``, ``received``, ``backup``), in the order they arrived."""
        names = self._names
        for index in self._order[:self._k].tolist():
            d: dict = {"index": index, "error": self._errors.get(index),
                       "retries": int(self._retries[index]), "backup": bool(self._backup[index])}
            start, stop, received = self._times[index].tolist()
            if received == received:
                d["received"] = received
            w = int(self._worker[index])
            if w != _NONE:
                d["worker"] = names[w]
            if start == start and stop == stop:
                h = int(self._host[index])
                d.update(start=start, stop=stop, host=names[h] if h != _NONE else "",
                         pid=int(self._pid[index]), bytes_cache=int(self._bytes[index, 0]),
                         bytes_file=int(self._bytes[index, 1]))
                d["bytes_read"] = d["bytes_cache"] + d["bytes_file"]
                ev = int(self._events[index])
                if ev != _NONE:
                    d["events"] = ev
            yield d
