"""What the containers of one map must agree on, checked (:func:`check`) when the map
ends, and by the tests after every map (``RHTC_CHECK_INVARIANTS=1``, set by
tests/conftest.py): a disagreement is a bug, named by task index.

A map's state per task lives in several places: the task table (state and counts), the
retry queue (tasks in back-off), the ledger (one row per finished task), the outbox and
what was handed to the caller (one result per finished task), the frame cache, and
upkeep's set of tasks missing from the broker, and, when the workers merge, how many
accepted partials covered each task. Nothing else ties them together.

    >>> from rhtc.client.engine.tasks import TaskState
    >>> class Run: pass
    >>> run = Run()
    >>> from rhtc.client.engine.tasks import TaskTable
    >>> from rhtc.client.engine.ledger import Ledger
    >>> from rhtc.client.engine.retry import RetryQueue
    >>> run.n, run.tasks, run.ledger, run.retry_queue = 2, TaskTable(2), Ledger(2), RetryQueue()
    >>> run.delivered, run.pending_results, run.missing = 0, 0, set()
    >>> check(run)
    []
    >>> run.tasks.move(1, TaskState.DONE)
    True
    >>> check(run)
    ['task 1 is done but has 0 ledger rows (one expected)', '1 task(s) finished but 0 result(s) were delivered or wait in the outbox']
"""
from __future__ import annotations

from collections import Counter

from rhtc.errors import RhtcError

from .tasks import TaskState

_FINAL = (TaskState.DONE, TaskState.FAILED)


class InvariantBroken(RhtcError, AssertionError):
    """The containers of a map disagree (a bug in rhtc: please report it with the message)."""


def check(run) -> list[str]:
    """The disagreements between ``run``'s containers (empty when they agree)."""
    problems = []
    table = run.tasks
    states = Counter(table.state(i) for i in range(run.n))
    for s in TaskState:
        if table.count(s) != states.get(s, 0):
            problems.append(f"the task table counts {table.count(s)} {s.name.lower()} tasks but holds {states.get(s, 0)}")
    rows = Counter(run.ledger._index)
    for i in range(run.n):
        s = table.state(i)
        want = 1 if s in _FINAL else 0
        if rows.get(i, 0) != want and not (s is TaskState.CANCELLED and rows.get(i, 0) <= 1):
            problems.append(f"task {i} is {s.name.lower()} but has {rows.get(i, 0)} ledger rows "
                            f"({'one' if want else 'none'} expected)")
    in_retry = {i for _, i in run.retry_queue._heap}
    for i in table.indices(TaskState.BACKOFF):
        if i not in in_retry:
            problems.append(f"task {i} is in back-off but not in the retry queue: it would never run again")
    finished = table.count(*_FINAL)
    if run.delivered + run.pending_results != finished:
        problems.append(f"{finished} task(s) finished but {run.delivered + run.pending_results} result(s) "
                        "were delivered or wait in the outbox")
    covered = getattr(run, "in_partial", b"")      # a map whose workers merge (client/engine/merged.py)
    for i in (k for k, c in enumerate(covered) if c):
        if covered[i] > 1:
            problems.append(f"task {i} was counted in {covered[i]} partials (one at most)")
        elif table.state(i) is not TaskState.DONE:
            problems.append(f"task {i} was counted in a partial but is {table.state(i).name.lower()}")
    for i in sorted(run.missing):      # seen missing once; it may have finished since (the next
        if not 0 <= i < run.n:         # audit only requeues what is still waiting and missing)
            problems.append(f"upkeep counts task {i} as missing, but the map has no such task")
    return problems


class Checked:
    """What a map offers :func:`check` beyond its containers (mixed into MapRun)."""

    @property
    def pending_results(self) -> int:
        """Results in the outbox, not yet handed to the caller."""
        return len(self._outbox)

    @property
    def missing(self) -> set[int]:
        return self.upkeep.missing

    def validate(self) -> None:
        """Raise :class:`InvariantBroken` if the map's containers disagree."""
        validate(self)


def validate(run) -> None:
    """Raise :class:`InvariantBroken` naming every disagreement, if any."""
    problems = check(run)
    if problems:
        raise InvariantBroken(f"map {getattr(run, 'map_id', '?')}: its containers disagree: " + "; ".join(problems))
