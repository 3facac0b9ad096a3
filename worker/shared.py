"""What the task process tells its supervisor, through a few hundred bytes of shared
memory (no pipe, no Redis): the task it runs, the tasks it holds, its counters. The
supervisor reads it to publish the worker's status, to reconcile the lease, and to name
the task a crashed task process was running.

    >>> s = SharedState.create()
    >>> s.set_task(TaskRef("0123456789abcdef", 4)); s.current()[0]
    TaskRef(map_id='0123456789abcdef', index=4)
"""
from __future__ import annotations

import ctypes
import multiprocessing
import time
from typing import Iterable

from ..broker.wire.protocol import TASK_ID_LEN, TaskRef

MAX_HELD = 256
READ_PATIENCE = 0.05       # s a read waits for a write in progress to end (see SharedState._read)


class _Block(ctypes.Structure):
    _fields_ = [
        ("seq", ctypes.c_uint64),                    # odd while ``held`` is being written
        ("task_map", ctypes.c_char * 16),
        ("task_index", ctypes.c_int64),              # -1: no task
        ("task_started", ctypes.c_double),
        ("tasks_done", ctypes.c_int64), ("errors", ctypes.c_int64),
        ("cache_bytes", ctypes.c_int64), ("cache_entries", ctypes.c_int64), ("cache_limit", ctypes.c_int64),
        ("disk_bytes", ctypes.c_int64), ("disk_limit", ctypes.c_int64),
        ("bytes_read", ctypes.c_int64), ("bytes_from_cache", ctypes.c_int64),
        ("merged", ctypes.c_int64),                  # tasks its open partials hold (worker/merge.py)
        ("leasing", ctypes.c_int32),                 # 1: a command that may lease is in flight
        ("n_held", ctypes.c_int32),
        ("held", ctypes.c_ubyte * (TASK_ID_LEN * MAX_HELD)),
    ]


class SharedState:
    """One block shared by a supervisor and its task process (made before the fork)."""

    def __init__(self, block):
        self.b = block
        self._current: tuple[TaskRef | None, float | None] = (None, None)    # the last read (current())

    @classmethod
    def create(cls) -> "SharedState":
        block = multiprocessing.get_context("fork").RawValue(_Block)
        block.task_index = -1
        return cls(block)

    # -- written by the task process --------------------------------------------------------
    def set_task(self, ref: TaskRef | None) -> None:
        self.b.seq += 1                      # odd: the supervisor's reads retry (see _read)
        if ref is None:
            self.b.task_index = -1
        else:
            self.b.task_map = ref.map_id.encode("ascii")
            self.b.task_started = time.time()
            self.b.task_index = ref.index
        self.b.seq += 1

    def set_held(self, task_ids: Iterable[bytes]) -> None:
        """Everything the task process holds now (its batch, its partials' tasks): what was
        leased to it so far, less what it handed on; ends :meth:`set_leasing`."""
        data = b"".join(list(task_ids)[:MAX_HELD])
        self.b.seq += 1
        ctypes.memmove(ctypes.addressof(self.b) + _Block.held.offset, data, len(data))
        self.b.n_held = len(data) // TASK_ID_LEN
        self.b.leasing = 0
        self.b.seq += 1

    def set_leasing(self) -> None:
        """Before a command that may lease to this worker (a take, an idle wake-up's lease,
        a merger's hand-up): until the next :meth:`set_held` the lease may hold entries the
        task process has not seen yet (their reply is on its way, or waits for a thread
        that has not run: a hundred light task loops in one process, a task's own thread
        holding the GIL), so the supervisor cannot tell what it holds (:meth:`held`)."""
        self.b.seq += 1
        self.b.leasing = 1
        self.b.seq += 1

    def set_counters(self, **values: int) -> None:
        for name, value in values.items():
            setattr(self.b, name, int(value))

    # -- read by the supervisor -------------------------------------------------------------
    def _read(self, snapshot, settled: bool = False):
        """``snapshot()`` taken while the task process wrote nothing (a seqlock: ``seq`` is
        odd during a write, and changes across one), or None when it stayed inside a write
        for ``READ_PATIENCE`` s: its writer is frozen, or is a thread waiting for the GIL
        (a task's own threads, or the light workers' hundred task loops in one process).
        The caller cannot tell what it holds then, and must not act on a guess.
        ``settled``: the task process is dead, nothing writes any more; read as it is."""
        if settled:
            return snapshot()
        deadline = time.monotonic() + READ_PATIENCE
        while True:
            seq = self.b.seq
            if seq % 2 == 0:
                value = snapshot()
                if self.b.seq == seq:
                    return value
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0001)

    def current(self, settled: bool = False) -> tuple[TaskRef | None, float | None]:
        """(the task running, since when); the last one read while its writer is inside a
        write (see :meth:`_read`)."""
        def snapshot():
            index = int(self.b.task_index)
            if index < 0:
                return None, None
            return TaskRef(self.b.task_map.decode("ascii"), index), self.b.task_started
        got = self._read(snapshot, settled)
        if got is not None:
            self._current = got
        return self._current

    def held(self) -> list[bytes] | None:
        """Task ids the task process holds (its batch, its partials' tasks), read
        consistently; None when it cannot be told (a write in progress: :meth:`_read`; a
        lease in flight: :meth:`set_leasing`). Never a list that lacks what was leased to it:
        the reconcile requeues what is not in it ("not running here"), and a partial that
        covers a task requeued so is refused whole at the map's end, its tasks run again."""
        def snapshot():
            if self.b.leasing:
                return None
            n = self.b.n_held
            raw = ctypes.string_at(ctypes.addressof(self.b) + _Block.held.offset, n * TASK_ID_LEN)
            return [raw[i * TASK_ID_LEN:(i + 1) * TASK_ID_LEN] for i in range(n)]
        return self._read(snapshot)

    def counters(self) -> dict[str, int]:
        names = ("tasks_done", "errors", "cache_bytes", "cache_entries", "cache_limit", "bytes_read",
                 "bytes_from_cache", "disk_bytes", "disk_limit", "merged")
        return {n: int(getattr(self.b, n)) for n in names}

    def reset(self) -> None:
        """Before a fresh task process starts: no task, nothing held (counters stay)."""
        self.b.task_index = -1
        self.set_held([])
