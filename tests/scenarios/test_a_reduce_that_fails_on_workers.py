"""A reduce that raises on a worker after writing into its first argument (``a += b`` half
done when a small node runs out of memory): the map's answer is still ``merge=False``'s,
every task counted once, and the analyst is told which worker failed, on which tasks, with
its traceback (the client folds what the worker could not: :mod:`client.reduce`). A reduce
that fails on the client too fails the map, as with ``merge=False``.

Each task ``i`` of 90 returns a one-hot count vector, so the answer shows both the sum of
the values (0 + 1 + ... + 89 = 4005) and how often each task was counted. The reduce fails
only in worker processes started with ``RHTC_TEST_SMALL_NODE`` set (not on the client),
after ``a += b``. Real redis-server, real ``python -m rhtc.worker`` processes, stopped by pid.
"""
from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np
import pytest

from rhtc.broker.wire.config import settings
from rhtc.broker.storage import Storage
from rhtc.client.engine.maprun import MapRun
from rhtc.client.engine.options import MapOptions
from rhtc.client.handle import MapHandle
from rhtc.client.reduce import ReduceFailedOnWorker
from tests.helpers import poll_until, register_by_value
from tests.kits.merge import HOLD

register_by_value(__name__)

N = 90
SMALL = {"RHTC_TEST_SMALL_NODE": "1"}


def one_hot(arg: tuple[int, str]) -> np.ndarray:
    """Task ``i``'s count vector, once two task processes have started one (each writes its
    pid into ``meet``): every worker's partial then covers tasks of its own, so the tree
    has partials of several workers to fold, whichever worker took which batch. Each task
    process notes the tasks it ran in ``meet/ran/<pid>`` (:func:`fails_on_another_workers_partial`)."""
    i, meet = arg
    open(os.path.join(meet, str(os.getpid())), "w").close()
    poll_until(lambda: len([n for n in os.listdir(meet) if n != "ran"]) >= 2, 20, interval=0.005)
    with open(os.path.join(meet, "ran", str(os.getpid())), "a") as noted:
        noted.write(f"{i}\n")
    v = np.zeros(N, dtype=np.int64)
    v[i] = 1
    return v


def fails_on_odd_tasks(a, b):
    """``a += b``, then, on a small node, MemoryError when ``b`` is one odd task's result."""
    a += b
    if os.environ.get("RHTC_TEST_SMALL_NODE") and b.sum() == 1 and np.flatnonzero(b)[0] % 2:
        raise MemoryError("out of memory halfway through a += b")
    return a


def fails_on_another_workers_partial(meet: str):
    """A reduce that does ``a += b``, then, on a small node, raises MemoryError when ``b``
    holds a task this process did not run: ``b`` is another worker's partial, whatever
    number of tasks it covers (a partial of one task has the value of that task's result,
    so only who ran it tells them apart)."""
    def fold(a, b):
        a += b
        if os.environ.get("RHTC_TEST_SMALL_NODE"):
            with open(os.path.join(meet, "ran", str(os.getpid()))) as noted:
                mine = {int(i) for i in noted.read().split()}
            if set(np.flatnonzero(b).tolist()) - mine:
                raise MemoryError("out of memory halfway through a += b")
        return a
    return fold


def fails_once_task_45_is_in(a, b):
    """A reduce with a bug: ``a += b``, then ValueError whenever the sum covers task 45, on
    the workers and on the client alike (as ``merge=False``, the map fails whatever the order
    the results come in)."""
    a += b
    if a[45]:
        raise ValueError("this reduce cannot fold task 45")
    return a


def run_map(broker, meet, reduce, **tuned):
    """The map of :func:`one_hot` over 90 tasks, merged with ``reduce``, collected here
    (not in a thread): (its answer, its handle, the warnings it gave)."""
    os.makedirs(os.path.join(meet, "ran"), exist_ok=True)
    st = Storage(broker.config, dataclasses.replace(settings(), **tuned))
    run = MapRun(st, one_hot, [(i, str(meet)) for i in range(N)], MapOptions(), reduce=reduce)
    run.submit()
    h = MapHandle(run, reduce=reduce)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = h.wait(timeout=90)
    return got, h, [w for w in said if issubclass(w.category, ReduceFailedOnWorker)]


def test_a_fold_that_fails_on_a_tasks_result_counts_it_once(broker, workers, tmp_path):
    """The reported 4,050: a task's result went alone *and* stayed in the half-folded partial."""
    names = workers.start(2, env=SMALL)
    got, h, said = run_map(broker, tmp_path, fails_on_odd_tasks, merge_fanin=1, **HOLD)
    assert got.tolist() == [1] * N, f"tasks counted {dict(enumerate(got.tolist()))}"
    assert int(got @ np.arange(N)) == 4005
    assert h.run.merging and h.run.partials_accepted >= 1
    told = h.reducer.worker_failures
    assert told and said, "the analyst is told the reduce failed on a worker"
    first = told[0]
    assert first.worker in names and first.remote_type == "MemoryError" and first.index % 2
    assert "a += b" in first.message and "fails_on_odd_tasks" in first.remote_traceback
    assert h.run.map_id in str(said[0].message) and first.worker in str(said[0].message)


def test_a_fold_that_fails_on_another_workers_partial_counts_its_tasks_once(broker, workers, tmp_path):
    """The reported 5,321 and 5,346: a merger's half-folded partial went up the tree while the
    partial it failed on went to the client too."""
    workers.start(3, env=SMALL)
    got, h, said = run_map(broker, tmp_path, fails_on_another_workers_partial(str(tmp_path)), merge_fanin=4,
                           **HOLD)
    assert got.tolist() == [1] * N, f"tasks counted {dict(enumerate(got.tolist()))}"
    assert int(got @ np.arange(N)) == 4005
    told = h.reducer.worker_failures
    assert told and said and all(e.remote_type == "MemoryError" for e in told)
    assert "another worker's partial" in told[0].message


def test_a_reduce_that_fails_on_the_client_too_fails_the_map_as_merge_false_does(broker, workers, tmp_path):
    """Its error, noted with the task it was folding and, when that value had failed on a
    worker first, with that worker and its traceback."""
    names = workers.start(2)
    with pytest.raises(ValueError, match="cannot fold task 45") as info:
        run_map(broker, tmp_path, fails_once_task_45_is_in, merge_fanin=1, **HOLD)
    text = "\n".join(getattr(info.value, "__notes__", []))
    assert "while folding the result of task" in text and "fix the reduce function" in text
    if "On worker" in text:        # the value it failed on had failed on a worker first
        assert any(f"On worker {name}" in text for name in names) and "Remote traceback" in text
