"""Fewer garbage collections while an item runs on a worker that holds a large heap.

A worker keeps what makes reruns fast as Python objects: the files it holds open with
their trees' metadata (a NanoAOD tree's ~1000 branches are ~80k objects), coffea's kept
NanoEvents (:mod:`client.data.coffea_events`). On a cold run that heap grows by ~900k
objects, and CPython's collector, at its default threshold (a young collection every 700
new container objects), ends up running full collections over all of it again and again
while it grows. Measured in one process over the 10 AGC items of ``bench agc --events
100000`` (CPU seconds, the worker's caches on): 1.8 s of the cold run's 6.0 s went to 7
full collections; with 10,000 new objects per young collection there were none, and the
cold run took 4.5 s (peak RSS 381 MB instead of 371 MB); warm runs, which grow nothing,
were unchanged (1.10 s).

While an item runs, :func:`fewer_collections` raises the young generation's threshold to
:data:`YOUNG_THRESHOLD` (never lowers one set higher) and puts it back afterwards.

    >>> import gc
    >>> before = gc.get_threshold()
    >>> with fewer_collections():
    ...     gc.get_threshold()[0] >= YOUNG_THRESHOLD
    True
    >>> gc.get_threshold() == before
    True
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

#: New container objects between two young collections while an item runs (CPython: 700).
YOUNG_THRESHOLD = 10_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Young collections every :data:`YOUNG_THRESHOLD` new objects inside the block."""
    before = gc.get_threshold()
    if before[0] <= 0 or before[0] >= YOUNG_THRESHOLD:     # off, or already as high: as it is
        yield
        return
    gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        if gc.get_threshold()[0] == YOUNG_THRESHOLD:       # unless the task set its own
            gc.set_threshold(*before)
