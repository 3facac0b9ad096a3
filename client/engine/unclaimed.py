"""Tasks that sit in the own queue of a worker that looks live but takes none of them.

A worker's own queue is served by that worker only (others steal from it only when it
is backed up, stuck or dead). A heartbeat that a worker did not publish (forged, or an
old genuine one written back after the worker died) makes the queue look served while
nobody serves it. The client watches the queues of the live workers: a queue that has
not shrunk, whose owner finished nothing and is idle (or has not published a new
heartbeat), for ``RHTC_UNCLAIMED_SECONDS``, is moved to the shared queue, and the map
routes no more tasks to that owner.

    >>> from rhtc.broker.wire.messages import WorkerStatus
    >>> watch = UnclaimedWatch(seconds=10)
    >>> ghost = WorkerStatus(name="ghost", host="h", pid=1, incarnation="i", key_fingerprint="f",
    ...                      t=5.0, queued=7)
    >>> watch.stranded([ghost], now=100.0), watch.stranded([ghost], now=111.0)
    ([], ['ghost'])
"""
from __future__ import annotations

import time

from ...broker.wire.messages import WorkerStatus


class UnclaimedWatch:
    """Remembers, per worker with a non-empty queue, since when nothing moved."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._since: dict[str, tuple[float, int, int, float]] = {}   # name -> since, queued, done, t

    def stranded(self, live: list[WorkerStatus], now: float | None = None) -> list[str]:
        """Names of the workers whose queued tasks nobody has taken for ``seconds``."""
        now = time.monotonic() if now is None else now
        out, seen = [], {}
        for w in live:
            if not w.queued:
                continue
            was = self._since.get(w.name)
            moved = was is None or w.queued < was[1] or w.tasks_done != was[2] or (
                w.task is not None and w.t != was[3])     # busy and beating: stealing handles it
            seen[w.name] = (now, w.queued, w.tasks_done, w.t) if moved else was
            if not moved and now - was[0] >= self.seconds:
                out.append(w.name)
                del seen[w.name]
        self._since = seen
        return out
