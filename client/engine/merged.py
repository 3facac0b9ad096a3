"""The client's side of the merge on the workers (:mod:`broker.wire.merge`): what a map that
reduces sends as its function. How the map takes in a *partial* (the folded results of
several tasks in one frame: all of its tasks counted once, or none) is the state's
(:meth:`client.engine.state.MapState.handle` with a :class:`~client.engine.events.Partial`).
At a map's end its workers merge their partials in a tree (:mod:`broker.wire.merge`); the
client's part is :func:`drain_stalled`, for a pool of partials that no worker will come for.

    >>> from rhtc.client.engine.options import MapOptions
    >>> plan = function_to_send(abs, True, MapOptions(), tasks=8, seconds=lambda: 5.0)
    >>> type(plan).__name__, plan(-2), plan.seconds, function_to_send(abs, None, MapOptions(), 8, float) is abs
    ('MergePlan', 2, 5.0, True)
    >>> function_to_send(abs, True, MapOptions(), 8, lambda: 5.0, fanin=4).fanin
    4
"""
from __future__ import annotations

import time
from typing import Callable

from ...broker.wire.merge import MergePlan
from .options import MapOptions


def function_to_send(fn: Callable, reduce, options: MapOptions, tasks: int, seconds: Callable[[], float],
                     fanin: int = 1):
    """The map's function as its workers get it: a :class:`MergePlan` when a reduction was
    asked for and ``options.merge`` is on (``reduce`` True: folded with ``+``; partials
    handed in after ``tasks`` tasks or ``seconds()`` s, and at the map's end up a tree of
    fan-in ``fanin``: RHTC_MERGE_FANIN), else ``fn``."""
    if not reduce or not options.merge:
        return fn
    return MergePlan(fn, None if reduce is True else reduce, tasks, seconds(), fanin)



STALLED_SECONDS = 5.0        # a map without progress this long takes the pool's partials ...
TAIL = 0.05                  # ... when they cover every task it waits for but its tail (a share of the map)


def drain_stalled(storage, map_id: str, waiting: int, n: int, last_progress: float, held: int = 0) -> int:
    """When a map has had no result for :data:`STALLED_SECONDS` and waits for ``waiting``
    of its ``n`` tasks (``held`` of them finished in partials its workers hold), the
    partials of its pool go to the client if they cover all the others but its tail (at
    most 2 tasks or :data:`TAIL` of the map: a straggler running, a task the client gave up
    on or refused). The broker moves them at once when every task is answered or pooled;
    this keeps a straggler from hiding the finished tasks from the client (its progress,
    its straggler backups). Returns the tasks moved.

    >>> from types import SimpleNamespace
    >>> broker = SimpleNamespace(maps=SimpleNamespace(drain_pool=lambda map_id, at_least: at_least))
    >>> drain_stalled(broker, "m", 80, 80, time.time()), drain_stalled(broker, "m", 80, 80, 0.0, held=6)
    (0, 70)
    """
    if waiting <= 0 or time.time() - last_progress < STALLED_SECONDS:
        return 0
    return storage.maps.drain_pool(map_id, max(1, waiting - held - max(2, int(TAIL * n))))
