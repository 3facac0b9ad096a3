"""What upkeep decides about a map, as plain functions of plain data (they test without
Redis): which running tasks are stragglers, which waiting tasks the broker lost. Upkeep
(:mod:`client.engine.upkeep`) turns what they find into events for the map's state.

    >>> straggler_backups(unfinished=1, n=40, idle=1, durations=[1.0, 1.2, 1.1], factor=3.0,
    ...                   running=[(7, 9.0), (8, 2.0)], backed_up=set())
    Slow(indices=(7,), why='straggler over 3.3 s')
    >>> lost_tasks(waiting={1, 2, 3}, in_broker={1}, missing_before={3})
    ([3], {2})
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

STRAGGLER_MIN_SECONDS = 1.0   # never back up a task that has run less than this


class Slow(NamedTuple):
    """Tasks that run much longer than the map's typical one, and why they are called so."""

    indices: tuple[int, ...]
    why: str


def straggler_backups(*, unfinished: int, n: int, idle: int, durations: Sequence[float], factor: float,
                      running: Iterable[tuple[int, float]], backed_up: set[int]) -> Slow | None:
    """In the map's tail (at most 5 % or 2 tasks left) and with idle workers, the tasks
    (``running``: (index, seconds so far)) that have run ``factor`` times longer than the
    median finished task (the longest one with fewer than three), one per idle worker, to
    back up; None when there is none."""
    if not unfinished or unfinished > max(2, 0.05 * n) or not idle or not len(durations):
        return None
    ordered = sorted(durations)
    typical = float(ordered[len(ordered) // 2] if len(ordered) >= 3 else ordered[-1])
    limit = max(STRAGGLER_MIN_SECONDS, factor * typical)
    slow = [i for i, seconds in running if seconds > limit and i not in backed_up][:idle]
    return Slow(tuple(slow), f"straggler over {limit:.1f} s") if slow else None


def lost_tasks(*, waiting: set[int], in_broker: set[int], missing_before: set[int]) -> tuple[list[int], set[int]]:
    """(the waiting tasks missing from the broker twice in a row: to requeue, the tasks
    missing for the first time: to look at again next audit)."""
    missing = waiting - in_broker
    lost = sorted(missing & missing_before)
    return lost, missing - set(lost)
