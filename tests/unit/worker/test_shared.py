"""What the task process tells its supervisor (worker/shared.py) is never guessed: the
seqlock's reads, without a supervisor or a broker.

Why it matters, with what was seen: tests/integration/test_supervisor_reconcile.py (a
reconcile that read "nothing held" during a write in progress requeued a whole partial's
tasks); that module drives the supervisor's reconcile against a real broker."""
from __future__ import annotations

import threading

from hypothesis import given, settings, strategies as st

from rhtc.broker.wire import protocol
from rhtc.worker.shared import SharedState
from tests.kits.worker import frozen_inside_a_write


def test_a_write_in_progress_reads_as_unknown_never_as_nothing_held():
    s = SharedState.create()
    tid = protocol.TaskRef("0123456789abcdef", 3).task_id
    s.set_held([tid])
    assert s.held() == [tid]
    frozen_inside_a_write(s)
    assert s.held() is None, "a write in progress was read as a list"
    s.b.seq += 1                                     # the write ends
    assert s.held() == [tid]


def test_the_task_running_is_the_last_one_read_while_a_write_is_in_progress():
    s = SharedState.create()
    s.set_task(protocol.TaskRef("0123456789abcdef", 4))
    assert s.current()[0].index == 4
    frozen_inside_a_write(s)
    assert s.current()[0].index == 4                 # (the status would have said "idle")
    assert s.current(settled=True)[0].index == 4     # a dead writer's block is read as it is


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.integers(0, 10_000), max_size=40), min_size=1, max_size=30))
def test_a_reader_sees_only_whole_lists_that_were_written(lists):
    """Whatever the interleaving of a writer and a reader, the reader gets one of the
    lists written (the one before the first write included) or "unknown"."""
    s = SharedState.create()
    ids = [[protocol.TaskRef("0123456789abcdef", i).task_id for i in one] for one in lists]
    written = {()} | {tuple(one) for one in ids}
    done = threading.Event()

    def write():
        for _ in range(20):
            for one in ids:
                s.set_held(one)
        done.set()

    seen = []
    writer = threading.Thread(target=write)
    writer.start()
    while not done.is_set():
        got = s.held()
        seen.append(None if got is None else tuple(got))
    writer.join()
    assert all(got is None or got in written for got in seen), \
        [got for got in seen if got is not None and got not in written][:1]
