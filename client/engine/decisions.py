"""What upkeep decides about a map, as values the map applies (:meth:`MapRun.apply`), the
way dask's worker state machine returns instructions instead of acting: upkeep reads the
broker and the map's state, and returns these; only the map changes its own state.
The deciding functions here take plain data, so they test without Redis.

    >>> straggler_backups(unfinished=1, n=40, idle=1, durations=[1.0, 1.2, 1.1], factor=3.0,
    ...                   running=[(7, 9.0), (8, 2.0)], backed_up=set())
    Requeue(indices=(7,), route=False, backup=True, why='straggler over 3.3 s')
    >>> lost_tasks(waiting={1, 2, 3}, in_broker={1}, missing_before={3})
    ([3], {2})
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Sequence, Union

from ..errors import RemoteError

log = logging.getLogger("rhtc.client")
STRAGGLER_MIN_SECONDS = 1.0   # never back up a task that has run less than this


@dataclasses.dataclass(frozen=True)
class Requeue:
    """Send these tasks again (to the worker that holds their chunk unless ``route`` is
    False; ``backup``: a second copy of a task that is still running)."""

    indices: tuple[int, ...]
    route: bool = True
    backup: bool = False
    why: str = ""


@dataclasses.dataclass(frozen=True)
class Fail:
    """Give up on this task with this error."""

    index: int
    error: RemoteError


@dataclasses.dataclass(frozen=True)
class FunctionLost:
    """The broker lost the map (it restarted): upload the function, resend what waits."""

    why: str = ""


@dataclasses.dataclass(frozen=True)
class Shun:
    """This worker looks live but takes nothing: take its queue back, route nothing to it."""

    worker: str
    why: str = ""


Decision = Union[Requeue, Fail, FunctionLost, Shun]


def apply(run, decisions: Iterable[Decision]) -> None:
    """Do what upkeep decided, through the map's verbs (:class:`client.engine.maprun.MapRun`)."""
    for d in decisions:
        if isinstance(d, Requeue):
            sent = run.requeue(d.indices, route=d.route, backup=d.backup)
            log.info("map %s: requeued %d task(s) (%s): %s", run.map_id, len(sent), d.why, sent[:20])
        elif isinstance(d, Fail):
            run.fail(d.index, d.error)
        elif isinstance(d, FunctionLost):
            run.function_lost()
        elif isinstance(d, Shun):
            run.shunned.add(d.worker)
            run.storage.take_back_queue(d.worker)
            log.warning(d.why)
            run.storage.report(d.why)


def straggler_backups(*, unfinished: int, n: int, idle: int, durations: Sequence[float], factor: float,
                      running: Iterable[tuple[int, float]], backed_up: set[int]) -> Requeue | None:
    """In the map's tail (at most 5 % or 2 tasks left) and with idle workers, a backup copy
    of each task (``running``: (index, seconds so far)) that has run ``factor`` times longer
    than the median finished task (the longest one with fewer than three), one per idle
    worker; None when there is none."""
    if not unfinished or unfinished > max(2, 0.05 * n) or not idle or not len(durations):
        return None
    ordered = sorted(durations)
    typical = float(ordered[len(ordered) // 2] if len(ordered) >= 3 else ordered[-1])
    limit = max(STRAGGLER_MIN_SECONDS, factor * typical)
    slow = [i for i, seconds in running if seconds > limit and i not in backed_up][:idle]
    return Requeue(tuple(slow), route=False, backup=True, why=f"straggler over {limit:.1f} s") if slow else None


def lost_tasks(*, waiting: set[int], in_broker: set[int], missing_before: set[int]) -> tuple[list[int], set[int]]:
    """(the waiting tasks missing from the broker twice in a row: to requeue, the tasks
    missing for the first time: to look at again next audit)."""
    missing = waiting - in_broker
    lost = sorted(missing & missing_before)
    return lost, missing - set(lost)
