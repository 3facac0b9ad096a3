"""The merge on a worker without a broker (:mod:`worker.merge`, its :class:`~worker.merge.Partials`).

A partial folds into a value of its own, never into what a task returned (an array a cache
serves, or one the task keeps).

The fold level: a reduce that raises on a worker. Whichever folds fail (before, during or
after writing into the partial; on a task's result or on another worker's partial; on
some workers only), every frame that reaches the client holds exactly the tasks it names,
no task is named twice, the client's fold of them gives ``merge=False``'s answer, and each
failure reaches the client once, naming its worker. A few workers (each a
:class:`~worker.merge.Partials`) run the tasks of one map in a drawn order, handing their
partials in or up a tree of partials (a pool other workers fold in) at drawn points; each
task ``i`` returns a one-hot count vector, so a frame's value shows which tasks it counts.
The end-to-end cases, with real workers: tests/scenarios/test_a_reduce_that_fails_on_workers.py.

The merger's bookkeeping (the tree of partials): whatever partials a worker is given to
fold in (its own tasks among them, overlapping each other, signed with another key, of
another map), its partial covers each task at most once, its value counts each covered
task once, and what it hands up names exactly the leases it stands for: its own tasks and
the partials it folded in. With real workers: tests/scenarios/test_workers_merge_each_others_partials.py.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rhtc.broker.wire import protocol
from rhtc.broker.wire.merge import MergePlan, Noted, decode_partial, is_partial_id, partial_id, unnoted
from rhtc.broker.wire.messages import ResultMeta, decode_result
from rhtc.client.reduce import Reducer
from rhtc.broker.wire.protocol import TaskRef
from rhtc.worker.merge import Partials
from tests.kits.readonly import add_in_place
from tests.helpers import examples

KEY, OTHER_KEY = b"k" * 32, b"o" * 32
MAP, OTHER_MAP = "0123456789abcdef", "fedcba9876543210"
MODES = ("before", "during", "after")


# -- the fold level: a reduce that raises on a worker ----------------------------------------
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
@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
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


# -- the merger's bookkeeping: what it folds in, what it hands up ----------------------------
PLAN = MergePlan(lambda i: Counter({i: 1}), None, 10_000, 3600.0, fanin=4)
META = ResultMeta(worker="w", host="h", pid=1, start=1.0, stop=2.0)


def partial_frame(indices: list[int], key: bytes = KEY, map_id: str = MAP) -> bytes:
    """The frame another worker hands up for ``indices`` (one task: a plain result)."""
    p = Partials(key, room=10_000)
    for i in indices:
        assert p.fold(PLAN, protocol.TaskRef(map_id, i), Counter({i: 1}), META)
    ((_, _, frame),) = p.flush()
    return frame


indices = st.lists(st.integers(0, 40), min_size=1, max_size=8, unique=True)
inputs = st.lists(st.tuples(indices, st.sampled_from(["ok", "ok", "ok", "other key", "other map"])), max_size=6)


@settings(max_examples=examples(150), deadline=None)
@given(own=indices, given_=inputs)
def test_a_merger_counts_each_task_once_and_names_what_it_stands_for(own, given_):
    p = Partials(KEY, room=10_000)
    for i in own:
        p.fold(PLAN, protocol.TaskRef(MAP, i), Counter({i: 1}), META)
    pairs, expect_folded, expect_aside, expect_dropped, covered = [], [], [], [], set(own)
    for seq, (idx, kind) in enumerate(given_):
        pid = partial_id(MAP, seq)
        key, map_id = (OTHER_KEY, MAP) if kind == "other key" else (KEY, OTHER_MAP if kind == "other map" else MAP)
        pairs.append((pid, partial_frame(idx, key, map_id)))
        if kind != "ok":
            expect_dropped.append(pid)
        elif covered & set(idx):
            expect_aside.append(pid)
        else:
            expect_folded.append(pid)
            covered |= set(idx)
    aside, dropped = p.absorb(MAP, pairs, read=lambda item: item)
    assert (aside, dropped) == (expect_aside, expect_dropped)
    part = p.open[MAP]
    assert sorted(part.indices) == sorted(covered) and len(part.indices) == len(set(part.indices))
    assert part.value == Counter({i: 1 for i in covered})
    assert part.tids == [protocol.TaskRef(MAP, i).task_id for i in own] + expect_folded
    assert all(is_partial_id(t) for t in part.folded) and not any(is_partial_id(t) for t in part.tids[:len(own)])
    ids, frame = p.pack_up(MAP)
    assert ids == b"".join(part.tids)
    map_id, first, status, payload = protocol.unpack_result(KEY, frame)
    if status == protocol.MERGED:
        got, metas, packed = decode_partial(payload)
    else:
        packed, got = decode_result(payload)[1], [first]
    assert map_id == MAP and got == part.indices and protocol.loads(packed) == part.value


def test_a_task_sent_again_while_folded_in_from_another_goes_with_the_partial():
    p = Partials(KEY, room=100)
    p.fold(PLAN, protocol.TaskRef(MAP, 0), Counter({0: 1}), META)
    pid = partial_id(MAP, 1)
    assert p.absorb(MAP, [(pid, partial_frame([5, 6]))], read=lambda item: item) == ([], [])
    again = protocol.TaskRef(MAP, 6)
    assert p.holds(again) and p.holds(again)          # not run again; its new lease goes along (once)
    assert p.open[MAP].tids == [protocol.TaskRef(MAP, 0).task_id, pid, again.task_id]


def test_a_partial_whose_blob_is_gone_is_dropped_not_folded():
    p = Partials(KEY, room=100)
    p.fold(PLAN, protocol.TaskRef(MAP, 0), Counter({0: 1}), META)
    assert p.absorb(MAP, [(partial_id(MAP, 1), b"stub")], read=lambda item: None) == ([], [partial_id(MAP, 1)])
    assert p.open[MAP].value == Counter({0: 1})


# -- a partial's value is its own -------------------------------------------------------------

def test_a_partial_never_folds_into_what_a_task_returned():
    served = np.arange(4.0)                # e.g. an array a cache serves, or the task keeps
    before = served.copy()
    p = Partials(b"k" * 32, room=100)
    plan = MergePlan(abs, add_in_place, 10, 60.0)
    meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0)
    assert p.fold(plan, TaskRef("0123456789abcdef", 0), served, meta)
    assert p.fold(plan, TaskRef("0123456789abcdef", 1), np.ones(4), meta)
    assert served.tolist() == before.tolist()
    assert p.open["0123456789abcdef"].value.tolist() == (before + 1).tolist()
