"""A reduce that raises on a worker, without a broker (the fold level of the merge on the
workers, :mod:`worker.merge`): whichever folds fail (before, during or after writing into
the partial; on a task's result or on another worker's partial; on some workers only),
every frame that reaches the client holds exactly the tasks it names, no task is named
twice, the client's fold of them gives ``merge=False``'s answer, and each failure reaches
the client once, naming its worker.

A few workers (each a :class:`~worker.merge.Partials`) run the tasks of one map in a drawn
order, handing their partials in or up a tree of partials (a pool other workers fold in)
at drawn points; each task ``i`` returns a one-hot count vector, so a frame's value shows
which tasks it counts. The end-to-end cases, with real workers: tests/test_merge_fold_fails_e2e.py.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rhtc.broker.wire import protocol
from rhtc.broker.wire.merge import MergePlan, Noted, decode_partial, partial_id, unnoted
from rhtc.broker.wire.messages import ResultMeta, decode_result
from rhtc.client.reduce import Reducer
from rhtc.worker.merge import Partials

KEY = b"k" * 32
MAP = "0123456789abcdef"
MODES = ("before", "during", "after")


@dataclasses.dataclass
class Faults:
    """Which calls of the reduce function raise, per worker: ``schedule[w][k]`` is how the
    ``k``-th fold on worker ``w`` fails (before writing, halfway, after writing), if it does."""

    schedule: list[dict[int, str]]
    active: int = 0                      # the worker folding now
    calls: list[int] = dataclasses.field(default_factory=list)
    raised: int = 0

    def __post_init__(self):
        self.calls = [0] * len(self.schedule)

    def next(self) -> str | None:
        k, self.calls[self.active] = self.calls[self.active], self.calls[self.active] + 1
        mode = self.schedule[self.active].get(k)
        self.raised += mode is not None
        return mode

    def in_place(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a += b``, the way an analyst writes a reduce, failing as scheduled."""
        mode = self.next()
        if mode == "before":
            raise MemoryError("before a += b")
        if mode == "during":
            half = len(a) // 2
            a[:half] += b[:half]
            raise MemoryError("halfway through a += b")
        a += b
        if mode == "after":
            raise MemoryError("after a += b")
        return a


FAULTS: Faults | None = None     # what Vec's + consults (reduce=True folds with +)


class Vec:
    """A count vector whose ``+`` (a new Vec, as ``combine`` expects) fails as scheduled."""

    def __init__(self, v: np.ndarray):
        self.v = v

    def __add__(self, other: "Vec") -> "Vec":
        mode = FAULTS.next()
        out = self.v + other.v
        if mode is not None:
            raise MemoryError(f"{mode} a + b")
        return Vec(out)


def counts(value) -> np.ndarray:
    return value.v if isinstance(value, Vec) else value


@dataclasses.dataclass
class Received:
    """What the client took in: each frame's tasks, its value, the failures it carried."""

    tasks: list[list[int]] = dataclasses.field(default_factory=list)
    values: list = dataclasses.field(default_factory=list)
    failures: list = dataclasses.field(default_factory=list)

    def take(self, frame: bytes) -> None:
        map_id, index, status, payload = protocol.unpack_result(KEY, frame)
        assert map_id == MAP and status in (protocol.OK, protocol.MERGED), f"status {status}"
        if status == protocol.OK:
            indices, packed = [index], decode_result(payload)[1]
        else:
            indices, _, packed = decode_partial(payload)
        self.tasks.append(indices)
        self.values.append(protocol.loads(packed))
        self.failures += unnoted(self.values[-1])[1]


