"""The contract of the worker's lease (``storage.lease``, broker/leases.py) with a real
redis-server: each test drives one public method (or the Lua move behind it) and reads
the broker's state before and after, through the roles' own reads or the keys of
broker/wire/keys.py. No worker process: the test is the worker, calling ``storage.lease``
as worker/main.py and worker/supervisor.py do.

What a worker relies on:

* ``claim`` holds the name for one incarnation (refused while another holds it, taken over
  only from the holder it names), publishes its status, records that it joined, and puts
  back at once what a predecessor left: its lease (a task counted as an attempt, dead once
  the attempts are used up; a partial it was merging back to the pool) and its own queue;
  ``heartbeat`` renews the name and says how much the lease holds; ``holder_status`` and
  ``claim_ms_left`` read it back;
* ``take`` leases tasks (own queue, shared queue; each taken from the shared queue lets the
  next of its map's backlog in), records each in the lease hash (incarnation, time, frame)
  and returns it with its map's token (a map that ended: its signed end); it leases
  nothing to an incarnation that lost the name, drops the tasks of a map whose end
  expired and the map of a dead client, hands results in (the entry goes, the result
  reaches the map's results list, the answered count moves; the last one brings the
  map's pool to the client), and refuses a partial a task of which was requeued
  meanwhile (its other tasks go back to the shared queue, the partials it folded in to
  the pool);
* ``wait_for_task`` + ``leased_token`` (an idle worker's wake-up): the popped task is leased
  with its token, or put back when the name was lost, or dropped when its map is gone,
  also after the broker lost the scripts;
* ``release`` drops entries; ``reconcile`` requeues what nobody runs (not an attempt), the
  crashed task counted (dead once its attempts are used up), everything not held when the
  task process is gone (a partial it was merging to the pool); ``reap`` gives a dead
  worker's lease and queue back exactly once, counted, once per interval across callers;
  a dead merger's partial goes back to the pool, or to the client once the map's mergers
  keep dying or when it completes the map; ``retire`` gives them back uncounted and leaves
  the pool;
* ``merge_up`` parks a partial in the map's pool (a big one as a stub, its frame beside),
  gives a merger the pool's partials to fold in first, refuses a partial no longer whole,
  drops one of an ended map; ``partial_frame`` reads a stub's blob, only the map's own;
* ``may_leave`` keeps the pool at its floor; ``advertise`` publishes the chunks held.

Moves of broker/taskmoves.py made here: new -> routed / shared (setup); shared / routed ->
leased, backlog -> shared, shared / backlog / pooled / result -> dropped, leased -> result /
shared / pooled, pooled -> result (take); shared -> popped (BRPOP); popped -> leased / shared /
dropped, backlog -> shared (lease_one); routed -> shared, leased -> shared / dead / pooled /
result, pooled -> result (claim, reap); leased -> shared / dead / pooled (reconcile); leased
-> pooled / shared / dropped, pooled -> leased (merge). (Stealing and home tasks:
test_thieves_leave_home_tasks.py; a batch's hand-in in one push, and results of an ended
map dropped: test_take_hands_results_in.py; the last partial delivered once:
test_merge_script.py.)
"""
from __future__ import annotations

import os

import pytest

from rhtc.broker.wire import blobs, protocol
from rhtc.broker.wire.keys import MAP_ANSWERED, MAP_MERGER_DEATHS, MAP_PARTIAL_SEQ, MAP_POOLED, MAP_REFUSED
from rhtc.broker.wire.merge import partial_id
from rhtc.broker.wire.messages import HandedUp
from tests.kits.roles import (attempts, claim, ids_of, indices, kill, lease_entry, lease_of, owned_keys, partial,
                              queued, register_map, result, start_map, status_of, tuned)


def _taken(batch) -> list[int]:
    return indices(frame for frame, _ in batch)


# -- the name ------------------------------------------------------------------------------------
def test_a_claim_holds_the_name_publishes_the_status_and_records_the_join(storage):
    k = storage.keys
    assert storage.lease.claim_ms_left("w1") == -2 and storage.lease.holder_status("w1") is None
    w = claim(storage, "w1")
    assert storage.r.get(k.incarnation("w1")) == w.inc.encode()
    assert 0 < storage.lease.claim_ms_left("w1") <= storage.settings.lease * 1000
    assert storage.lease.holder_status("w1") == w.status
    assert storage.r.sismember(k.workers, "w1") and storage.r.zscore(k.joined, "w1") is not None


