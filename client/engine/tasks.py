"""Where each task of a map stands, on the client: one named state per task, and the one
table of the moves between states.

States (``TaskState``)::

    QUEUED     sent to the broker, no answer yet (in a queue, or leased by a worker we
               have not seen running it)
    LEASED     a worker's heartbeat says it is running it
    REFUSED    a worker refused its frame (wrong key?); provisional: a genuine result
               may still come from another worker, so it counts as answered
    BACKOFF    its function raised and it will run again after a pause (held on the
               client, in no Redis key; still owed an answer)
    DONE       its result arrived (final)
    FAILED     its error arrived, or it was given up on (final)
    CANCELLED  the map was cancelled before it finished (final)

Every move goes through :meth:`TaskTable.move`, which allows exactly the pairs in
:data:`TRANSITIONS` (dask's ``TaskState`` transitions and rq's ``JobStatus`` are the
models). A move that the table does not allow changes nothing and returns False; the
map's state (:class:`client.engine.state.MapState`), the table's only writer, filters
what it expects (a late duplicate of a finished task) before it moves a task and raises
:class:`InvalidTransition`, with the task's story, on any other refusal.

The broker's side of the same states (which Redis key holds a task in each, and who
moves it) is the table in :mod:`broker.wire.keys`; ``REFUSED`` exists only on the client.

Keeping count per state makes "is the map done?" O(1) per result, whatever the size
of the map: the table never walks its tasks except when asked for a list of them.

Example::

    >>> t = TaskTable(3)
    >>> t.move(0, TaskState.DONE), t.move(0, TaskState.DONE)   # a duplicate is refused
    (True, False)
    >>> t.move(1, TaskState.REFUSED), t.unanswered, t.finished
    (True, 1, False)
    >>> t.move(2, TaskState.FAILED), t.finished, t.indices(TaskState.REFUSED)
    (True, True, [1])
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Iterable

import numpy as np

from ...broker.wire.messages import ResultMeta
from rhtc.errors import RhtcError

from ..errors import RemoteError, describe


class InvalidTransition(RhtcError, RuntimeError):
    """A map tried a move of a task that :data:`TRANSITIONS` does not allow: a bug in
    rhtc (please report it with the message, which tells the task's story)."""


class TaskState(enum.IntEnum):
    """The state of one task of a map (see the module docstring)."""

    QUEUED = 0
    LEASED = 1
    REFUSED = 2
    BACKOFF = 3
    DONE = 4
    FAILED = 5
    CANCELLED = 6


Q, L, R, B, D, F, C = TaskState

#: Every allowed move, with why it happens. Nothing else changes a task's state.
TRANSITIONS: dict[tuple[TaskState, TaskState], str] = {
    (Q, L): "a worker's heartbeat shows it running the task",
    (L, Q): "requeued: its worker died, or the task vanished, or it is retried",
    (Q, Q): "requeued again (retry, audit, a restarted broker)",
    (L, L): "seen running again (a backup copy, a steal)",
    (Q, D): "its result arrived", (L, D): "its result arrived",
    (R, D): "a genuine result beat an earlier refusal",
    (Q, F): "its error arrived, or it was given up on", (L, F): "its error arrived, or it ran over task_timeout",
    (R, F): "refused, and no genuine result came before the rest of the map finished",
    (Q, R): "a worker refused its frame", (L, R): "a worker refused its frame",
    (R, Q): "requeued after a refusal (the map was sent again)",
    (Q, B): "its function raised: it runs again after the back-off",
    (L, B): "its function raised: it runs again after the back-off",
    (R, B): "a genuine copy's function raised after a refusal: it runs again after the back-off",
    (B, Q): "the back-off passed: sent again",
    (B, D): "a backup copy's result arrived", (B, F): "given up on during its back-off",
    (Q, C): "the map was cancelled", (L, C): "the map was cancelled", (R, C): "the map was cancelled",
    (B, C): "the map was cancelled",
}

# the same facts as plain ints, for the per-result path (enum lookups cost a microsecond)
_ALLOWED = frozenset((int(a), int(b)) for a, b in TRANSITIONS)
_LEASED, _DONE = int(L), int(D)


@dataclasses.dataclass
class TaskNote:
    """What the client remembers about a task beyond its state (kept only for the few
    tasks that need it: retried, refused or backed up)."""

    user_attempts: int = 0        # reruns after the function raised
    system_attempts: int = 0      # reruns after a fault (the function blob went missing)
    backup: bool = False          # a backup copy was sent (straggler)
    refusal: object = None        # the provisional error of a REFUSED task
    timed_since: float | None = None   # when its task_timeout clock started (backed up, or no one free)


class TaskTable:
    """The states of a map's tasks: a byte per task, counts per state, sparse notes."""

    def __init__(self, n: int):
        self.n = n
        self._state = bytearray(n)                       # one byte per task, all QUEUED
        self._counts = [0] * len(TaskState)
        self._counts[int(Q)] = n
        self.notes: dict[int, TaskNote] = {}

    def state(self, index: int) -> TaskState:
        return TaskState(self._state[index])

    def move(self, index: int, to: TaskState) -> bool:
        """Move task ``index`` to ``to`` if :data:`TRANSITIONS` allows it; True if it moved."""
        if not 0 <= index < self.n:
            return False
        now = self._state[index]
        if (now, to) not in _ALLOWED:
            return False
        if now != to:
            self._state[index] = to
            self._counts[now] -= 1
            self._counts[to] += 1
        return True

    def move_all(self, indices: Iterable[int], to: TaskState) -> list[int]:
        """Move each of ``indices`` that may move; return the ones that moved."""
        return [i for i in indices if self.move(i, to)]

    def note(self, index: int) -> TaskNote:
        """The note of a task, created on first use."""
        note = self.notes.get(index)
        if note is None:
            note = self.notes[index] = TaskNote()
        return note

    def count(self, *states: TaskState) -> int:
        return sum(self._counts[s] for s in states)

    def indices(self, *states: TaskState) -> list[int]:
        """Indices of the tasks in any of ``states`` (walks the table: not per result)."""
        if not self.count(*states):
            return []
        mask = np.isin(np.frombuffer(self._state, dtype=np.uint8), np.array([int(s) for s in states], dtype=np.uint8))
        return np.flatnonzero(mask).tolist()

    def is_final(self, index: int) -> bool:
        """Done, failed or cancelled: nothing can move it any more."""
        return self._state[index] >= _DONE

    def is_waiting(self, index: int) -> bool:
        return 0 <= index < self.n and self._state[index] <= _LEASED

    @property
    def unanswered(self) -> int:
        """Tasks still owed an answer (queued, leased or in a retry's back-off)."""
        return self._counts[0] + self._counts[1] + self._counts[3]     # QUEUED, LEASED, BACKOFF

    @property
    def unfinished(self) -> int:
        """Tasks not in a final state (queued, leased, backing off or provisionally refused)."""
        return self._counts[0] + self._counts[1] + self._counts[2] + self._counts[3]

    @property
    def finished(self) -> bool:
        """Every task answered (refusals count: they are settled at the end)."""
        return self.unanswered == 0


class TaskResult:
    """One task's outcome: its index in the map, value or error, and the worker's metadata
    (``meta``: a dict with ``worker``, ``host``, ``pid``, ``start``, ``stop``, bytes read...).
    ``merged``: its value was folded on the worker into the value of another task's result
    (the first of the same partial, see :mod:`client.engine.merged`); ``value`` is None."""

    __slots__ = ("index", "value", "error", "_meta", "merged")

    def __init__(self, index: int, value: Any, meta: ResultMeta | dict | None = None,
                 error: RemoteError | None = None, merged: bool = False):
        self.index = index
        self.value = value
        self.error = error
        self._meta = meta
        self.merged = merged

    @property
    def meta(self) -> dict:
        if isinstance(self._meta, ResultMeta):
            self._meta = self._meta.to_dict()
        return self._meta if self._meta is not None else {}

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        return f"TaskResult(index={self.index}, value={describe(self.value)}, error={self.error!r})"


def transitions_table() -> str:
    """The moves as a text table (for docs and ``help``).

    >>> print(transitions_table().splitlines()[0])
    from       to         why
    """
    rows = [f"{'from':<10} {'to':<10} why"]
    rows += [f"{a.name.lower():<10} {b.name.lower():<10} {why}" for (a, b), why in TRANSITIONS.items()]
    return "\n".join(rows)
