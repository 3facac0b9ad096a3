"""The audit finds a map's tasks wherever they move under it, in calls that do not grow
with the pool.

The client's audit (``storage.maps.audit``) tells which of a map's waiting tasks are
nowhere in the broker; one missing from two audits in a row is sent again. It used to walk
the queues, then every registered worker's lease, a call each (a thousand calls at 1,000
workers), then the map's lists. At a map's end the tree of partials moves partials both
ways under such a walk: a worker parks its partial (its tasks leave its lease for the
map's pool), a merger takes partials from the pool into its lease and hands its merged
partial up again. At 1,000 workers x 1 MB the walk missed 15 tasks, which were sent again
("vanished from the broker; resubmitting them"). Walking again whenever a merger took a
partial (the map's partial sequence changed) fixed the one move it counted, but a tree
that moved a partial under every walk left the audit unable to tell (None: a task really
lost was then never sent again while the tree was busy), and a task given back from a
lease the walk had not read to the shared queue it had read, then taken by a worker it
had read, was still seen nowhere.

Now the scripts that move tasks keep per-map indexes of the workers that may hold them
(tests/integration/test_map_indexes.py), and the audit reads everything past the map's
queues (the shared queue's last window, those leases, the pool) in one atomic call
(lua/audit.lua). The tests move tasks and partials with the real scripts between every
two Redis calls of the audit (``moves_between_calls``):

* a partial moved at every gap, pool -> merger -> pool -> another merger: every task is
  found, and a task really lost is reported (the old audit: None, three walks running);
* a stateful machine interleaving takes, hand-ins, hand-ups, lease given back and
  restarts with the audit's calls: the audit reports exactly the tasks that are
  somewhere (the old audit, under hypothesis: None, or a task missed);
* the audit makes as many calls at 200 workers, each holding the map's tasks, as at 5 (the
  old audit: two more per worker).
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Callable, Iterator

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from rhtc.broker.wire import protocol
from rhtc.broker.wire.merge import is_partial_id
from rhtc.broker.wire.messages import HandedUp
from tests.helpers import examples
from tests.kits.roles import build_map, claim, ids_of, kill, lease_of, partial, result, start_map, tuned


@contextlib.contextmanager
def moves_between_calls(storage, move: Callable[[], None]) -> Iterator[list[str]]:
    """Run ``move()`` before every Redis call of ``storage``'s audit (its script calls and
    its plain commands); yields the names of the calls made."""
    inflight = storage.maps.inflight
    r, scripts = inflight.r, inflight.scripts
    calls: list[str] = []

    def hooked(name: str, call: Callable) -> Callable:
        def run(*args, **kwargs):
            calls.append(name)
            move()
            return call(*args, **kwargs)
        return run

    class Commands:
        def __getattr__(self, name):
            attr = getattr(r, name)
            return hooked(name, attr) if callable(attr) else attr

    class Scripts:
        def __getitem__(self, name):
            return hooked(name, scripts[name])

    inflight.r, inflight.scripts = Commands(), Scripts()
    try:
        yield calls
    finally:
        inflight.r, inflight.scripts = r, scripts


def test_a_partial_moving_between_the_pool_and_mergers_at_every_call_is_found(storage):
    k, key = storage.keys, storage.config.key
    parker, *mergers = (claim(storage) for _ in range(3))
    with tuned(storage, fair_window=2) as s:
        m = start_map(s, 8)                                    # shared 0 1, backlog 2..7
    storage.lease.take(parker.name, parker.inc, 2)             # 0 1; 2 3 move in
    item = partial(key, m.map_id, [0, 1])
    assert storage.lease.merge_up(parker.name, parker.inc, m.map_id, 8, ids_of(m, [0, 1]), item,
                                  covers=2)[1] == HandedUp.PARKED
    storage.r.lrem(k.backlog(m.map_id), 0, m.frames[7])        # 7: lost (its worker died between pop and lease)
    turn, held = itertools.cycle(mergers), []

    def move():                                               # the partial's next move: to a merger, or back
        if held:
            w, pid = held.pop()
            assert storage.lease.merge_up(w.name, w.inc, m.map_id, 8, pid, item, covers=2)[1] == HandedUp.PARKED
        else:
            w = next(turn)
            _, given, [(pid, _)] = storage.lease.merge_up(w.name, w.inc, m.map_id, 8)
            assert given == HandedUp.INPUTS
            held.append((w, pid))

    with moves_between_calls(storage, move) as calls:
        seen = storage.maps.audit(m.map_id)
    assert len(calls) >= 4, calls
    assert seen == set(range(7)), "the audit could not tell, or missed a task that is somewhere"


# -- moves of every kind, interleaved with the audit's calls -------------------------------------
N, WORKERS = 8, 3
MOVES = ("take", "hand_in", "hand_up", "hand_up", "give_back", "restart")    # (the tree twice as often)
SETTINGS = settings(settings.get_profile("default"), max_examples=examples(100), stateful_step_count=15, deadline=None,
                    derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow])


class AuditUnderMoves(RuleBasedStateMachine):
    """One map of N tasks and three workers on a flushed broker; each rule makes one move of
    the real scripts, or an audit with moves drawn between its calls. Nothing is lost but
    what ``lose`` takes (a worker killed between its pop and its lease), so every audit must
    report exactly the others."""

    def __init__(self, storage, auditor):
        super().__init__()
        storage.r.flushdb()
        self.s, self.auditor = storage, auditor
        self.workers = [claim(storage, f"w{i}") for i in range(WORKERS)]   # (the same names each example:
        #                                                      the order a set of them reads in with them)
        self.m = start_map(storage, N)
        self.covers: dict[bytes, list[int]] = {}              # partial frame -> the tasks it covers
        self.lost: set[int] = set()

    def entries(self, w) -> dict[bytes, bytes]:
        """w's live lease entries of the map: task or partial id -> frame."""
        return {protocol.TaskRef(self.m.map_id, i).task_id: frame
                for i, (inc, _, frame) in lease_of(self.s, w.name).items() if inc == w.inc}

    # -- the moves ------------------------------------------------------------------------
    def take(self, w) -> None:
        self.s.lease.take(w.name, w.inc, 2)

    def hand_in(self, w) -> None:
        tasks = sorted(protocol.TaskRef.from_task_id(t).index for t in self.entries(w) if not is_partial_id(t))
        if tasks:
            self.s.lease.take(w.name, w.inc, 0, [(self.m.map_id, self.m.tid(tasks[0]),
                                                  result(self.s.config.key, self.m.map_id, tasks[0]))])

    def hand_up(self, w) -> None:
        """w folds what it holds of the map (its finished tasks, the partials it was given)
        into one partial and hands it up; holding nothing, it asks for partials to fold."""
        held = self.entries(w)
        if not held:
            self.given(self.s.lease.merge_up(w.name, w.inc, self.m.map_id, 3))
            return
        covered = sorted(set().union(*(self.covers.get(f) or [protocol.TaskRef.from_task_id(t).index]
                                       for t, f in held.items())))
        item = partial(self.s.config.key, self.m.map_id, covered)
        self.covers[item] = covered
        self.given(self.s.lease.merge_up(w.name, w.inc, self.m.map_id, 3, b"".join(held), item,
                                         covers=len(covered)))

    def given(self, got) -> None:
        for _, item in got[2]:
            assert item in self.covers, "a merger was given a partial nobody parked"

    def give_back(self, w) -> None:
        self.s.lease.reconcile(w.name, w.inc, gone=True)

    def restart(self, w) -> None:
        kill(self.s, w)
        self.workers[self.workers.index(w)] = claim(self.s, w.name)

    @rule(move=st.sampled_from(MOVES), who=st.integers(0, WORKERS - 1))
    def one_move(self, move, who):
        getattr(self, move)(self.workers[who])

    @rule()
    def lose(self):
        shared = self.s.r.lrange(self.s.keys.shared_queue, 0, -1)
        if shared:
            self.s.r.lrem(self.s.keys.shared_queue, 0, shared[0])
            self.lost.add(protocol.frame_index(shared[0]))

    @rule(data=st.data())
    def audit(self, data):
        def move():
            if data.draw(st.booleans(), label="a move here"):
                self.one_move(data.draw(st.sampled_from(MOVES)), data.draw(st.integers(0, WORKERS - 1)))

        with moves_between_calls(self.auditor, move):
            seen = self.auditor.maps.audit(self.m.map_id)
        assert seen == set(range(N)) - self.lost, \
            f"the audit saw {seen}; missed {set(range(N)) - self.lost - (seen or set())}"


