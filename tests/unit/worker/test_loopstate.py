"""The worker's task loop, proven on its pure state (:class:`rhtc.worker.loopstate.LoopState`):
random interleavings of takes (fresh tasks, tasks handed back and requeued, a folded
task sent again), runs ending every way (a result, a fold, a fold that raised, a refusal,
a dropped task), partials going in or up the tree, idle waits, broker trouble at any
broker call (before or after a task's result was kept), a stop and SIGTERM inside the
user's code go through the state, driven by a model of its driver and of the broker.

After every step: the state agrees with the world (what it says waits in the outbox or
with the partials is exactly what does), no task is held twice, nothing is run twice
nor handed in without its lease (the broker model asserts it), no partial covers a task
twice, and no task starts while a partial of another map is open here (whatever the
backlogs the takes reported). At the end (the worker stops): every task taken was handed
in or handed back.

Which examples a derandomized run draws depends on more than the seed: hypothesis mixes
in constants it finds in every local module imported so far (its "local constants", read
from ``sys.modules`` and cached at first use), so the same test draws other interleavings
after another test module was imported (the warm cache's tests, say). Run after it, this test
once found two bugs the run alone missed (see the two regression tests at the end); its
settings are its own (not the loaded profile's), and it must pass on whatever it draws.

No Redis, no clock, no threads: these run in seconds (the quick tier)."""
from __future__ import annotations

import collections
import functools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rhtc.broker.wire.protocol import TaskRef
from rhtc.worker import loopevents as ev
from rhtc.worker.loopstate import (ALONE, BACK, DONE, FOLDED, LEASED, RUNNING, InvalidMove, LoopState,
                                   transitions_table)
from tests.helpers import examples

#: the test's own settings, built on hypothesis' defaults rather than on whatever profile
#: another module loaded (a ``settings(...)`` inherits the current profile's other fields)
SETTINGS = settings(settings.get_profile("default"), max_examples=examples(400), stateful_step_count=60, deadline=None,
                    derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow])

MAPS = ["00112233aabbccd0", "00112233aabbccd1", "00112233aabbccd2"]
BROKER_CALLS = (ev.Take, ev.HandIn, ev.GoUp, ev.IdleWait, ev.Probe, ev.Run, ev.Publish)
HOLDING = st.sampled_from([True] * 5 + [False])
OUTCOME = st.sampled_from([ev.RESULT, ev.RESULT, ev.FOLDED, ev.FOLDED, ev.ALONE, ev.REFUSED, ev.DROPPED])
SECONDS = st.sampled_from([None, 1e-4, 0.5])
FATE = st.sampled_from(["up", "stays", "errors"])
COIN = st.booleans()
#: the teardown's choices (no hypothesis data there): no trouble, no new tasks
QUIET = {id(HOLDING): True, id(OUTCOME): ev.RESULT, id(SECONDS): None, id(FATE): "up", id(COIN): False}


def quiet(strategy):
    """The teardown's draw: the QUIET choice, the least of a range, an empty set."""
    if id(strategy) in QUIET:
        return QUIET[id(strategy)]
    return set() if "sets(" in repr(strategy) else 0


class World:
    """The driver's stores (outbox, partials) and the broker's leases, as sets of task ids."""

    def __init__(self):
        self.leased: set[bytes] = set()           # leased to this worker in the broker
        self.queue: list[bytes] = []              # handed back: queued again
        self.fresh = 0
        self.outbox: list[bytes] = []             # frames waiting for a hand-in
        self.open: dict[str, set[bytes]] = {}     # map -> its open partial's tasks
        self.absorbed: dict[str, set[bytes]] = {} # map -> tasks its partial covers by others' partials
        self.again: dict[str, set[bytes]] = {}    # ... of those, leased here again (Partial.again)
        self.ready: dict[bytes, int] = {}         # closed partials' leftovers: FOLDED / ALONE
        self.batch: list[bytes] = []
        self.held: list[bytes] = []
        self.handed_in = collections.Counter()
        self.taken: set[bytes] = set()

    def in_partials(self) -> set[bytes]:
        return set().union(*self.open.values()) | set(self.ready)

    def hand_in(self, tids) -> None:
        for t in tids:
            assert t in self.leased, f"task {t!r} handed in without its lease (twice?)"
            self.leased.discard(t)
            self.handed_in[t] += 1

    def reconcile(self) -> None:
        """The supervisor: what is leased here but held by nobody goes back to the queue."""
        kept = set(self.held) | set(self.outbox) | self.in_partials()
        for t in sorted(self.leased - kept):
            self.leased.discard(t)
            self.queue.append(t)

    def close(self, m: str) -> list[bytes]:
        """The open partial of ``m`` leaves: its tasks (those leased here again with it)."""
        self.absorbed.pop(m, None)
        self.again.pop(m, None)
        return sorted(self.open.pop(m, ()))

    def pack(self, maps) -> list[bytes]:
        out = []
        for m in maps:
            out += self.close(m)
        out += list(self.ready)
        self.ready.clear()
        self.outbox += out
        return out


