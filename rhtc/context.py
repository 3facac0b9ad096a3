"""Where a running task meets the worker that runs it, without importing it.

A worker process sets :data:`current` when it starts; code that runs inside a task
(for instance :meth:`client.data.chunks.Chunk.arrays`) asks it for the worker's branch cache
and adds up the bytes it read. Outside a worker ``current`` is ``None`` and that code
reads directly. Because this lives in an installed module, the cache survives across
tasks however the user's function was pickled.

    >>> from rhtc import context
    >>> context.current is None   # not inside a worker
    True
"""
from __future__ import annotations

import dataclasses
from typing import MutableMapping


@dataclasses.dataclass
class TaskContext:
    """What the worker offers the task it is running."""

    worker: str
    cache: MutableMapping | None = None      # branch cache (bytes-capped LRU)
    bytes_from_cache: int = 0                # served from the worker's memory
    bytes_from_disk: int = 0                 # served from the node's disk tier
    bytes_from_file: int = 0
    files_opened: int = 0                    # files this task had to open (not already open)
    routing_keys: set = dataclasses.field(default_factory=set)  # chunks this task cached
    # (cache key, chunk, cached value) of every array the cache handed this task: a write
    # into one is explained by name (worker/frozen.py)
    handed: list = dataclasses.field(default_factory=list)
    # what the task read through its chunks: routing key -> (chunk, {(branch, library): None})
    # (its result says so: broker/wire/reads.py; ``rhtc warm`` reads them again)
    reads: dict = dataclasses.field(default_factory=dict)

    def begin_task(self) -> None:
        self.bytes_from_cache = 0
        self.bytes_from_disk = 0
        self.bytes_from_file = 0
        self.files_opened = 0
        self.routing_keys = set()
        self.handed = []
        self.reads = {}

    def note_read(self, chunk, branches, library: str = "ak") -> None:
        """Note that the task read ``branches`` of ``chunk`` (as uproot's ``library``)."""
        entry = self.reads.get(chunk.routing_key)
        if entry is None:
            entry = self.reads[chunk.routing_key] = (chunk, {})
        for branch in branches:
            entry[1][(branch, library)] = None

    def reads_text(self, arg) -> str:
        """What the task read, as its result's metadata carries it (``arg``: the task's
        argument, whose own chunk is written short; :mod:`rhtc.broker.wire.reads`)."""
        if not self.reads:
            return ""
        from rhtc.broker.wire.reads import encode_reads
        return encode_reads(self.reads, arg)


current: TaskContext | None = None