def test_the_audit_sees_every_task_that_is_somewhere_whatever_moves_between_its_calls(storage):
    # an audit in steps of 2 items: many calls, many gaps to move in (the moves in steps of
    # the default: a take's budget, shared by the worker's own queue and the shared queue in
    # an order drawn from the broker's clock, must not cut a batch short)
    with tuned(storage, fair_window=2) as s, tuned(storage, scan_step=2) as auditor:
        run_state_machine_as_test(lambda: AuditUnderMoves(s, auditor), settings=SETTINGS)


# -- however many workers -------------------------------------------------------------------------
def test_the_audit_makes_as_many_calls_at_200_workers_as_at_5(storage):
    """Each worker holds a task of the map in its lease and one in its own queue; the pool
    holds a partial, the results list a result."""
    key = storage.config.key

    def calls_of_an_audit(workers: int) -> int:
        storage.r.flushdb()
        pool = [claim(storage) for _ in range(workers)]
        m = build_map(key, 2 * workers + 3)
        storage.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": len(m.frames)},
                             {None: m.frames[:3], **{w.name: m.frames[3 + 2 * i:5 + 2 * i] for i, w in enumerate(pool)}},
                             nonce=m.nonce)
        for w in pool:
            storage.lease.take(w.name, w.inc, 1)
        first, second = pool[:2]
        storage.lease.take(first.name, first.inc, 2)             # the shared queue's 0 1 2, or its own
        taken = sorted(lease_of(storage, first.name))
        storage.lease.merge_up(first.name, first.inc, m.map_id, 8, ids_of(m, taken[:2]),
                               partial(key, m.map_id, taken[:2]), covers=2)
        done = next(iter(lease_of(storage, second.name)))
        storage.lease.take(second.name, second.inc, 0, [(m.map_id, m.tid(done), result(key, m.map_id, done))])
        with moves_between_calls(storage, lambda: None) as calls:
            assert storage.maps.audit(m.map_id) == set(range(len(m.frames)))
        return len(calls)

    few, many = calls_of_an_audit(5), calls_of_an_audit(200)
    assert few == many, f"the audit made {few} calls at 5 workers, {many} at 200"