def test_a_name_is_taken_over_only_from_the_holder_the_claim_names(storage):
    first = claim(storage, "w1")
    other = "1" * 16
    status = status_of("w1", other)
    got = storage.lease.claim("w1", other, status)
    assert (got.ok, got.holder) == (False, first.inc)
    assert not storage.lease.claim("w1", other, status, mode="force", expected="2" * 16).ok
    assert storage.lease.claim("w1", other, status, mode="force", expected=first.inc).ok
    assert storage.r.get(storage.keys.incarnation("w1")) == other.encode()


def test_a_new_incarnation_puts_back_its_predecessors_lease_counted_and_its_queue(storage):
    k = storage.keys
    with tuned(storage, scan_step=2) as s:                     # its queue given back in steps
        w = claim(s)
        m = start_map(s, 6, to=w.name)
        assert _taken(s.lease.take(w.name, w.inc, 1)[2]) == [0]
        kill(s, w)
        claim(s, w.name)
    assert lease_of(storage, w.name) == {}
    assert sorted(queued(storage, k.shared_queue)) == [0, 1, 2, 3, 4, 5] and storage.r.llen(k.queue(w.name)) == 0
    assert attempts(storage, m.map_id) == {0: 1}, "the predecessor's task was not counted (or its queue was)"
    assert "was restarted" in storage.maps.attempt_history(m.map_id, m.tid(0))


def test_a_predecessors_task_that_used_up_its_attempts_goes_to_the_dead_list(storage):
    k = storage.keys
    with tuned(storage, max_attempts=1) as s:
        w = claim(s)
        m = start_map(s, 2, to=w.name)
        s.lease.take(w.name, w.inc, 1)
        kill(s, w)
        claim(s, w.name)
    assert storage.r.lrange(k.dead(m.map_id), 0, -1) == [m.frames[0]]
    assert queued(storage, k.shared_queue) == [1]
    assert storage.r.hget(k.map(m.map_id), MAP_ANSWERED) == b"1"


def test_a_heartbeat_renews_the_name_publishes_the_status_and_says_what_the_lease_holds(storage):
    k = storage.keys
    w = claim(storage)
    start_map(storage, 2, to=w.name)
    storage.r.pexpire(k.incarnation(w.name), 300)
    busy = status_of(w.name, w.inc, storage.config.key, task_seconds=3.0)
    beat = storage.lease.heartbeat(w.name, w.inc, busy)
    assert beat.ok and beat.leased == 0
    assert storage.lease.claim_ms_left(w.name) > 300, "the name was not renewed"
    assert storage.lease.holder_status(w.name).task_seconds == 3.0
    storage.lease.take(w.name, w.inc, 2)
    assert storage.lease.heartbeat(w.name, w.inc, busy).leased == 2


# -- taking tasks -----------------------------------------------------------------------------------
def test_take_leases_from_the_shared_queue_and_lets_the_maps_backlog_in(storage):
    k = storage.keys
    w = claim(storage)
    with tuned(storage, fair_window=2) as s:
        m = start_map(s, 5)                                    # shared 0 1, backlog 2 3 4
    held, now, batch = storage.lease.take(w.name, w.inc, 2)
    assert held and _taken(batch) == [0, 1]
    token = storage.r.get(k.live(m.map_id))
    assert [t for _, t in batch] == [token, token], "a task came without its map's token"
    lease = lease_of(storage, w.name)
    assert sorted(lease) == [0, 1] and lease[0][2] == m.frames[0]
    assert {inc for inc, _, _ in lease.values()} == {w.inc}
    assert all(now - 5000 < at <= now for _, at, _ in lease.values()), "taken-at is not the broker's clock"
    assert queued(storage, k.shared_queue) == [3, 2] and queued(storage, k.backlog(m.map_id)) == [4]