def marks_failure(method):
    """A rule or invariant that raises marks the machine failed, so that the teardown (run
    after a failure too) does not hide the first failure behind its own."""
    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.failed = True
            raise
    return checked


class LoopMachine(RuleBasedStateMachine):
    failed = False

    @initialize(max_batch=st.integers(1, 4))
    def start(self, max_batch):
        self.s = LoopState(max_batch)
        self.w = World()
        self.now = 0.0
        self.stopping = False
        self.pending = collections.deque(self.s.handle(ev.Start(self.now)))

    # -- the driver ---------------------------------------------------------------------
    def feed(self, event) -> None:
        if self.stopping and not self.s.stopping:
            self.s.handle(ev.Stop(event.now))
        self.pending.extendleft(reversed(self.s.handle(event)))

    def do(self, ins, draw):
        w, now = self.w, self.now
        if isinstance(ins, ev.Take):
            assert 1 <= ins.n <= self.s.max_batch
            w.hand_in(w.outbox)
            w.outbox = []
            holding = draw(HOLDING)
            batch = [self.lease(draw) for _ in range(draw(st.integers(0, ins.n)))] if holding else []
            covered = set().union(*w.open.values(), *(w.absorbed.get(m, ()) for m in w.open))
            again = [t for t in sorted(covered) if t not in batch]
            if holding and again and draw(COIN):     # a restart lost its lease; sent again
                batch.append(draw(st.sampled_from(again)))
                w.leased.add(batch[-1])
            w.batch = batch
            return ev.Took(holding, list(batch), set(draw(st.sets(st.sampled_from(MAPS)))), now)
        if isinstance(ins, ev.Run):
            tid = w.batch[ins.k]
            self.starts(tid)
            assert tid in w.leased, f"task {tid!r} run without its lease"
            assert tid not in w.outbox and tid not in w.ready, f"task {tid!r} run twice"
            m = TaskRef.from_task_id(tid).map_id
            if tid in w.open.get(m, ()):
                return ev.Ran(tid, ev.AGAIN, None, now)       # (the driver's Partials.holds)
            if tid in w.absorbed.get(m, ()):                  # (holds: the new lease goes with it)
                w.absorbed[m].discard(tid)
                w.open[m].add(tid)
                w.again.setdefault(m, set()).add(tid)
                return ev.Ran(tid, ev.AGAIN, None, now)
            outcome = draw(OUTCOME)
            self.keep(tid, outcome)
            return ev.Ran(tid, outcome, draw(SECONDS), now)
        if isinstance(ins, ev.Hold):
            w.held = list(ins.batch)
            w.reconcile()
            return None
        if isinstance(ins, ev.HandIn):
            w.hand_in(w.outbox)
            w.outbox = []
            return ev.HandedIn(now)
        if isinstance(ins, ev.PartialsDue):
            maps = draw(st.sets(st.sampled_from(sorted(w.open)))) if w.open else set()
            return ev.PartialsOut(w.pack(sorted(maps)), False, now)
        if isinstance(ins, ev.Close):
            return ev.PartialsOut(w.pack(ins.maps), ins.flush, now)
        if isinstance(ins, ev.FlushPartials):
            return ev.PartialsOut(w.pack(list(w.open)), True, now)
        if isinstance(ins, ev.GoUp):
            gone = []
            for m in ins.maps:
                if m not in w.open:
                    continue
                fate = draw(FATE)
                if fate == "stays" and draw(COIN):             # it folded in another worker's partial
                    w.fresh += 1
                    w.absorbed.setdefault(m, set()).add(TaskRef(m, w.fresh).task_id)
                if fate == "up":
                    up = w.close(m)
                    w.hand_in(up)
                    gone += up
                elif fate == "errors":                         # pack_up: it cannot travel: its own
                    again = w.again.get(m, set())              # tasks' errors wait, ready; the leases
                    own = [t for t in w.close(m) if t not in again]     # of those leased again are
                    w.ready.update(dict.fromkeys(own, ev.FOLDED))       # no longer held (the supervisor
                    gone += sorted(again)                               # requeues them)
            return ev.WentUp(gone, now)
        if isinstance(ins, ev.IdleWait):
            assert not w.outbox or not self.s.counts[FOLDED], "idle with partials not handed in"
            tid = self.lease(draw) if draw(COIN) else None
            w.batch = [tid] if tid else w.batch
            return ev.Woke(tid, now)
        if isinstance(ins, ev.Probe):
            return ev.Probed(draw(COIN), now)
        if isinstance(ins, ev.Pause):
            self.now = max(now, ins.until)
            return ev.Tick(self.now)
        if isinstance(ins, ev.Exit):                           # the shutdown hands everything in
            w.pack(list(w.open))
            w.hand_in(w.outbox)
            w.outbox = []
            w.held = []
            w.reconcile()
            self.exited = True
            return None
        return None                                            # Publish, Recovered

    def lease(self, draw) -> bytes:
        w = self.w
        if w.queue and draw(COIN):
            tid = w.queue.pop(0)
        else:
            w.fresh += 1
            tid = TaskRef(MAPS[w.fresh % len(MAPS)], w.fresh).task_id
        w.leased.add(tid)
        w.taken.add(tid)
        return tid

    def starts(self, tid: bytes) -> None:
        """Task ``tid`` starts: no partial of another map is open here (one would keep its
        client waiting for this task, however long it runs)."""
        m = TaskRef.from_task_id(tid).map_id
        waiting = sorted(other for other in self.w.open if other != m)
        assert not waiting, f"task {tid!r} of map {m} starts while the partials of {waiting} are open here"

    def keep(self, tid: bytes, outcome: int) -> None:
        w = self.w
        if outcome in (ev.RESULT, ev.REFUSED):
            w.outbox.append(tid)
        elif outcome == ev.FOLDED:
            m = TaskRef.from_task_id(tid).map_id
            assert tid not in w.in_partials(), f"task {tid!r} folded twice"
            w.open.setdefault(m, set()).add(tid)
        elif outcome == ev.ALONE:
            w.ready[tid] = ev.ALONE

    # -- rules ------------------------------------------------------------------------------
    @precondition(lambda self: self.pending)
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.001, 3.0, 11.0]), n=st.integers(1, 8))
    @marks_failure
    def step(self, data, dt, n):
        """The driver does the next ``n`` instructions (the invariants checked after each)."""
        self.now += dt
        for _ in range(n):
            ins = self.pending.popleft()
            event = self.do(ins, data.draw)
            if event is not None:
                self.feed(event)
            if not self.pending:
                break
            self.the_state_agrees_with_the_world()
            self.no_task_held_twice()

    @precondition(lambda self: self.pending and isinstance(self.pending[0], BROKER_CALLS))
    @rule(data=st.data())
    @marks_failure
    def trouble(self, data):
        """The broker fails during the next instruction (a Run's: before it ran, or after
        its result was kept); the driver settles the task in hand and feeds Trouble."""
        ins = self.pending.popleft()
        s, w = self.s, self.w
        if isinstance(ins, ev.GoUp) and data.draw(st.booleans()):     # the tree failed half way:
            for m in ins.maps:                                        # others' partials folded in
                if m in w.open:                                       # stay (a task they cover may
                    w.fresh += 1                                      # come back leased)
                    w.absorbed.setdefault(m, set()).add(TaskRef(m, w.fresh).task_id)
        if isinstance(ins, ev.Run) and data.draw(st.booleans()):
            tid = self.w.batch[ins.k]
            m = TaskRef.from_task_id(tid).map_id
            if tid not in self.w.open.get(m, ()) and tid not in self.w.absorbed.get(m, ()):
                self.starts(tid)
                outcome = data.draw(st.sampled_from([ev.RESULT, ev.FOLDED, ev.ALONE]))
                self.keep(tid, outcome)
                s.handle(ev.Ran(tid, outcome, None, self.now))          # (the driver's _settle_running)
        self.pending = collections.deque(s.handle(ev.Trouble(self.now)))

    @precondition(lambda self: self.pending and isinstance(self.pending[0], ev.Run)
                  and self.s.state(self.w.batch[self.pending[0].k]) is RUNNING)
    @rule()
    @marks_failure
    def sigterm_in_user_code(self):
        self.pending.popleft()
        self.stopping = True
        self.pending = collections.deque(self.s.handle(ev.HandedBack(self.now)))

    @rule()
    def stop(self):
        self.stopping = True

    # -- after every step -------------------------------------------------------------------
    @invariant()
    @marks_failure
    def the_state_agrees_with_the_world(self):
        if not hasattr(self, "s") or getattr(self, "exited", False):
            return
        s, w = self.s, self.w
        by = collections.defaultdict(set)
        for t, state in s.tasks.items():
            by[state].add(t)
        assert by[DONE] == set(w.outbox), f"DONE {by[DONE]} but the outbox holds {w.outbox}"
        folded = set().union(*w.open.values()) | {t for t, k in w.ready.items() if k == ev.FOLDED}
        assert by[FOLDED] == folded, f"FOLDED {by[FOLDED]} but the partials hold {folded}"
        assert by[ALONE] == {t for t, k in w.ready.items() if k == ev.ALONE}
        assert (by[LEASED] | by[RUNNING]) <= w.leased, "a task in hand that is not leased here"
        assert by[BACK] <= set(w.batch), "a task handed back that was never in hand"
        assert s.counts[RUNNING] <= 1, "two tasks running at once"

    @invariant()
    @marks_failure
    def no_task_held_twice(self):
        if not hasattr(self, "w"):
            return
        w = self.w
        assert len(set(w.outbox)) == len(w.outbox), f"a result twice in the outbox: {w.outbox}"
        assert not set(w.outbox) & w.in_partials(), "a task both in the outbox and in a partial"
        assert all(k == 1 for k in collections.Counter(t for p in w.open.values() for t in p).values())

    def teardown(self):
        """The worker stops; every task taken was handed in or handed back."""
        if not hasattr(self, "s") or self.failed:
            return
        self.stopping = True
        for _ in range(500):
            if not self.pending:
                break
            ins = self.pending.popleft()
            event = self.do(ins, quiet)
            if event is not None:
                self.feed(event)
        assert getattr(self, "exited", False), f"the loop never exited: {self.pending}"
        left = {t: s.name for t, s in ((t, self.s.state(t)) for t in self.s.tasks) if s in (LEASED, RUNNING, BACK)}
        assert not left, f"tasks neither handed in nor handed back: {left}"
        assert not self.w.leased, f"still leased after the exit: {self.w.leased}"


