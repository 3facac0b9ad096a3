"""What the containers of one map's state must agree on, checked (:func:`check`) when
the map ends, and by the tests after every map (``RHTC_CHECK_INVARIANTS=1``, set by
tests/conftest.py) and after every step of the state machine's property test: a
disagreement is a bug, named by task index.

A map's state (:class:`~client.engine.state.MapState`) keeps, per task: its state and
counts (the task table), the retry queue (tasks in back-off), the ledger (one row per
finished task), the outbox and what was handed to the caller (one result per finished
task), the tasks the audit saw missing once, and, when the workers merge, how many
accepted partials covered each task.

    >>> from rhtc.client.engine.state import MapState
    >>> from rhtc.client.engine.retry import RetryPolicy
    >>> from rhtc.client.engine.tasks import TaskState
    >>> s = MapState(2, "m", RetryPolicy())
    >>> check(s)
    []
    >>> s.tasks.move(1, TaskState.DONE)
    True
    >>> check(s)
    ['task 1 is done but has 0 ledger rows (one expected)', '1 task(s) finished but 0 result(s) were delivered or wait in the outbox']
"""
from __future__ import annotations

from collections import Counter

from rhtc.errors import RhtcError

from .tasks import TaskState

_FINAL = (TaskState.DONE, TaskState.FAILED)


class InvariantBroken(RhtcError, AssertionError):
    """The containers of a map disagree (a bug in rhtc: please report it with the message)."""


def check(state) -> list[str]:
    """The disagreements between the containers of ``state`` (empty when they agree)."""
    problems = []
    table, n = state.tasks, state.n
    states = Counter(table.state(i) for i in range(n))
    for s in TaskState:
        if table.count(s) != states.get(s, 0):
            problems.append(f"the task table counts {table.count(s)} {s.name.lower()} tasks but holds {states.get(s, 0)}")
    rows = Counter(state.ledger._index)
    for i in range(n):
        s = table.state(i)
        want = 1 if s in _FINAL else 0
        if rows.get(i, 0) != want and not (s is TaskState.CANCELLED and rows.get(i, 0) <= 1):
            problems.append(f"task {i} is {s.name.lower()} but has {rows.get(i, 0)} ledger rows "
                            f"({'one' if want else 'none'} expected)")
    in_retry = state.retries.indices()
    for i in table.indices(TaskState.BACKOFF):
        if i not in in_retry:
            problems.append(f"task {i} is in back-off but not in the retry queue: it would never run again")
    finished = table.count(*_FINAL)
    if state.delivered + len(state.outbox) != finished:
        problems.append(f"{finished} task(s) finished but {state.delivered + len(state.outbox)} result(s) "
                        "were delivered or wait in the outbox")
    covered = state.in_partial
    for i in (k for k, c in enumerate(covered) if c):
        if covered[i] > 1:
            problems.append(f"task {i} was counted in {covered[i]} partials (one at most)")
        elif table.state(i) is not TaskState.DONE:
            problems.append(f"task {i} was counted in a partial but is {table.state(i).name.lower()}")
    for i in sorted(state.missing):    # seen missing once; it may have finished since (the next
        if not 0 <= i < n:             # audit only requeues what is still waiting and missing)
            problems.append(f"upkeep counts task {i} as missing, but the map has no such task")
    return problems


def validate(state) -> None:
    """Raise :class:`InvariantBroken` naming every disagreement, if any."""
    problems = check(state)
    if problems:
        raise InvariantBroken(f"map {getattr(state, 'map_id', '?')}: its containers disagree: " + "; ".join(problems))