def test_take_leases_from_the_workers_own_queue_and_forgets_it_once_empty(storage):
    k = storage.keys
    w = claim(storage)
    start_map(storage, 3, to=w.name)
    assert storage.r.sismember(k.routed, w.name)
    held, _, batch = storage.lease.take(w.name, w.inc, 5)
    assert held and _taken(batch) == [0, 1, 2] and sorted(lease_of(storage, w.name)) == [0, 1, 2]
    assert storage.r.llen(k.queue(w.name)) == 0 and not storage.r.sismember(k.routed, w.name)


def test_an_incarnation_that_lost_its_name_takes_nothing(storage):
    k = storage.keys
    w = claim(storage)
    start_map(storage, 2)
    storage.r.set(k.incarnation(w.name), "1" * 16)            # another incarnation took the name over
    assert storage.lease.take(w.name, w.inc, 2) == (False, 0, [])
    assert queued(storage, k.shared_queue) == [1, 0] and lease_of(storage, w.name) == {}


def test_a_task_of_a_map_that_ended_is_taken_with_its_signed_end_and_dropped_once_that_expired(storage):
    """The end leaves queued tasks to whoever takes them: while the map's signed end lives,
    a take hands it with the task (the worker refuses the task); then a take drops them."""
    k = storage.keys
    w = claim(storage)
    m = start_map(storage, 2)
    storage.maps.sign_end(m.map_id, m.nonce, drop=True)
    held, _, batch = storage.lease.take(w.name, w.inc, 1)
    assert held and _taken(batch) == [0]
    assert protocol.unpack_map_token(storage.config.key, batch[0][1]).ended
    storage.r.delete(k.live(m.map_id))                        # its signed end expired
    held, _, batch = storage.lease.take(w.name, w.inc, 1)
    assert held and batch == []
    assert storage.r.llen(k.shared_queue) == 0 and sorted(lease_of(storage, w.name)) == [0]


def test_a_take_drops_the_map_of_a_client_that_died_with_its_backlog_pool_and_results(storage):
    k = storage.keys
    w = claim(storage)
    with tuned(storage, fair_window=1) as s:
        m = start_map(s, 3, client="gone")                    # shared 0, backlog 1 2
    storage.r.rpush(k.results(m.map_id), result(storage.config.key, m.map_id, 9))
    storage.r.rpush(k.pool(m.map_id), partial(storage.config.key, m.map_id, [7, 8]))
    storage.r.delete(k.client("gone"))                        # its beacon expired
    held, _, batch = storage.lease.take(w.name, w.inc, 1)
    assert held and batch == [] and lease_of(storage, w.name) == {}
    assert owned_keys(storage, m.map_id) == [] and storage.r.zscore(k.maps, m.map_id) is None


def test_a_hand_in_and_the_next_batch_go_in_one_take(storage):
    k, key = storage.keys, storage.config.key
    w = claim(storage)
    m = start_map(storage, 3, to=w.name)
    storage.lease.take(w.name, w.inc, 1)
    frame = result(key, m.map_id, 0)
    held, _, batch = storage.lease.take(w.name, w.inc, 1, [(m.map_id, m.tid(0), frame)])
    assert held and _taken(batch) == [1]
    assert sorted(lease_of(storage, w.name)) == [1], "the answered task's entry stayed"
    assert storage.r.lrange(k.results(m.map_id), 0, -1) == [frame]
    assert storage.r.hget(k.map(m.map_id), MAP_ANSWERED) == b"1"
    assert storage.maps.audit(m.map_id) == {0, 1, 2}