TestWorkerLoop = LoopMachine.TestCase
TestWorkerLoop.settings = SETTINGS


# -- the table's promise --------------------------------------------------------------------
def test_a_task_taken_twice_raises():
    s = LoopState(4)
    s.handle(ev.Start(0.0))
    tid = TaskRef(MAPS[0], 1).task_id
    s.handle(ev.Took(True, [tid], set(), 1.0))
    with pytest.raises(InvalidMove, match="leased -> leased|running -> leased"):
        s.handle(ev.Took(True, [tid], set(), 2.0))


def test_the_batch_grows_with_fast_tasks_and_the_backoff_doubles_to_its_cap():
    s = LoopState(64)
    s.handle(ev.Start(0.0))
    now = 0.0
    for i in range(80):
        tid = TaskRef(MAPS[0], i).task_id
        s.handle(ev.Took(True, [tid], set(), now))
        out = s.handle(ev.Ran(tid, ev.RESULT, 1e-5, now))
    assert out[-1] == ev.Take(64)
    pauses = []
    for _ in range(8):
        pauses.append(s.handle(ev.Trouble(now))[-1].until - now)
    assert pauses[:3] == [0.1, 0.2, 0.4] and pauses[-1] == 5.0
    assert ev.Recovered() in s.handle(ev.Took(True, [], set(), now))


