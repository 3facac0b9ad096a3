"""What goes into a map's state and what comes out of it (:mod:`client.engine.state`).

*Events* are what happened, as plain data: a result arrived, a worker faulted, a partial
came in, the workers said what they run, the audit found tasks missing, upkeep decided a
task is a straggler, the map was cancelled. Each carries the time it happened (``now``,
seconds since the epoch): the state reads no clock.

*Instructions* are what the state asks its driver (:class:`client.engine.maprun.MapRun`)
to do with Redis: queue these tasks (and upload the function first), take a worker's
queue back, report a message, sign the map's end. Results for the caller wait in the
state's outbox until the driver takes them (:meth:`MapState.take`).

    >>> Enqueue([3, 4], route=False)
    Enqueue(indices=[3, 4], route=False, fair=False, upload=False)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Union

from ...broker.wire.messages import Fault, ResultMeta, TaskError, WorkerStatus
from ..errors import RemoteError

_event = dataclasses.dataclass(slots=True)     # not frozen: a frozen one costs 2x to build, per result


# -- events: what happened --------------------------------------------------------------
@_event
class Result:
    """Task ``index`` returned ``value``."""

    index: int
    value: Any
    meta: ResultMeta
    now: float


@_event
class Results:
    """Several tasks returned, in arrival order: (index, value, meta) each. One event for a
    fetch of results (a million-task map's client handles one per ~1,000 results, not one
    per result); the same moves as that many :class:`Result` events."""

    results: list
    now: float

    @property
    def indices(self) -> tuple:
        return tuple(r[0] for r in self.results)


@_event
class Raised:
    """Task ``index``'s function raised (``info``: its type, message, traceback)."""

    index: int
    info: TaskError
    meta: ResultMeta
    now: float


@_event
class Undecodable:
    """Task ``index``'s result (or error) did not unpickle here; ``error`` says why."""

    index: int
    error: RemoteError
    meta: ResultMeta | None
    now: float


@_event
class Faulted:
    """A worker could not run task ``index`` (:class:`~broker.wire.messages.FaultKind`)."""

    index: int
    fault: Fault
    now: float


@_event
class Partial:
    """A verified partial: the folded results of ``indices`` (one meta each). ``load()``
    unpickles the merged value; it is called only for a partial that is accepted."""

    indices: list
    metas: list
    load: Callable[[], Any]
    now: float


@_event
class Unverifiable:
    """A frame of task ``index`` that failed verification (a worker holding another key
    sent back its refusal); ``error`` is why."""

    index: int
    error: str
    now: float


@_event
class Observed:
    """The live workers' statuses (which of our tasks run where, which key they hold)."""

    statuses: list
    now: float


@_event
class Audited:
    """The tasks of the map the broker holds somewhere (a queue, a lease, a result)."""

    in_broker: set
    now: float


@_event
class Backup:
    """Upkeep found these tasks slow (a straggler, or over ``task_timeout``): send a second
    copy (first result wins). ``timed``: the task_timeout clock starts for them."""

    indices: tuple
    why: str
    now: float
    timed: bool = False


@_event
class GiveUp:
    """Upkeep gave up on task ``index`` (its process died every time; over task_timeout)."""

    index: int
    error: RemoteError
    now: float


@_event
class MapVanished:
    """The broker lost the map and its function (it restarted)."""

    now: float


@_event
class Unclaimed:
    """``worker`` looks live but took none of its queue: take it back, route nothing to it."""

    worker: str
    why: str
    now: float


@_event
class Tick:
    """Time passed: retries whose back-off ended are sent."""

    now: float


@_event
class Cancel:
    """The map is cancelled (by this client, Ctrl-C, or ``by`` another shell)."""

    now: float
    by: str | None = None


Event = Union[Result, Raised, Undecodable, Faulted, Partial, Unverifiable, Observed, Audited, Backup,
              GiveUp, MapVanished, Unclaimed, Tick, Cancel]


# -- instructions: what the driver does -------------------------------------------------
@_event
class Enqueue:
    """Queue these tasks (to the workers that hold their chunks when ``route``; behind the
    map's backlog when ``fair``; after uploading the function again when ``upload``)."""

    indices: list
    route: bool = True
    fair: bool = False
    upload: bool = False


@_event
class TakeBack:
    """Move ``worker``'s own queue to the shared queue."""

    worker: str


@_event
class Report:
    """Tell the analyst (a log line) and, with ``broker``, the broker's report list."""

    message: str
    level: str = "info"
    broker: bool = False


@_event
class NoteError:
    """A task failed: the dashboard's feed shows its error."""

    index: int
    error: RemoteError


@_event
class CancelMap:
    """Remove the map's queued tasks and keys from the broker."""

    by: str | None = None


@_event
class Finish:
    """Every task is answered: the map ends (sign its end, read its lost runs)."""


Instruction = Union[Enqueue, TakeBack, Report, NoteError, CancelMap, Finish]
WorkerStatuses = list[WorkerStatus]