def test_a_partial_is_refused_when_a_task_it_covers_was_requeued_meanwhile(storage):
    """Its other tasks go back to the shared queue, not counted as attempts, and the
    partial it had folded in goes back to the map's pool; the map notes the refusal."""
    k, key = storage.keys, storage.config.key
    w, parker = claim(storage), claim(storage)
    m = start_map(storage, 5)
    storage.lease.take(w.name, w.inc, 3)                       # 0 1 2
    storage.lease.take(parker.name, parker.inc, 2)             # 3 4
    parked = partial(key, m.map_id, [3, 4])
    storage.lease.merge_up(parker.name, parker.inc, m.map_id, 8, ids_of(m, [3, 4]), parked, covers=2)
    [(pid, _)] = storage.lease.merge_up(w.name, w.inc, m.map_id, 8)[2]      # given to w to fold in
    assert storage.lease.reconcile(w.name, w.inc, crashed=m.tid(1), why="its process died") == (1, "queued")
    whole = partial(key, m.map_id, [0, 1, 2, 3, 4])                     # its own tasks and the one folded in
    storage.lease.take(w.name, w.inc, 0, [(m.map_id, ids_of(m, [0, 1, 2]) + pid, whole)])
    assert storage.r.llen(k.results(m.map_id)) == 0, "a partial covering a requeued task was counted"
    assert lease_of(storage, w.name) == {}
    assert sorted(queued(storage, k.shared_queue)) == [0, 1, 2]
    assert storage.r.lrange(k.pool(m.map_id), 0, -1) == [parked], "the partial folded in was lost"
    assert storage.r.hget(k.map(m.map_id), MAP_POOLED) == b"2"
    assert attempts(storage, m.map_id) == {1: 1}
    assert storage.maps.partials_refused(m.map_id) == 1 and storage.r.hget(k.map(m.map_id), MAP_REFUSED) == b"1"


def test_the_hand_in_that_answers_a_maps_last_task_sends_the_pools_partials_to_the_client(storage):
    k, key = storage.keys, storage.config.key
    w, parker = claim(storage), claim(storage)
    m = start_map(storage, 3)
    storage.lease.take(parker.name, parker.inc, 2)             # 0 1
    storage.lease.take(w.name, w.inc, 1)                       # 2
    parked = partial(key, m.map_id, [0, 1])
    storage.lease.merge_up(parker.name, parker.inc, m.map_id, 8, ids_of(m, [0, 1]), parked, covers=2)
    last = result(key, m.map_id, 2)
    storage.lease.take(w.name, w.inc, 0, [(m.map_id, m.tid(2), last)])
    assert storage.r.lrange(k.results(m.map_id), 0, -1) == [last, parked], "the map waits for a merger that never comes"
    assert storage.r.llen(k.pool(m.map_id)) == 0
    assert storage.r.hmget(k.map(m.map_id), MAP_ANSWERED, MAP_POOLED) == [b"3", b"0"]


# -- an idle worker's wake-up ------------------------------------------------------------------------
def test_an_idle_worker_leases_the_task_it_woke_up_with_and_reads_its_token(storage):
    k = storage.keys
    w = claim(storage)
    with tuned(storage, fair_window=2) as s:
        m = start_map(s, 4)                                    # shared 0 1, backlog 2 3
    frame = storage.lease.wait_for_task(w.name, w.inc, timeout=5)
    assert frame == m.frames[0]
    token, now = storage.lease.leased_token()
    assert token == storage.r.get(k.live(m.map_id)) and now > 0
    assert sorted(lease_of(storage, w.name)) == [0]
    assert queued(storage, k.shared_queue) == [2, 1], "the backlog's next task did not take its place"
    assert storage.lease.stealable() is False


def test_a_wake_up_after_the_broker_lost_the_scripts_still_leases_the_task(storage):
    k = storage.keys
    w = claim(storage)
    m = start_map(storage, 2)
    storage.lease.wait_for_task(w.name, w.inc, timeout=5)      # (loads the library on the worker's lane)
    storage.lease.leased_token()
    storage.r.function_flush()                                # (a broker restarted without persistence)
    assert storage.lease.wait_for_task(w.name, w.inc, timeout=5) == m.frames[1]
    assert storage.lease.leased_token()[0] == storage.r.get(k.live(m.map_id))
    assert sorted(lease_of(storage, w.name)) == [0, 1]


def test_an_idle_wait_with_nothing_queued_ends_empty(storage):
    w = claim(storage)
    assert storage.lease.wait_for_task(w.name, w.inc, timeout=0.05) is None
    assert lease_of(storage, w.name) == {}


