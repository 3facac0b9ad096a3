"""What happened during one map: which worker ran which chunk, when, and from where it read.

A :class:`RunRecord` is the raw material of the timeline plot (``client.reports.timeline``)
and of ``rhtc timeline``. ``remote_map`` fills one as results come back, from the
metadata every worker attaches to its result, and can save it as JSON::

    {"version": 1, "map_id": "ab12...", "function": "dimuon",
     "start": 1700000000.0,            # unix time the map was submitted
     "end": 1700000042.5,              # unix time the last result was received
     "n_tasks": 800,                   # chunks in the map (finished or not)
     "tasks": [{"index": 0, "worker": "node1-1234", "host": "node1", "pid": 1234,
                "start": 1700000001.2, "stop": 1700000003.9,
                "bytes_cache": 0, "bytes_disk": 0, "bytes_file": 123456, "files_opened": 1,
                "error": null, "retries": 0, "events": 500000}, ...],
     "attempts": [{"index": 7, "worker": "node2-99", "start": 1700000002.0, "stop": 1700000002.4,
                   "error": "OSError: flaky", "outcome": "retried", "backoff": 1.1}, ...],
     "metrics": [{"t": 1700000002.0, "worker": "node1-1234", "cpu": 97.0,
                  "rss": 123456789, "cache_bytes": 0, "cache_entries": 0,
                  "bytes_read": 0, "net_recv": 0, "net_sent": 0, "disk_read": 0,
                  "node_cpu": 35.0, ...}, ...],
     "reads": {"files": [["/data/a.root", "Events", "uuid..."]],      # what the tasks read
               "branch_lists": [[["Muon_pt", "ak"], ["nMuon", "ak"]]],
               "tasks": {"index": [0, ...], "file": [0, ...], "start": [0, ...],
                         "stop": [100000, ...], "branches": [0, ...]},
               "unlisted": [], "unresolved": []}}

``error`` is ``null`` or a one-line summary such as ``"ValueError: bad branch"``;
``events`` is ``null`` when the function does not report how many events it saw;
``files_opened`` counts the files the task had to open (0 when the worker had them
open already; records written before it existed read as 0);
``attempts`` are the failed attempts before each task's own row (:mod:`client.reports.attempts`:
retried after an error, or lost with the process that ran them; records written before
it existed have none); ``metrics`` may be empty; ``reads`` says which branches of which
chunks the tasks read (:class:`~client.reports.reads.ChunkReads`, what ``rhtc warm`` reads
again; records written before it existed have none).

The rows are :class:`~client.reports.rows.TaskRecord` and
:class:`~client.reports.rows.MetricSample` (:mod:`client.reports.rows`, which reads them
from what the workers report); this module is the record they make up, its summary and
its file.

Example::

    >>> from rhtc.client.reports.record import RunRecord
    >>> rec = RunRecord(map_id="ab12", function="dimuon", start=0.0, n_tasks=2)
    >>> rec.add_task({"index": 0, "worker": "n1-7", "start": 0.5, "stop": 2.0,
    ...               "bytes_file": 100, "events": 1000})
    >>> rec.add_task({"index": 1, "host": "n2", "pid": 8, "start": 1.0, "stop": 3.0,
    ...               "bytes_cache": 100, "events": 1000, "shiny": "ignored"})
    >>> rec.end, rec.tasks[1].worker
    (3.0, 'n2-8')
    >>> RunRecord.from_dict(rec.to_dict()) == rec
    True
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .attempts import AttemptRecord
from .efficiency import efficiency
from .reads import ChunkReads
from .rows import MetricSample, TaskRecord, _number, short_error  # noqa: F401 (short_error: public here too)

FORMAT_VERSION = 1


def _entry(build, item: Any, where: str, i: int):
    """``build(item)`` for entry ``i`` of the record's list ``where``; errors say which."""
    try:
        return build(item)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"{where}[{i}]: {exc}") from None


