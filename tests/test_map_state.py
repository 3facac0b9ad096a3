"""Exactly-once, proven on the pure map state (issue 30): random interleavings of
results, duplicates, user errors and their retries, faults, partials covering
overlapping (and malformed) sets of tasks, lost workers, the audit, backups, timeouts,
a vanished map and cancel go through :class:`MapState`; after every step each task has
been delivered at most once, the state's containers agree, and no instruction sends a
finished task again. At the end, every task is counted exactly once (or cancelled).

No Redis, no clock, no threads: these run in a second (the quick tier)."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rhtc.broker.messages import ErrorKind, Fault, FaultKind, ResultMeta, TaskError, WorkerStatus
from rhtc.broker.protocol import TaskRef
from rhtc.client.engine import events as ev
from rhtc.client.engine.invariants import check
from rhtc.client.engine.retry import RetryPolicy
from rhtc.client.engine.state import MapState
from rhtc.client.engine.tasks import InvalidTransition, TaskState
from rhtc.client.errors import RemoteError

MAP = "00112233aabbccdd"
FP = "ours"
N = 8
tasks = st.integers(min_value=0, max_value=N - 1)
index_sets = st.lists(tasks, min_size=1, max_size=N, unique=True)


def meta(worker="w1", t=0.0) -> ResultMeta:
    return ResultMeta(worker=worker, host="h", pid=1, start=t, stop=t + 1.0)


def status(name, task=None, fingerprint=FP, seconds=0.0) -> WorkerStatus:
    return WorkerStatus(name=name, host="h", pid=1, incarnation="i", key_fingerprint=fingerprint, t=1.0,
                        task=None if task is None else TaskRef(MAP, task), task_seconds=seconds)


class MapStateMachine(RuleBasedStateMachine):
    """The driver as a model: it takes every result, remembers what it queued, and
    answers with events as workers and upkeep would."""

    @initialize(retries=st.integers(0, 2), delay=st.sampled_from([0.0, 5.0]), merging=st.booleans())
    def start(self, retries, delay, merging):
        self.state = MapState(N, MAP, RetryPolicy(retries=retries, max_attempts=3, retry_delay=delay),
                              fingerprint=FP, merging=merging, describe=lambda i: f"arg{i}",
                              rng=random.Random(0))
        self.now = 100.0
        self.delivered: dict[int, int] = {}     # index -> times delivered
        self.finishes = 0
        self.values: dict[int, object] = {}

    # -- the driver's side ------------------------------------------------------------
    def apply(self, event):
        self.now += 0.1
        before_final = {i for i in range(N) if self.state.tasks.is_final(i)}
        out = self.state.handle(event)
        for ins in out:
            if isinstance(ins, ev.Enqueue):
                assert len(set(ins.indices)) == len(ins.indices), f"{ins} queues a task twice"
                sent_final = set(ins.indices) & before_final
                assert not sent_final, f"{ins} sends finished task(s) {sent_final} again"
                assert not self.state.cancelled, f"{ins} after the map was cancelled"
            elif isinstance(ins, ev.Finish):
                self.finishes += 1
        for r in self.state.take():
            self.delivered[r.index] = self.delivered.get(r.index, 0) + 1
            if r.ok and not r.merged:
                self.values[r.index] = r.value
        return out

    # -- workers answer -----------------------------------------------------------------
    @rule(i=tasks, worker=st.sampled_from(["w1", "w2"]))
    def result(self, i, worker):
        self.apply(ev.Result(i, f"v{i}", meta(worker, self.now), self.now))

    @rule(indices=st.lists(tasks, min_size=1, max_size=4), worker=st.sampled_from(["w1", "w2"]))
    def results(self, indices, worker):      # one fetch's OK results (duplicates within it too)
        self.apply(ev.Results([(i, f"v{i}", meta(worker, self.now)) for i in indices], self.now))

    @rule(i=tasks, retryable=st.booleans())
    def raised(self, i, retryable):
        self.apply(ev.Raised(i, TaskError("OSError" if retryable else "ValueError", "boom"), meta(), self.now))

    @rule(i=tasks, kind=st.sampled_from(list(FaultKind)))
    def faulted(self, i, kind):
        self.apply(ev.Faulted(i, Fault(kind, "no", worker="w1"), self.now))

    @rule(i=tasks)
    def undecodable(self, i):
        self.apply(ev.Undecodable(i, RemoteError(i, "UndecodableResult", "numpy._core"), meta(), self.now))

    @rule(indices=index_sets, broken=st.sampled_from(["no"] * 4 + ["dup", "outside", "metas", "unpickles"]))
    def partial(self, indices, broken):
        metas = [meta("w3", self.now) for _ in indices]
        if broken == "dup":
            indices = indices + indices[:1]
            metas = metas + metas[:1]
        elif broken == "outside":
            indices = indices + [N + 3]
            metas = metas + metas[:1]
        elif broken == "metas":
            metas = metas[:-1]

        def load():
            if broken == "unpickles":
                raise ModuleNotFoundError("No module named 'numpy._core'", name="numpy._core")
            return sum(indices)
        self.apply(ev.Partial(list(indices), metas, load, self.now))

    @rule(i=tasks)
    def unverifiable(self, i):
        self.apply(ev.Unverifiable(i, "bad signature", self.now))

    # -- upkeep ---------------------------------------------------------------------
    @rule(running=st.lists(tasks, max_size=3), misfit=st.booleans())
    def observed(self, running, misfit):
        live = [status(f"r{k}", i, seconds=5.0) for k, i in enumerate(running)] + [status("idle")]
        if misfit:
            live.append(status("other", fingerprint="theirs"))
        self.apply(ev.Observed(live, self.now))

    @rule(in_broker=st.sets(tasks))
    def audited(self, in_broker):
        self.apply(ev.Audited(in_broker, self.now))

    @rule(indices=index_sets, timed=st.booleans())
    def backup(self, indices, timed):
        self.apply(ev.Backup(tuple(indices), "straggler", self.now, timed=timed))

    @rule(i=tasks, lost=st.booleans())
    def give_up(self, i, lost):
        kind = ErrorKind.WORKER_LOST if lost else ErrorKind.TASK_TIMEOUT
        history = "w1 1.0 2.0 killed\nw2 3.0 4.0 killed" if lost else ""
        self.apply(ev.GiveUp(i, RemoteError(i, kind, "gone", history=history), self.now))

    @rule()
    def vanished(self):
        self.apply(ev.MapVanished(self.now))

    @rule(worker=st.sampled_from(["w1", "ghost"]))
    def unclaimed(self, worker):
        out = self.apply(ev.Unclaimed(worker, "takes nothing", self.now))
        assert ev.TakeBack(worker) in out

    @rule(seconds=st.sampled_from([0.5, 6.0, 60.0]))
    def tick(self, seconds):
        self.now += seconds
        self.apply(ev.Tick(self.now))

    @precondition(lambda self: self.state.tasks.unanswered > 0)
    @rule(by=st.sampled_from([None, "alice@h"]))
    def cancel(self, by):
        out = self.apply(ev.Cancel(self.now, by))
        assert out == [ev.CancelMap(by)]
        assert self.apply(ev.Cancel(self.now)) == []        # a second cancel changes nothing

    # -- after every step ------------------------------------------------------------
    @invariant()
    def each_task_delivered_at_most_once(self):
        twice = {i: k for i, k in self.delivered.items() if k > 1}
        assert not twice, f"delivered more than once: {twice}"

    @invariant()
    def containers_agree(self):
        assert check(self.state) == []

    @invariant()
    def finish_comes_once_when_all_answered(self):
        assert self.finishes <= 1
        if self.finishes:
            assert self.state.tasks.unanswered == 0 and not self.state.cancelled

    def teardown(self):
        """The workers answer everything still owed; every task is counted exactly once."""
        if not hasattr(self, "state"):
            return
        s = self.state
        for _ in range(3):                  # back-offs pass; then the last copies answer
            self.now += 120.0
            self.apply(ev.Tick(self.now))
            for i in s.waiting():
                self.apply(ev.Result(i, f"v{i}", meta(), self.now))
        if s.cancelled:
            assert all(s.tasks.is_final(i) for i in range(N))
            return
        assert s.tasks.finished and self.finishes == 1
        assert sorted(self.delivered) == list(range(N)) and set(self.delivered.values()) == {1}
        for i, v in self.values.items():
            assert v == f"v{i}" or isinstance(v, int), (i, v)
        assert s.tasks.count(TaskState.DONE) + s.tasks.count(TaskState.FAILED) == N


TestMapState = MapStateMachine.TestCase
TestMapState.settings = settings(max_examples=500, stateful_step_count=30, deadline=None, derandomize=True,
                                 suppress_health_check=[HealthCheck.too_slow])


# -- regression cases (found by the machine above, and the table's promise) ---------------
def _state(**policy) -> MapState:
    return MapState(3, MAP, RetryPolicy(**policy), fingerprint=FP, describe=str)


def test_a_move_outside_the_table_raises_with_the_tasks_story():
    s = _state()
    s.handle(ev.Result(1, "v", meta(), 1.0))
    with pytest.raises(InvalidTransition, match=r"done -> queued .* task 1 of map .* is done.*Result"):
        s._move(1, TaskState.QUEUED)


def test_a_refused_task_whose_genuine_copy_raised_backs_off():
    s = _state(retries=1, retry_delay=5.0)
    s.handle(ev.Faulted(0, Fault(FaultKind.BAD_FRAME, "forged"), 1.0))
    assert s.tasks.state(0) is TaskState.REFUSED
    s.handle(ev.Raised(0, TaskError("OSError"), meta(), 2.0))
    assert s.tasks.state(0) is TaskState.BACKOFF and check(s) == []
    assert s.handle(ev.Tick(8.0)) == [ev.Enqueue([0])]


def test_a_partial_over_a_counted_task_is_refused_and_its_others_sent_again():
    s = MapState(4, MAP, RetryPolicy(), merging=True)
    s.handle(ev.Result(1, "v", meta(), 1.0))
    out = s.handle(ev.Partial([0, 1, 2], [meta()] * 3, lambda: 99, 2.0))
    assert out[-1] == ev.Enqueue([0, 2], route=False) and s.partials_refused == 1
    assert [r.index for r in s.take()] == [1] and check(s) == []


def test_the_last_refusal_fails_when_every_other_task_is_answered():
    s = _state()
    s.handle(ev.Faulted(0, Fault(FaultKind.BAD_FRAME, "forged"), 1.0))
    s.handle(ev.Result(1, "v", meta(), 2.0))
    assert s.handle(ev.Result(2, "v", meta(), 3.0)) == [ev.Finish()]
    got = {r.index: r for r in s.take()}
    assert got[0].error.remote_type == ErrorKind.WORKER_REFUSED and check(s) == []


def test_a_timed_backup_starts_the_clock_once_and_requeues_once():
    s = _state()
    first = s.handle(ev.Backup((2,), "over task_timeout", 5.0, timed=True))
    again = s.handle(ev.Backup((2,), "over task_timeout", 9.0, timed=True))
    assert ev.Enqueue([2], route=False) in first and again == []
    assert s.tasks.note(2).timed_since == 5.0


def test_a_partial_for_a_map_that_does_not_merge_costs_its_tasks_only():
    """Found by the machine: a partial reaching a map that does not merge crashed the
    state half-way (a task counted, then an IndexError); it is now refused whole."""
    s = _state()
    out = s.handle(ev.Partial([0, 1], [meta(), meta()], lambda: 1, 1.0))
    assert "does not merge" in out[0].message and out[-1] == ev.Enqueue([0, 1], route=False)
    assert s.take() == [] and check(s) == []