def test_a_woken_incarnation_that_lost_its_name_puts_the_task_back(storage):
    k = storage.keys
    w = claim(storage)
    m = start_map(storage, 1)
    storage.r.set(k.incarnation(w.name), "1" * 16)
    assert storage.lease.wait_for_task(w.name, w.inc, timeout=5) == m.frames[0]
    assert storage.lease.leased_token()[0] == b""
    assert storage.r.lrange(k.shared_queue, 0, -1) == [m.frames[0]] and lease_of(storage, w.name) == {}


def test_a_woken_worker_drops_a_task_of_a_map_that_ended(storage):
    k = storage.keys
    w = claim(storage)
    m = start_map(storage, 1)
    storage.maps.end(m.map_id)
    storage.r.delete(k.live(m.map_id))                        # (its signed end expired)
    assert storage.lease.wait_for_task(w.name, w.inc, timeout=5) == m.frames[0]
    assert storage.lease.leased_token()[0] == b""
    assert storage.r.llen(k.shared_queue) == 0 and lease_of(storage, w.name) == {}


# -- giving tasks back ---------------------------------------------------------------------------------
def test_release_drops_lease_entries_without_a_result(storage):
    w = claim(storage)
    m = start_map(storage, 2, to=w.name)
    storage.lease.take(w.name, w.inc, 2)
    storage.lease.release(w.name, [m.tid(0)])
    storage.link.fast.drain()
    assert sorted(lease_of(storage, w.name)) == [1]
    assert storage.r.llen(storage.keys.shared_queue) == 0 and storage.maps.unread_results(m.map_id) == 0


def test_reconcile_requeues_what_nobody_runs_uncounted_and_keeps_what_is_held_or_young(storage):
    k = storage.keys
    w = claim(storage)
    m = register_map(storage, 4)
    young = storage.broker_ms()
    storage.r.hset(k.lease(w.name), mapping={
        m.tid(0): lease_entry(w.inc, m.frames[0]),             # old, held: runs
        m.tid(1): lease_entry(w.inc, m.frames[1]),             # old, not held: a lost reply
        m.tid(2): lease_entry(w.inc, m.frames[2], young),      # young, not held: maybe on its way
        m.tid(3): lease_entry("1" * 16, m.frames[3], young)})  # another incarnation's
    assert storage.lease.reconcile(w.name, w.inc, held=[m.tid(0)]) == (2, "")
    assert sorted(lease_of(storage, w.name)) == [0, 2]
    assert sorted(queued(storage, k.shared_queue)) == [1, 3]
    assert attempts(storage, m.map_id) == {}, "a task that never ran was counted as an attempt"


def test_reconcile_without_its_task_process_requeues_every_entry_not_held(storage):
    """Tasks to the shared queue, a partial it was merging to the map's pool (one merger death)."""
    k, key = storage.keys, storage.config.key
    w = claim(storage)
    m = register_map(storage, 6)
    young = storage.broker_ms()
    item = partial(key, m.map_id, [4, 5])
    storage.r.hset(k.lease(w.name), mapping={**{m.tid(i): lease_entry(w.inc, m.frames[i], young) for i in range(3)},
                                             partial_id(m.map_id, 1): lease_entry(w.inc, item, young)})
    assert storage.lease.reconcile(w.name, w.inc, held=[m.tid(2)], gone=True) == (3, "")
    assert sorted(lease_of(storage, w.name)) == [2] and sorted(queued(storage, k.shared_queue)) == [0, 1]
    assert storage.r.lrange(k.pool(m.map_id), 0, -1) == [item]
    assert storage.r.hget(k.map(m.map_id), MAP_MERGER_DEATHS) == b"1"


def test_a_crashed_task_goes_back_counted_and_to_the_dead_list_once_its_attempts_are_used_up(storage):
    k = storage.keys
    with tuned(storage, max_attempts=2) as s:
        w = claim(s)
        m = start_map(s, 1, to=w.name)
        s.lease.take(w.name, w.inc, 1)
        assert s.lease.reconcile(w.name, w.inc, crashed=m.tid(0), why="crash 1") == (1, "queued")
        assert queued(s, k.shared_queue) == [0] and attempts(s, m.map_id) == {0: 1}
        s.lease.take(w.name, w.inc, 1)
        assert s.lease.reconcile(w.name, w.inc, crashed=m.tid(0), why="crash 2") == (1, "dead")
    assert storage.r.llen(k.shared_queue) == 0 and lease_of(storage, w.name) == {}
    assert storage.maps.dead_tasks(m.map_id) == [m.frames[0]]
    assert storage.r.hget(k.map(m.map_id), MAP_ANSWERED) == b"1"
    assert storage.maps.attempt_history(m.map_id, m.tid(0)) == "crash 1\ncrash 2\n"