@dataclass
class RunRecord:
    """Everything the timeline needs to know about one map run.

    ``start`` is when the map was submitted and ``end`` when its last result was
    received (unix times). ``n_tasks`` is the number of chunks in the map, which may
    exceed ``len(tasks)`` if the map was abandoned.

    Example::

        >>> rec = RunRecord(map_id="m1", function="count", start=0.0, end=4.0, n_tasks=1)
        >>> rec.add_task({"index": 0, "worker": "w", "start": 0.0, "stop": 2.0})
        >>> s = rec.summary()
        >>> s["efficiency_wall"], s["efficiency"], s["efficiency_to_end"]
        (0.5, 1.0, 0.5)
    """

    map_id: str = ""
    function: str = ""
    start: float = 0.0
    end: float = 0.0
    n_tasks: int = 0
    tasks: list[TaskRecord] = field(default_factory=list)
    metrics: list[MetricSample] = field(default_factory=list)
    attempts: list[AttemptRecord] = field(default_factory=list)
    reads: ChunkReads | None = None
    version: int = FORMAT_VERSION
    _arguments: Any = field(default=None, init=False, repr=False, compare=False)
    _positions: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def add_task(self, meta: Mapping[str, Any], received: float | None = None) -> None:
        """Record one finished task from the metadata its worker sent with the result.

        Unknown keys are ignored and missing optional ones get defaults (see
        :meth:`TaskRecord.from_meta`). A second result for the same chunk index
        replaces the first. ``end`` moves to ``received`` (when the client got the
        result) or, without it, to the task's ``stop`` if that is later.

        Example::

            >>> rec = RunRecord(start=0.0)
            >>> rec.add_task({"index": 0, "worker": "w", "start": 1, "stop": 2}, received=2.5)
            >>> len(rec.tasks), rec.end, rec.n_tasks
            (1, 2.5, 1)
        """
        task = TaskRecord.from_meta(meta)
        if len(self._positions) != len(self.tasks):  # tasks were set or edited directly
            self._positions = {t.index: i for i, t in enumerate(self.tasks)}
        position = self._positions.get(task.index)
        if position is not None and self.tasks[position].index == task.index:
            self.tasks[position] = task
        else:
            self._positions[task.index] = len(self.tasks)
            self.tasks.append(task)
        self.end = max(self.end, task.stop if received is None else float(received))
        self.n_tasks = max(self.n_tasks, len(self.tasks))
        text = meta.get("reads")
        if text:
            if self.reads is None:
                self.reads = ChunkReads()
            args = self._arguments
            self.reads.add(task.index, str(text), args[task.index] if args is not None
                           and 0 <= task.index < len(args) else None)

    def use_arguments(self, args) -> None:
        """The map's arguments: what a task read of its own argument's chunk is recorded
        as that chunk (see :mod:`broker.wire.reads`); what the tasks read is recorded from now on
        (``reads`` is no longer None, even if they read nothing through a chunk)."""
        self._arguments = args
        if self.reads is None:
            self.reads = ChunkReads()

    def add_metric(self, sample: Mapping[str, Any]) -> None:
        """Record one worker metrics sample (keys as in the module docstring).

        Example::

            >>> rec = RunRecord()
            >>> rec.add_metric({"t": 1.0, "worker": "w", "cpu": 50})
            >>> rec.metrics[0].cpu
            50.0
        """
        self.metrics.append(MetricSample.from_dict(sample))

    def add_attempt(self, meta: Mapping[str, Any]) -> None:
        """Record one failed attempt (keys as in :class:`~client.reports.attempts.AttemptRecord`)."""
        self.attempts.append(AttemptRecord.from_meta(meta))

    @property
    def workers(self) -> list[str]:
        """Names of the workers that ran at least one task or attempt, in order of first start."""
        first: dict[str, float] = {}
        runs = [(t.worker, t.start) for t in self.tasks] + [(a.worker, a.start) for a in self.attempts if a.timed]
        for worker, start in runs:
            first[worker] = min(first.get(worker, start), start)
        return sorted(first, key=lambda name: (first[name], name))

    def summary(self) -> dict[str, Any]:
        """The headline numbers of the run: counts plus :func:`client.reports.efficiency.efficiency`.

        Example::

            >>> rec = RunRecord(start=0.0, end=10.0, n_tasks=1)
            >>> rec.add_task({"index": 0, "worker": "w", "start": 0, "stop": 5, "events": 100})
            >>> s = rec.summary()
            >>> s["n_done"], s["efficiency_to_end"], s["events_per_s"]
            (1, 0.5, 10.0)
        """
        numbers = efficiency(self)
        return {
            "map_id": self.map_id,
            "function": self.function,
            "n_tasks": self.n_tasks,
            "n_done": len(self.tasks),
            "n_workers": len(numbers["per_worker"]),
            **numbers,
        }

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict of the whole record (format in the module docstring)."""
        return {
            "version": self.version,
            "map_id": self.map_id,
            "function": self.function,
            "start": self.start,
            "end": self.end,
            "n_tasks": self.n_tasks,
            "tasks": [task.to_dict() for task in self.tasks],
            "metrics": [sample.to_dict() for sample in self.metrics],
            "attempts": [attempt.to_dict() for attempt in self.attempts],
            **({"reads": self.reads.to_dict()} if self.reads is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunRecord":
        """Rebuild a record from :meth:`to_dict` output (or hand-written JSON).

        Example::

            >>> RunRecord.from_dict({"version": 1, "tasks": []}).n_tasks
            0
        """
        version = int(data.get("version", FORMAT_VERSION))
        if version > FORMAT_VERSION:
            raise ValueError(
                f"run record has format version {version}, this redis-htcondor reads up to "
                f"version {FORMAT_VERSION}: upgrade redis-htcondor to read it"
            )
        tasks = [_entry(TaskRecord.from_meta, task, "tasks", i) for i, task in enumerate(data.get("tasks") or [])]
        metrics = [_entry(MetricSample.from_dict, sample, "metrics", i)
                   for i, sample in enumerate(data.get("metrics") or [])]
        attempts = [_entry(AttemptRecord.from_meta, a, "attempts", i)
                    for i, a in enumerate(data.get("attempts") or [])]
        start = data.get("start")
        end = data.get("end")
        reads = data.get("reads")
        if reads is not None and not isinstance(reads, dict):
            raise ValueError(f"reads is {type(reads).__name__}, not an object")
        reads = ChunkReads.from_dict(reads) if reads is not None else None
        return cls(
            map_id=str(data.get("map_id") or ""),
            function=str(data.get("function") or ""),
            start=_number(start, min((t.start for t in tasks), default=0.0), float, "start"),
            end=_number(end, max((t.stop for t in tasks), default=0.0), float, "end"),
            n_tasks=_number(data.get("n_tasks") or len(tasks), 0, int, "n_tasks"),
            tasks=tasks,
            metrics=metrics,
            attempts=attempts,
            reads=reads,
            version=FORMAT_VERSION,
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the record as JSON (atomically: a reader never sees half a file).

        Example::

            >>> import tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "run.json")
            >>> RunRecord(map_id="m1").save(path).name
            'run.json'
            >>> RunRecord.load(path).map_id
            'm1'
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(self.to_dict(), out, separators=(",", ":"))
                out.write("\n")
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "RunRecord":
        """Read a record written by :meth:`save` (see its example)."""
        with open(path) as inp:
            try:
                data = json.load(inp)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} is not a run record (invalid JSON: {exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} is not a run record (expected a JSON object)")
        try:
            return cls.from_dict(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}; fix or remove that value (a record written by "
                             "MapHandle.record().save() has none such)") from None