def test_the_table_reads_as_text():
    assert transitions_table().splitlines()[0].split() == ["from", "to", "why"]
    assert "folded" in transitions_table()


# -- bugs the stateful test found -------------------------------------------------------------
A, B = TaskRef(MAPS[0], 1).task_id, TaskRef(MAPS[1], 2).task_id


def test_a_task_sent_again_is_not_run_once_its_partial_went_in():
    """A task leased again while folded here (a restarted broker lost its lease) whose
    partial goes into the outbox before the task's turn in the batch is not run: its lease
    goes with the partial. The state used to decide the run before the partials that were
    due went out: the task ran again (counted twice), its result handed in without its lease."""
    s = LoopState(4)
    s.handle(ev.Start(0.0))
    s.handle(ev.Took(True, [A], set(), 0.0))
    assert s.handle(ev.Ran(A, ev.FOLDED, None, 0.0)) == [ev.PartialsDue()]
    s.handle(ev.PartialsOut([], False, 0.0))
    a3 = TaskRef(MAPS[0], 3).task_id                       # (of A's map: its partial stays open)
    assert s.handle(ev.Took(True, [a3, A], {MAPS[0]}, 0.0))[-1] == ev.Run(0)   # A sent again
    assert s.handle(ev.Ran(a3, ev.RESULT, None, 0.0)) == [ev.PartialsDue()]   # (no Run yet)
    out = s.handle(ev.PartialsOut([A], False, 0.0))        # A's partial was due: it went in
    assert ev.Run(1) not in out and out[0] == ev.Publish(), out
    assert s.state(A) is DONE