def test_reap_puts_a_dead_workers_tasks_back_exactly_once(storage):
    k = storage.keys
    dead, alive = claim(storage), claim(storage)
    m = start_map(storage, 3, to=dead.name)
    other = start_map(storage, 1, to=alive.name)
    storage.lease.take(dead.name, dead.inc, 1)                 # 0 leased, 1 2 queued
    storage.lease.take(alive.name, alive.inc, 1)
    storage.lease.advertise(dead.name, added=["chunk"])
    kill(storage, dead)
    assert storage.lease.reap(every=0) == [dead.name]
    assert sorted(queued(storage, k.shared_queue)) == [0, 1, 2]
    assert not storage.r.exists(k.lease(dead.name), k.queue(dead.name), k.holds(dead.name))
    assert not storage.r.sismember(k.workers, dead.name) and storage.r.sismember(k.workers, alive.name)
    assert attempts(storage, m.map_id) == {0: 1}
    assert "stopped heartbeating" in storage.maps.attempt_history(m.map_id, m.tid(0))
    assert storage.lease.reap(every=0) == []
    assert storage.r.llen(k.shared_queue) == 3 and attempts(storage, m.map_id) == {0: 1}, "reaped twice"
    assert sorted(lease_of(storage, alive.name)) == [0] and attempts(storage, other.map_id) == {}


def test_reap_sends_a_task_that_used_up_its_attempts_to_the_dead_list(storage):
    with tuned(storage, max_attempts=1) as s:
        w = claim(s)
        m = start_map(s, 1, to=w.name)
        s.lease.take(w.name, w.inc, 1)
        kill(s, w)
        assert s.lease.reap(every=0) == [w.name]
    assert storage.r.llen(storage.keys.shared_queue) == 0
    assert storage.maps.dead_tasks(m.map_id) == [m.frames[0]]


def test_reap_runs_once_per_interval_across_callers(storage):
    a, b = claim(storage), claim(storage)
    kill(storage, a)
    assert storage.lease.reap(every=60) == [a.name]
    kill(storage, b)
    assert storage.lease.reap(every=60) == [], "reaped again within the interval"
    assert storage.r.sismember(storage.keys.workers, b.name)


@pytest.mark.parametrize("by", ["reap", "claim"])
@pytest.mark.parametrize("case", ["pooled", "tree off", "completes the map"])
def test_a_dead_mergers_partial_goes_back_to_the_pool_or_to_the_client(storage, by, case):
    """A partial leased to a merger that died goes back to the map's pool (never an
    attempt: its tasks ran), by the reaper or by the merger's next incarnation; to the
    client as it is once the map's mergers keep dying (the tree is off), or when with the
    tasks answered it covers the whole map."""
    k, key = storage.keys, storage.config.key
    w = claim(storage)
    m = register_map(storage, 2 if case == "completes the map" else 4)
    if case == "tree off":
        storage.r.hset(k.map(m.map_id), MAP_MERGER_DEATHS, 1)
    item = partial(key, m.map_id, [0, 1])
    storage.r.hset(k.lease(w.name), partial_id(m.map_id, 1), lease_entry(w.inc, item))
    kill(storage, w)
    if by == "reap":
        assert storage.lease.reap(every=0) == [w.name]
    else:
        claim(storage, w.name)
    assert lease_of(storage, w.name) == {}
    assert storage.r.hget(k.map(m.map_id), MAP_MERGER_DEATHS) == (b"2" if case == "tree off" else b"1")
    if case == "pooled":
        assert storage.r.lrange(k.pool(m.map_id), 0, -1) == [item] and storage.r.llen(k.results(m.map_id)) == 0
        assert storage.r.hget(k.map(m.map_id), MAP_POOLED) == b"2"
        assert int(storage.r.hget(k.map(m.map_id), MAP_ANSWERED) or 0) == 0
    else:
        assert storage.r.lrange(k.results(m.map_id), 0, -1) == [item] and storage.r.llen(k.pool(m.map_id)) == 0
        assert storage.r.hget(k.map(m.map_id), MAP_ANSWERED) == b"2"
    assert attempts(storage, m.map_id) == {}, "a partial's tasks ran: never an attempt"


