"""A bound on how long one task may run without a result: the ``task_timeout=`` option
of :func:`rhtc.remote_map` and its kin.

A task that hangs for good (a hung FUSE or XRootD read) never finishes, and in a map
of two or three tasks there is no median to call it a straggler by. Once a copy of a
task has run ``task_timeout`` seconds, upkeep backs it up on an idle worker (first
result wins); if no copy has a result ``task_timeout`` seconds later (or no worker was
free to try one by twice the bound), the task fails with a ``TaskTimeout``
:class:`RemoteError` naming the worker, the chunk and the time.

    >>> check_task_timeout(None), check_task_timeout(30)
    (None, 30.0)
"""
from __future__ import annotations

import logging
import math
import time
from ...broker.wire.messages import ErrorKind, WorkerStatus
from ..errors import RemoteError
from .events import Backup, GiveUp
from .verbs import MapVerbs

log = logging.getLogger("rhtc.client")


def check_task_timeout(task_timeout) -> float | None:
    """``task_timeout`` as seconds (None: no bound); a clear error for anything else."""
    if task_timeout is None:
        return None
    if isinstance(task_timeout, bool) or not isinstance(task_timeout, (int, float)) \
            or not math.isfinite(task_timeout) or task_timeout <= 0:
        raise ValueError(f"task_timeout={task_timeout!r}: pass the seconds one task may run without a "
                         "result before it is backed up and then failed (a positive number, e.g. "
                         "task_timeout=600), or None for no bound")
    return float(task_timeout)


class TaskTimeouts:
    """Backs up, then fails, the tasks of one map that run over its ``task_timeout``."""

    def __init__(self, run: MapVerbs, seconds: float, parked_behind=lambda slow, live: ()):
        self.run, self.seconds = run, seconds
        self.parked_behind = parked_behind     # finished tasks held in the partial of a slow one's worker

    def check(self, live: list["WorkerStatus"]) -> None:
        """Once a tick, with the live workers' statuses: what it finds goes to the map as
        events (a backup whose task_timeout clock starts, a task given up)."""
        run, limit, state = self.run, self.seconds, self.run.state
        copies: dict[int, list[WorkerStatus]] = {}
        for w in live:
            if w.task is not None and w.task.map_id == run.map_id:
                copies.setdefault(w.task.index, []).append(w)
        busy = {w.name for ws in copies.values() for w in ws}
        idle = [w for w in live if w.task is None and w.name not in state.misfits and w.name not in busy]
        now = time.time()
        for index, ws in sorted(copies.items()):
            first = max(ws, key=lambda w: w.task_seconds or 0.0)
            ran = first.task_seconds or 0.0
            if ran <= limit or not 0 <= index < run.n or state.tasks.is_final(index):
                continue                        # within bound, or it has its result: a late copy still runs
            note = state.tasks.notes.get(index)
            since = note.timed_since if note else None
            if since is None and (state.backed_up(index) or idle):
                why = f"over task_timeout={limit:g} s on worker {first.name} ({ran:.0f} s)"
                if not state.backed_up(index):
                    idle.pop()
                    log.warning("map %s: task %d has run %.0f s on worker %s, over task_timeout=%g s; "
                                "backing it up on another worker", run.map_id, index, ran, first.name, limit)
                run.apply(Backup((index,), why, now, timed=True))
                behind = self.parked_behind((index,), live)
                if behind:
                    run.apply(Backup(behind, f"finished behind task {index} in its worker's partial", now))
            elif (since is not None and now - since > limit) or (since is None and ran > 2 * limit):
                self._fail(index, first, ran, backed_up=since is not None, now=now)

    def _fail(self, index: int, worker: "WorkerStatus", ran: float, backed_up: bool, now: float) -> None:
        run, limit = self.run, self.seconds
        also = (f", and a backup copy on another worker had none within {limit:g} s either" if backed_up
                else f"; no other worker was free to run a backup copy")
        msg = (f"no result within task_timeout={limit:g} s: the task has run {ran:.0f} s on worker "
               f"{worker.name} ({worker.host}){also}. Does it hang (a stalled FUSE mount or XRootD "
               f"read of its file)? The worker stays busy with it until it returns; pass a larger "
               f"task_timeout= if the task is only slow")
        log.warning("map %s: task %d failed: %s", run.map_id, index, msg)
        run.apply(GiveUp(index, RemoteError(index, ErrorKind.TASK_TIMEOUT, msg, worker=worker.name,
                                            host=worker.host, argument=run.describe_argument(index)), now))