def test_a_task_sent_again_is_not_run_once_its_partial_went_up_the_tree():
    """The same, when the partial goes up the tree before another map's task (the run is
    decided once the partials of the maps at their end went up or in: after Close)."""
    s = LoopState(4)
    s.handle(ev.Start(0.0))
    s.handle(ev.Took(True, [A], set(), 0.0))
    s.handle(ev.Ran(A, ev.FOLDED, None, 0.0))
    s.handle(ev.PartialsOut([], False, 0.0))
    out = s.handle(ev.Took(True, [B, A], set(), 0.0))      # map 0's backlog is empty: it ends
    assert out[1:] == [ev.HandIn(), ev.GoUp([MAPS[0]], 1), ev.Hold([B, A]), ev.Close([MAPS[0]])]
    s.handle(ev.HandedIn(0.0))
    s.handle(ev.WentUp([A], 0.0))                         # A's partial (and A's new lease) went up
    assert s.handle(ev.PartialsOut([], True, 0.0)) == [ev.Run(0)]
    assert s.handle(ev.Ran(B, ev.RESULT, None, 0.0))[0] == ev.Publish()      # A is not run
    assert s.state(A).name == "FREE"


def test_a_task_that_a_partial_folded_in_here_covers_goes_with_it():
    """A task leased here (again) that a partial folded in from another worker covers is not
    run (the driver finds it in the partial: AGAIN) and goes with that partial; the state
    used to raise InvalidMove there, ending the task process."""
    s = LoopState(4)
    s.handle(ev.Start(0.0))
    s.handle(ev.Took(True, [B], set(), 0.0))
    assert s.handle(ev.Ran(B, ev.AGAIN, None, 0.0)) == [ev.PartialsDue()]
    assert s.state(B) is FOLDED and s.partial_maps == {MAPS[1]: 1}
    s.handle(ev.PartialsOut([B], False, 0.0))
    assert s.state(B) is DONE


# -- a partial never waits behind another map's task -------------------------------------------
@pytest.mark.parametrize("batches", [[[A], [B]], [[A, B]]], ids=["B taken next", "a batch of A and B"])
def test_a_partial_goes_before_another_maps_task_whatever_its_backlog(batches):
    """Before a task of map 1 starts, map 0's open partial goes up the tree (or in) even
    though map 0's backlog still held tasks at the take: kept open, it waited for map 1's
    task however long that ran, and map 0's client with it (the state used to let it wait
    whenever the map's backlog was not empty, which it is while the maps take turns)."""
    s = LoopState(4)
    s.handle(ev.Start(0.0))
    backlogged = {MAPS[0], MAPS[1]}                        # both maps' backlogs hold tasks
    s.handle(ev.Took(True, batches[0], backlogged, 0.0))
    assert s.handle(ev.Ran(A, ev.FOLDED, None, 0.0)) == [ev.PartialsDue()]
    out = s.handle(ev.PartialsOut([], False, 0.0))         # (nothing was due)
    if len(batches) > 1:
        assert out == [ev.Publish(), ev.Take(1)]
        out = s.handle(ev.Took(True, batches[1], backlogged, 0.0))[1:]
    batch = batches[-1]
    assert out == [ev.HandIn(), ev.GoUp([MAPS[0]], 1), ev.Hold(batch), ev.Close([MAPS[0]])], out
    s.handle(ev.HandedIn(0.0))
    s.handle(ev.WentUp([A], 0.0))                           # it went up (pooled: its map goes on)
    assert s.handle(ev.PartialsOut([], True, 0.0)) == [ev.Run(batch.index(B))]
    assert not s.partial_maps