def test_a_retiring_worker_gives_back_its_lease_and_queue_uncounted_and_leaves_the_pool(storage):
    k = storage.keys
    w = claim(storage)
    m = start_map(storage, 3, to=w.name)
    storage.lease.take(w.name, w.inc, 1)
    storage.lease.retire(w.name)
    assert sorted(queued(storage, k.shared_queue)) == [0, 1, 2] and attempts(storage, m.map_id) == {}
    assert not storage.r.exists(k.lease(w.name), k.queue(w.name), k.incarnation(w.name), k.heartbeat(w.name))
    assert not storage.r.sismember(k.workers, w.name)


# -- the tree of partials -------------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["small", "big"])
def test_merge_up_parks_a_partial_in_the_maps_pool_when_no_partial_waits(storage, size):
    """A big partial (256 KiB or more) is parked as a stub, its frame in a blob beside,
    which the merger that takes it reads whole."""
    k, key = storage.keys, storage.config.key
    w = claim(storage)
    m = start_map(storage, 4, to=w.name)
    storage.lease.take(w.name, w.inc, 2)
    item = partial(key, m.map_id, [0, 1], pad=blobs.BLOB_FROM if size == "big" else 0)
    assert storage.lease.merge_up(w.name, w.inc, m.map_id, 8, ids_of(m, [0, 1]), item, covers=2) == \
        (True, HandedUp.PARKED, [])
    (parked,) = storage.r.lrange(k.pool(m.map_id), 0, -1)
    assert blobs.is_stub(parked) == (size == "big") and storage.lease.partial_frame(parked) == item
    assert lease_of(storage, w.name) == {} and storage.r.hget(k.map(m.map_id), MAP_POOLED) == b"2"


def test_merge_up_gives_a_merger_the_pools_partials_to_fold_in_first(storage):
    k, key = storage.keys, storage.config.key
    parker, merger = claim(storage), claim(storage)
    m = start_map(storage, 6)
    storage.lease.take(parker.name, parker.inc, 2)
    storage.lease.take(merger.name, merger.inc, 2)
    parked = partial(key, m.map_id, [0, 1])
    storage.lease.merge_up(parker.name, parker.inc, m.map_id, 8, ids_of(m, [0, 1]), parked, covers=2)
    held, outcome, inputs = storage.lease.merge_up(merger.name, merger.inc, m.map_id, 8, ids_of(m, [2, 3]),
                                                   partial(key, m.map_id, [2, 3]), covers=2)
    assert (held, outcome, inputs) == (True, HandedUp.INPUTS, [(partial_id(m.map_id, 1), parked)])
    assert storage.r.llen(k.pool(m.map_id)) == 0 and storage.r.llen(k.results(m.map_id)) == 0
    assert (storage.r.hget(k.lease(merger.name), partial_id(m.map_id, 1)) or b"").endswith(parked)
    assert storage.r.hmget(k.map(m.map_id), MAP_POOLED, MAP_PARTIAL_SEQ) == [b"0", b"1"]
    assert sorted(lease_of(storage, merger.name)) == [2, 3, 2**31 + 1], "the merger's own tasks left its lease"
    assert storage.maps.audit(m.map_id) >= {0, 1, 2, 3}


def test_merge_up_refuses_a_partial_no_longer_whole_and_gives_its_other_tasks_back(storage):
    k, key = storage.keys, storage.config.key
    w = claim(storage)
    m = start_map(storage, 3, to=w.name)
    storage.lease.take(w.name, w.inc, 3)
    storage.lease.release(w.name, [m.tid(2)])                  # (requeued and run elsewhere, say)
    got = storage.lease.merge_up(w.name, w.inc, m.map_id, 8, ids_of(m, [0, 1, 2]), partial(key, m.map_id, [0, 1, 2]),
                                 covers=3)
    assert got == (True, HandedUp.REFUSED, [])
    assert sorted(queued(storage, k.shared_queue)) == [0, 1] and lease_of(storage, w.name) == {}
    assert storage.r.llen(k.pool(m.map_id)) == 0 and storage.maps.partials_refused(m.map_id) == 1


