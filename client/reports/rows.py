"""The rows of a run record, as the workers report them: one :class:`TaskRecord` per task
(which worker ran the chunk, when, and from where it read) and one :class:`MetricSample`
per periodic sample of a worker's figures. Their fields are made from the tables of
:mod:`broker.wire.messages` (:data:`~broker.wire.messages.RUN_COUNTERS`,
:data:`~broker.wire.messages.WORKER_METRICS`), so a counter a worker starts to send is a column
here with no other change. The failed attempts before a task's row are
:class:`~client.reports.attempts.AttemptRecord`; the whole record, its summary and its
JSON file (the format is described there) are :class:`~client.reports.record.RunRecord`.

    >>> t = TaskRecord.from_meta({"index": 0, "host": "n1", "pid": 7, "start": 1, "stop": 3,
    ...                           "bytes_file": 10, "error": "Traceback ...\\nOSError: gone"})
    >>> t.worker, t.duration, t.error, t.source
    ('n1-7', 2.0, 'OSError: gone', 'error')
"""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Mapping

from ...broker.wire.messages import RUN_COUNTERS, WORKER_METRICS

MAX_ERROR_CHARS = 200


def short_error(error: Any) -> str | None:
    """Reduce an error (exception, traceback text or message) to one short line.

    A full traceback is reduced to its last non-empty line, which is where Python
    puts ``ExceptionType: message``.

    Example::

        >>> short_error("Traceback (most recent call last):\\n  ...\\nKeyError: 'Muon_pt'\\n")
        "KeyError: 'Muon_pt'"
        >>> short_error(ValueError("bad chunk")), short_error(None)
        ('ValueError: bad chunk', None)
    """
    if error is None or error is False or error == "":
        return None
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        text = lines[-1] if lines else str(error)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return text


def _number(value: Any, default: float | int | None, kind: type, name: str = "value") -> Any:
    """``kind(value)``, ``default`` when missing (None); else a ValueError naming ``name``."""
    try:
        return default if value is None else kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"field {name!r} is {value!r}, not a number") from None


class _TaskRecordMethods:
    """What :class:`TaskRecord` does; its fields are made below from the worker's
    result metadata (one int per :data:`~broker.wire.messages.RUN_COUNTERS`)."""

    @property
    def duration(self) -> float:
        """Seconds the task held its worker (never negative)."""
        return max(0.0, self.stop - self.start)

    @property
    def source(self) -> str:
        """Where the task read from: ``"error"``, ``"hit"`` (all bytes from the worker's
        memory), ``"disk"`` (from the node's disk tier, none from the file), ``"partial"``
        (some from a cache, some from the file), ``"miss"`` (from the file) or
        ``"compute"`` (read nothing through a chunk)."""
        if self.error:
            return "error"
        cached = self.bytes_cache + self.bytes_disk
        if cached and self.bytes_file:
            return "partial"
        if self.bytes_disk:
            return "disk"
        if self.bytes_cache:
            return "hit"
        return "miss" if self.bytes_file else "compute"

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> "TaskRecord":
        """Build from a worker's result metadata; unknown keys are ignored.

        ``worker`` defaults to ``"<host>-<pid>"``; ``index``, ``start`` and ``stop`` are
        required, everything else has a default.

        Example::

            >>> TaskRecord.from_meta({"index": 1, "host": "n1", "pid": 7, "start": 0, "stop": 1}).worker
            'n1-7'
        """
        missing = [key for key in ("index", "start", "stop") if meta.get(key) is None]
        if missing:
            raise ValueError(
                f"task metadata lacks {', '.join(missing)}: every worker result must say "
                f"which chunk it ran and when (got keys {sorted(meta)})"
            )
        host = str(meta.get("host") or "")
        pid = _number(meta.get("pid"), 0, int, "pid")
        worker = meta.get("worker") or (f"{host}-{pid}" if host else f"pid-{pid}")
        return cls(
            index=_number(meta["index"], 0, int, "index"),
            worker=str(worker),
            start=_number(meta["start"], 0.0, float, "start"),
            stop=_number(meta["stop"], 0.0, float, "stop"),
            host=host,
            pid=pid,
            error=short_error(meta.get("error")),
            retries=_number(meta.get("retries"), 0, int, "retries"),
            events=_number(meta.get("events"), None, int, "events"),
            **{name: _number(meta.get(name), 0, int, name) for name in RUN_COUNTERS},
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict of this task (see the module docstring)."""
        return dataclasses.asdict(self)


TaskRecord = dataclasses.make_dataclass(
    "TaskRecord",
    [("index", int), ("worker", str), ("start", float), ("stop", float),
     ("host", str, field(default="")), ("pid", int, field(default=0)),
     *[(name, int, field(default=0)) for name in RUN_COUNTERS],
     ("error", "str | None", field(default=None)), ("retries", int, field(default=0)),
     ("events", "int | None", field(default=None))],
    bases=(_TaskRecordMethods,),
    namespace={"__doc__": """One chunk as run by one worker: when, where, and what it read.

    ``start``/``stop`` are unix times on the worker's clock; ``bytes_cache``,
    ``bytes_disk`` and ``bytes_file`` split what the task read between the worker's
    memory, the node's disk tier and the ROOT file (the counts are those of
    :data:`broker.wire.messages.RUN_COUNTERS`).

    Example::

        >>> t = TaskRecord(index=3, worker="n1-7", start=10.0, stop=12.5, bytes_cache=40)
        >>> t.duration, t.source
        (2.5, 'hit')
    """})
TaskRecord.__module__ = __name__


class _MetricSampleMethods:
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MetricSample":
        """Build from a dict; unknown keys are ignored, missing counters are 0."""
        if data.get("t") is None or not data.get("worker"):
            raise ValueError(f"a metric sample needs 't' and 'worker' (got keys {sorted(data)})")
        return cls(t=_number(data["t"], 0.0, float, "t"), worker=str(data["worker"]),
                   **{name: _number(data.get(name), kind(0), kind, name) for name, kind in WORKER_METRICS.items()})

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict of this sample."""
        return dataclasses.asdict(self)


MetricSample = dataclasses.make_dataclass(
    "MetricSample",
    [("t", float), ("worker", str), *[(name, kind, field(default=kind(0))) for name, kind in WORKER_METRICS.items()]],
    bases=(_MetricSampleMethods,),
    namespace={"__doc__": """One periodic sample of a worker's figures (:data:`broker.wire.messages.WORKER_METRICS`).

    Example::

        >>> MetricSample.from_dict({"t": 5.0, "worker": "n1-7", "cpu": 97, "node_cpu": 50}).node_cpu
        50.0
    """})
MetricSample.__module__ = __name__
