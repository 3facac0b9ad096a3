"""Exactly-once, proven on the pure map state (client/engine/state.py): random
interleavings of results, duplicates, user errors and their retries, faults, partials
covering overlapping (and malformed) sets of tasks, lost workers, the audit, backups,
timeouts, a vanished map, cancel and close go through :class:`MapState`; after every
step each task has been delivered at most once, the state's containers agree, and no
instruction sends a finished task again. At the end, every task is counted exactly once
(or cancelled).

The map's life in Redis goes through the state too (:mod:`client.engine.lifecycle`): the
model driver reports its writes as :class:`MapRun` does (tasks sent, the end signed, the
keys dropped or removed, some of those writes failing) and asks the state what is left to
do; the end is never signed twice, the keys are never removed before the map is closed
or its end signed, nothing is sent once the map is closed or ended.

No Redis, no clock, no threads: these run in a second (the quick tier)."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rhtc.broker.wire.messages import ErrorKind, Fault, FaultKind, ResultMeta, TaskError, WorkerStatus
from rhtc.broker.wire.protocol import TaskRef
from rhtc.client.engine import events as ev
from rhtc.client.engine.invariants import check
from rhtc.client.engine.lifecycle import (LIFECYCLE, Close, EndSigned, InvalidLifecycleMove, KeysDropped, Lifecycle,
                                          Phase, Removed, Sending, Unsent, Write, lifecycle_table)
from rhtc.client.engine.retry import RetryPolicy
from rhtc.client.engine.state import MapState
from rhtc.client.engine.tasks import InvalidTransition, TaskState
from rhtc.client.errors import RemoteError
from tests.helpers import examples

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

    @initialize(retries=st.integers(0, 2), delay=st.sampled_from([0.0, 5.0]), merging=st.booleans(),
                lost=st.booleans(), sign_fails=st.booleans(), remove_fails=st.booleans())
    def start(self, retries, delay, merging, lost, sign_fails, remove_fails):
        self.state = MapState(N, MAP, RetryPolicy(retries=retries, max_attempts=3, retry_delay=delay),
                              fingerprint=FP, merging=merging, describe=lambda i: f"arg{i}",
                              rng=random.Random(0))
        self.now = 100.0
        self.delivered: dict[int, int] = {}     # index -> times delivered
        self.finishes = 0
        self.values: dict[int, object] = {}
        # the driver's writes: how they go (a long map reads its lost runs before dropping
        # its keys; a write that fails is not tried again)
        self.lost, self.sign_fails, self.remove_fails = lost, sign_fails, remove_fails
        self.signs = self.removals = self.drops = self.closed_unfinished = 0
        self.write(Sending())                   # submit: the first tasks, the function with them

    # -- the driver's writes, as MapRun makes them --------------------------------------
    def write(self, event):
        life = self.state.life
        if isinstance(event, Sending):
            assert not life.closed and not life.end_signed_already, f"sent in phase {life.phase} (closed: {life.closed})"
        elif isinstance(event, EndSigned):
            self.signs += 1
        elif isinstance(event, Removed):
            assert life.closed or life.end_signed_already, "keys removed before the map was closed or ended"
            self.removals += 1
        elif isinstance(event, KeysDropped):
            assert life.end_signed_already, "keys dropped before the end was signed"
            self.drops += 1
        assert self.state.handle(event) == []

    def sign_end(self, drop: bool):
        if self.state.life.may_sign_end:
            self.write(EndSigned(dropped=drop and not self.sign_fails))

    def carry_out_finish(self):
        self.sign_end(drop=not self.lost)
        if self.lost and self.state.life.may_drop_keys:
            self.write(KeysDropped())

    def carry_out_cancel(self):
        if self.state.life.in_broker and not self.remove_fails:
            self.write(Removed(3))
        self.sign_end(drop=False)

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
                self.write(Sending())
            elif isinstance(ins, ev.Finish):
                self.finishes += 1
                self.carry_out_finish()
            elif isinstance(ins, ev.CancelMap):
                self.carry_out_cancel()
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

    @precondition(lambda self: self.state.tasks.unanswered > 0 and not self.state.life.closed)
    @rule(by=st.sampled_from([None, "alice@h"]))
    def cancel(self, by):
        out = self.apply(ev.Cancel(self.now, by))
        assert out == [ev.CancelMap(by)]
        assert self.apply(ev.Cancel(self.now)) == []        # a second cancel changes nothing

    @rule()
    def close(self):
        """The caller is done with the map (MapRun.close): its keys go, its end is signed."""
        s = self.state
        if s.life.closed:
            return
        self.write(Close())
        unfinished = self.closed_unfinished = s.tasks.unfinished
        if unfinished and s.life.in_broker:
            if not self.remove_fails:
                self.write(Removed(1))
        elif s.life.may_drop_keys:
            self.write(KeysDropped())
        self.sign_end(drop=not unfinished)

    # -- after every step ------------------------------------------------------------
    @invariant()
    def the_end_is_signed_once_and_keys_go_once_after_it(self):
        life = self.state.life
        assert self.signs <= 1 and self.drops <= 1
        assert life.end_signed_already == (self.signs == 1), (life.phase, self.signs)
        assert life.phase is not Phase.REMOVED or (life.closed and self.signs == 0)
        if self.state.cancelled:
            assert life.closed
        if self.finishes and not self.state.cancelled:      # every result in: its end is signed
            assert life.end_signed_already

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
        self.close()                        # the caller takes the results and closes the map
        life = s.life
        assert life.closed and self.signs == 1 and life.end_signed_already
        failed = self.sign_fails or self.remove_fails          # (a write that failed: the keys expire)
        assert life.phase is Phase.DROPPED or (failed and life.phase is Phase.ENDED), (life.phase, failed)
        if s.cancelled:
            assert all(s.tasks.is_final(i) for i in range(N))
            return
        if self.closed_unfinished:          # the caller left early: its retries are not sent
            return
        assert s.tasks.finished and self.finishes == 1
        assert sorted(self.delivered) == list(range(N)) and set(self.delivered.values()) == {1}
        for i, v in self.values.items():
            assert v == f"v{i}" or isinstance(v, int), (i, v)
        assert s.tasks.count(TaskState.DONE) + s.tasks.count(TaskState.FAILED) == N


TestMapState = MapStateMachine.TestCase
TestMapState.settings = settings(max_examples=examples(500), stateful_step_count=30, deadline=None, derandomize=True,
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


# -- the map's lifecycle ----------------------------------------------------------------------
def test_every_lifecycle_move_not_in_the_table_is_refused():
    paths = {Phase.NEW: [], Phase.SENT: [Sending()], Phase.ENDED: [Sending(), EndSigned()],
             Phase.DROPPED: [Sending(), EndSigned(dropped=True)], Phase.REMOVED: [Sending(), Close(), Removed(2)]}
    writes = {Write.SEND: Sending(), Write.TAKE_BACK: Unsent(), Write.SIGN_END: EndSigned(),
              Write.SIGN_END_AND_DROP: EndSigned(dropped=True), Write.DROP: KeysDropped(), Write.REMOVE: Removed(1)}
    assert set(writes) == set(Write)
    for a, path in paths.items():
        for w, event in writes.items():
            s = _state()
            for e in path:
                s.handle(e)
            assert s.life.phase is a
            if w is Write.REMOVE:
                s.handle(Close())          # (a removal needs the map closed: tested below)
            if (a, w) in LIFECYCLE and not (w is Write.SEND and s.life.closed):
                s.handle(event)
                assert s.life.phase is LIFECYCLE[a, w][0]
            else:
                with pytest.raises(InvalidLifecycleMove, match=f"map {MAP}: "):
                    s.handle(event)
                assert s.life.phase is a
    assert "removed" in lifecycle_table()


def test_the_end_is_never_signed_twice():
    s = _state()
    s.handle(Sending())
    s.handle(EndSigned(dropped=False))
    assert not s.life.may_sign_end and s.life.may_drop_keys
    with pytest.raises(InvalidLifecycleMove, match="end signed in phase ended .*new -> sent -> ended"):
        s.handle(EndSigned(dropped=False))


def test_nothing_is_sent_once_the_map_is_closed():
    s = _state(retries=1, retry_delay=5.0)
    s.handle(Sending())
    s.handle(ev.Raised(0, TaskError("OSError"), meta(), 1.0))        # a retry waits its back-off
    s.handle(Close())
    out = s.handle(ev.Tick(60.0)) + s.handle(ev.MapVanished(61.0)) + s.handle(ev.Audited(set(), 62.0)) + \
        s.handle(ev.Audited(set(), 63.0)) + s.handle(ev.Backup((1,), "straggler", 64.0))
    assert not [i for i in out if isinstance(i, ev.Enqueue)], out
    with pytest.raises(InvalidLifecycleMove, match="sent after the map was closed"):
        s.handle(Sending())
    assert check(s) == []


def test_keys_are_never_removed_before_the_map_is_closed():
    s = _state()
    s.handle(Sending())
    with pytest.raises(InvalidLifecycleMove, match="removed before it was closed or cancelled"):
        s.handle(Removed(1))
    assert s.handle(ev.Cancel(1.0)) == [ev.CancelMap()] and s.life.closed
    s.handle(Removed(1))
    s.handle(EndSigned())
    assert (s.life.phase, s.life.removed) == (Phase.DROPPED, 1)


def test_a_refused_start_taken_back_leaves_nothing_to_end():
    s = _state()
    s.handle(Sending())
    s.handle(Unsent())
    assert not s.life.in_broker and not s.life.may_sign_end and not s.life.may_drop_keys
    assert s.handle(ev.Cancel(1.0)) == [ev.CancelMap()] and s.life.phase is Phase.NEW


def test_a_map_state_holds_the_lifecycle_not_its_driver():
    """MapRun keeps no flag of the map's life of its own: it asks its state."""
    import inspect

    from rhtc.client.engine import maprun
    src = inspect.getsource(maprun)
    for flag in ("self.closed =", "self._sent", "self._end_signed", "self._dropped", "self._fn_uploaded",
                 "self._removed"):
        assert flag not in src, f"MapRun keeps {flag!r} of its own"
    assert isinstance(_state().life, Lifecycle)