def run_map(n: int, workers: int, assign: list[int], order: list[int], steps: list[tuple[str, int]],
            faults: Faults, in_place: bool) -> Received:
    """The map's tasks on ``workers`` workers; after each task, its worker goes on
    (``steps``: "on"), hands everything in ("in"), or hands its partial up the tree
    ("up", folding in up to that many partials of the pool first); at the end each hands
    in what it holds and the pool goes to the client."""
    global FAULTS
    FAULTS = faults
    plan = MergePlan(lambda i: i, faults.in_place if in_place else None, 10**6, 1e9, fanin=4)
    parts = [Partials(KEY, room=10**6) for _ in range(workers)]
    client, pool, seq = Received(), [], 0
    for i, (step, fanin) in zip(order, steps):
        w = assign[i]
        faults.active = w
        one = np.zeros(n, dtype=np.int64)
        one[i] = 1
        meta = ResultMeta(worker=f"w{w}", host=f"n{w}", pid=w, start=1.0, stop=2.0)
        if not parts[w].fold(plan, protocol.TaskRef(MAP, i), one if in_place else Vec(one), meta):
            raise AssertionError(f"task {i}'s result could not start a partial")
        for _, _, frame in parts[w].due():
            client.take(frame)
        if step == "in":
            for _, _, frame in parts[w].flush():
                client.take(frame)
        elif step == "up" and MAP in parts[w].open:
            given_, pool = pool[:fanin], pool[fanin:]
            frames = dict(given_)
            aside, dropped = parts[w].absorb(MAP, given_, lambda frame: frame)
            assert not dropped, "every partial given is readable"
            for pid in aside:
                client.take(frames[pid])
            packed = parts[w].pack_up(MAP)
            assert packed is not None, "the partial can travel"
            parts[w].open.pop(MAP)                   # (the broker took it: it left this worker)
            seq += 1
            pool.append((partial_id(MAP, seq), packed[1]))
            for _, _, frame in parts[w].due():
                client.take(frame)
    for w, p in enumerate(parts):
        faults.active = w
        for _, _, frame in p.flush():
            client.take(frame)
    for _, frame in pool:
        client.take(frame)
    return client


@st.composite
def maps(draw):
    n = draw(st.integers(2, 14))
    workers = draw(st.integers(1, 3))
    assign = draw(st.lists(st.integers(0, workers - 1), min_size=n, max_size=n))
    order = draw(st.permutations(range(n)))
    steps = draw(st.lists(st.tuples(st.sampled_from(["on", "on", "in", "up", "up"]), st.integers(1, 3)),
                          min_size=n, max_size=n))
    schedule = [draw(st.dictionaries(st.integers(0, 2 * n), st.sampled_from(MODES), max_size=n))
                for _ in range(workers)]             # (an empty one: a worker where nothing fails)
    return n, workers, assign, order, steps, Faults(schedule), draw(st.booleans())


@pytest.mark.filterwarnings("ignore::rhtc.client.reduce.ReduceFailedOnWorker")
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(maps())
def test_failed_folds_never_change_the_answer_nor_count_a_task_twice(case):
    n, workers, assign, order, steps, faults, in_place = case
    got = run_map(n, workers, assign, order, steps, faults, in_place)
    named = [i for tasks in got.tasks for i in tasks]
    assert sorted(named) == list(range(n)), f"tasks named by the frames: {sorted(named)}"
    for tasks, value in zip(got.tasks, got.values):      # each frame holds exactly what it names
        want = np.zeros(n, dtype=np.int64)
        want[tasks] = 1
        assert counts(unnoted(value)[0]).tolist() == want.tolist(), f"a frame naming {tasks}"
    FAULTS.schedule = [{}] * workers                     # the client's fold does not fail
    reducer = Reducer(faults.in_place if in_place else None)
    for value in got.values:
        reducer.add(value)
    assert counts(reducer.value).tolist() == [1] * n        # merge=False's answer
    assert len(got.failures) == faults.raised, "each failure reaches the client once"
    assert len(reducer.worker_failures) == faults.raised
    assert all(f.worker == f"w{int(f.host[1:])}" and f.error["type"] == "MemoryError" for f in got.failures)


def test_a_fold_that_raises_halfway_leaves_the_partial_as_it_was_and_sends_the_value_on():
    """The reported case, one fold: a partial of tasks 0 and 1; folding task 2's result
    raises halfway through ``a += b``."""
    faults = Faults([{1: "during"}])
    plan = MergePlan(abs, faults.in_place, 100, 60.0)
    p = Partials(KEY, room=100)
    meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0)
    for i in range(3):
        assert p.fold(plan, protocol.TaskRef(MAP, i), np.eye(3, dtype=np.int64)[i] * (i + 1), meta)
    assert p.open[MAP].value.tolist() == [1, 2, 0] and p.open[MAP].indices == [0, 1]
    got = Received()
    for _, _, frame in p.flush():
        got.take(frame)
    assert got.tasks == [[2], [0, 1]]
    alone, partial = got.values
    assert isinstance(alone, Noted) and alone.value.tolist() == [0, 0, 3]
    (failure,) = alone.failures
    assert (failure.worker, failure.tasks, failure.into, failure.partial) == ("w1", (2,), 2, False)
    assert "halfway through a += b" in failure.error["message"] and "in_place" in failure.error["traceback"]
    assert partial.tolist() == [1, 2, 0]
