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

from ..broker.protocol import TASK_ID_LEN, TaskRef

MAX_HELD = 256


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
        ("n_held", ctypes.c_int32),
        ("held", ctypes.c_ubyte * (TASK_ID_LEN * MAX_HELD)),
    ]


class SharedState:
    """One block shared by a supervisor and its task process (made before the fork)."""

    def __init__(self, block):
        self.b = block

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
        """The task ids of a new batch (all held)."""
        data = b"".join(list(task_ids)[:MAX_HELD])
        self.b.seq += 1
        ctypes.memmove(ctypes.addressof(self.b) + _Block.held.offset, data, len(data))
        self.b.n_held = len(data) // TASK_ID_LEN
        self.b.seq += 1

    def set_counters(self, **values: int) -> None:
        for name, value in values.items():
            setattr(self.b, name, int(value))

    # -- read by the supervisor -------------------------------------------------------------
    def _read(self, snapshot, default):
        """``snapshot()`` taken while the task process wrote nothing (a seqlock: ``seq`` is
        odd during a write, and changes across one)."""
        for _ in range(1000):
            seq = self.b.seq
            if seq % 2 == 0:
                value = snapshot()
                if self.b.seq == seq:
                    return value
            time.sleep(0.0001)
        return default

    def current(self) -> tuple[TaskRef | None, float | None]:
        """(the task running, since when)."""
        def snapshot():
            index = int(self.b.task_index)
            if index < 0:
                return None, None
            return TaskRef(self.b.task_map.decode("ascii"), index), self.b.task_started
        return self._read(snapshot, (None, None))

    def held(self) -> list[bytes]:
        """Task ids the task process holds (its current batch), read consistently."""
        def snapshot():
            n = self.b.n_held
            raw = ctypes.string_at(ctypes.addressof(self.b) + _Block.held.offset, n * TASK_ID_LEN)
            return [raw[i * TASK_ID_LEN:(i + 1) * TASK_ID_LEN] for i in range(n)]
        return self._read(snapshot, [])

    def counters(self) -> dict[str, int]:
        names = ("tasks_done", "errors", "cache_bytes", "cache_entries", "cache_limit", "bytes_read",
                 "bytes_from_cache", "disk_bytes", "disk_limit", "merged")
        return {n: int(getattr(self.b, n)) for n in names}

    def reset(self) -> None:
        """Before a fresh task process starts: no task, nothing held (counters stay)."""
        self.b.task_index = -1
        self.set_held([])
