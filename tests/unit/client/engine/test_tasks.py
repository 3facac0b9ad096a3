"""A task's moves (client/engine/tasks.py) obey the one transitions table: a move the table
does not list is refused, the counts follow the moves, and a final state stays."""
from __future__ import annotations

from rhtc.client.engine.tasks import TRANSITIONS, TaskState, TaskTable, transitions_table


def test_every_move_not_in_the_table_is_refused():
    for a in TaskState:
        for b in TaskState:
            t = TaskTable(1)
            if a != TaskState.QUEUED:
                path = [TaskState.QUEUED, a] if (TaskState.QUEUED, a) in TRANSITIONS else None
                if path is None:
                    continue
                assert t.move(0, a)
            assert t.move(0, b) == ((a, b) in TRANSITIONS)
            assert t.state(0) == (b if (a, b) in TRANSITIONS else a)


def test_counts_follow_moves_and_final_states_stay():
    t = TaskTable(5)
    assert t.unanswered == 5 and not t.finished
    t.move(0, TaskState.LEASED)
    t.move(0, TaskState.DONE)
    t.move(1, TaskState.REFUSED)
    t.move(2, TaskState.FAILED)
    assert not t.move(0, TaskState.QUEUED)        # a finished task is never requeued
    assert not t.move(2, TaskState.DONE)          # nor answered twice
    assert t.count(TaskState.DONE) == 1 and t.unanswered == 2 and t.unfinished == 3
    assert t.indices(TaskState.QUEUED, TaskState.LEASED) == [3, 4]
    t.move_all([3, 4], TaskState.CANCELLED)
    assert t.finished and t.indices(TaskState.REFUSED) == [1]
    assert "refused" in transitions_table()