def test_merge_up_drops_the_partial_of_a_map_that_ended_with_its_lease_entries(storage):
    k, key = storage.keys, storage.config.key
    w = claim(storage)
    m, other = start_map(storage, 2, to=w.name), register_map(storage, 1)
    storage.lease.take(w.name, w.inc, 2)
    storage.r.hset(k.lease(w.name), other.tid(0), lease_entry(w.inc, other.frames[0]))
    storage.maps.end(m.map_id)
    got = storage.lease.merge_up(w.name, w.inc, m.map_id, 8, ids_of(m, [0, 1]), partial(key, m.map_id, [0, 1]),
                                 covers=2)
    assert got == (True, HandedUp.GONE, [])
    assert not storage.r.hexists(k.lease(w.name), m.tid(0)) and not storage.r.hexists(k.lease(w.name), m.tid(1))
    assert storage.r.hexists(k.lease(w.name), other.tid(0)), "another map's entry went with the ended map's"
    assert not storage.r.exists(k.pool(m.map_id), k.results(m.map_id))


def test_a_merger_reads_a_big_partials_frame_from_its_blob_and_nothing_not_its_maps(storage):
    k, key = storage.keys, storage.config.key
    m = register_map(storage, 2)
    frame = protocol.pack_result(key, m.map_id, 0, protocol.OK, os.urandom(1000))
    assert storage.lease.partial_frame(frame) == frame
    own = k.blob(blobs.blob_name(m.map_id))
    storage.r.set(own, frame)
    assert storage.lease.partial_frame(blobs.stub(frame, own)) == frame
    assert storage.r.get(own) == frame, "the blob must outlive this merger"
    foreign = k.blob(blobs.blob_name("f" * 16))
    storage.r.set(foreign, frame)
    assert storage.lease.partial_frame(blobs.stub(frame, foreign)) is None


# -- leaving, and what a worker publishes ------------------------------------------------------------------
def test_an_idle_worker_may_leave_only_above_the_pools_floor_and_a_leaver_counts_no_more(storage):
    a, b = claim(storage), claim(storage)
    storage.pool.set_pool_floor(1, ttl=60)
    assert storage.lease.may_leave(a.name)
    assert storage.r.zscore(storage.keys.leaving, a.name) is not None
    assert not storage.lease.may_leave(b.name), "the last worker that is not leaving left under the floor"
    assert storage.lease.may_leave(b.name, force=True)


def test_advertise_publishes_the_chunks_a_worker_holds_and_its_nodes_disk_tier(storage):
    k = storage.keys
    w = claim(storage)
    storage.lease.advertise(w.name, added=["c1", "c2"], tier="node-a")
    storage.lease.advertise(w.name, removed=["c1"])
    assert storage.r.smembers(k.holds(w.name)) == {b"c2"}
    assert storage.r.smembers(k.disk_holds("node-a")) == {b"c1", b"c2"}, "the disk tier outlives the worker's cache"
    assert 0 < storage.r.ttl(k.holds(w.name)) <= storage.settings.holds_ttl
    assert 0 < storage.r.ttl(k.disk_holds("node-a")) <= storage.settings.disk_holds_ttl


def test_a_worker_reads_the_maps_function_and_info_and_the_brokers_limits(storage):
    m = register_map(storage, 2)
    assert storage.lease.get_function(m.fn_hash) == m.fn and storage.lease.get_function("0" * 32) is None
    assert storage.lease.map_info(m.map_id)["nonce"] == m.nonce
    storage.r.config_set("proto-max-bulk-len", 64 * 2**20)
    limits = storage.lease.bulk_limits()
    assert limits.known and limits.bulk == 64 * 2**20 and limits.one_value == (64 * 2**20, "proto-max-bulk-len")
