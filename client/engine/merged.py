"""The client's side of the merge on the workers (:mod:`broker.merge`): what a map that
reduces sends as its function, and how it takes in a *partial*, the folded results of
several tasks in one frame.

A partial counts all of its tasks or none: it is accepted only when none of the tasks
it covers has been counted yet (a straggler's backup, or a rerun after a worker froze
past its lease, may have answered one already). A refused partial's tasks that are still
owed an answer are sent again, and so are those of a malformed one (a task covered twice,
indices outside the map): it costs its own tasks, never the map. An accepted partial yields one
:class:`~client.engine.tasks.TaskResult` per task it covers (each with its own meta, for the
ledger and the timeline): the first carries the merged value, the others are marked
``merged`` (their value is in it).

    >>> from rhtc.client.engine.options import MapOptions
    >>> plan = function_to_send(abs, True, MapOptions(), tasks=8, seconds=lambda: 5.0)
    >>> type(plan).__name__, plan(-2), plan.seconds, function_to_send(abs, None, MapOptions(), 8, float) is abs
    ('MergePlan', 2, 5.0, True)
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ...broker import protocol
from ...broker.merge import MergePlan, decode_partial
from ..errors import undecodable_error
from .options import MapOptions
from .tasks import TaskResult, TaskState

log = logging.getLogger("rhtc.client")

_DONE = TaskState.DONE


def function_to_send(fn: Callable, reduce, options: MapOptions, tasks: int, seconds: Callable[[], float]):
    """The map's function as its workers get it: a :class:`MergePlan` when a reduction was
    asked for and ``options.merge`` is on (``reduce`` True: folded with ``+``; partials
    handed in after ``tasks`` tasks or ``seconds()`` s), else ``fn``."""
    if not reduce or not options.merge:
        return fn
    return MergePlan(fn, None if reduce is True else reduce, tasks, seconds())


def accept_partial(run, payload: bytes) -> None:
    """Take in a verified partial of ``run`` (a :class:`~client.engine.maprun.MapRun`): count its
    tasks once each, or refuse it whole and send its uncounted tasks again."""
    indices, metas, packed = decode_partial(payload)
    tasks = run.tasks
    if len(metas) != len(indices) or len(set(indices)) != len(indices) or \
            not all(0 <= i < run.n for i in indices):
        again = sorted({i for i in indices if 0 <= i < run.n and not tasks.is_final(i)})
        log.warning("map %s: dropped a malformed partial (tasks %s: %s); sending its %d uncounted "
                    "task(s) again", run.map_id, indices[:20], _malformed(indices, metas, run.n), len(again))
        if again:                     # it costs its own tasks, nothing more
            run.requeue(again, route=False)
        return
    counted = [i for i in indices if tasks.is_final(i)]
    if counted:
        run.partials_refused += 1
        again = [i for i in indices if not tasks.is_final(i)]
        log.info("map %s: refused a partial of %d tasks from %s: task(s) %s were counted already; "
                 "sending %d again", run.map_id, len(indices), metas[0].worker, counted[:10], len(again))
        if again:
            run.requeue(again, route=False)
        return
    try:
        value = protocol.loads(packed)
    except Exception as err:          # pickled with something this client lacks: each task fails
        for i, meta in zip(indices, metas):
            run.fail(i, undecodable_error(i, meta, err, run.workers.get(meta.worker), run.describe_argument(i)), meta)
        return
    now, notes = time.time(), tasks.notes
    for k, (i, meta) in enumerate(zip(indices, metas)):
        note = notes.get(i)
        tasks.move(i, _DONE)
        run.ledger.add(i, meta, retries=note.user_attempts if note else 0, received=now,
                       backup=bool(note and note.backup))
        run.in_partial[i] += 1
        run._outbox.append(TaskResult(i, value if k == 0 else None, meta, merged=k > 0))
    run.partials_accepted += 1
    run.last_progress = time.monotonic()


def _malformed(indices: list[int], metas: list, n: int) -> str:
    """What is wrong with a partial's list of tasks."""
    if len(metas) != len(indices):
        return f"{len(indices)} task indices but {len(metas)} task metadata"
    if len(set(indices)) != len(indices):
        return f"task(s) {sorted({i for i in indices if indices.count(i) > 1})[:10]} covered twice"
    return f"indices outside the map's {n} tasks"
