"""The contract of the operator's pool view (``storage.pool``, broker/pool.py) with a real
redis-server: each test drives one public method and reads the broker's state before
and after, through the roles' own reads or the keys of broker/wire/keys.py. No worker
process: workers are names claimed through ``storage.lease``, killed by letting their name
and status go (as a lease's end does).

What ``rhtc status``, the client's placement and a pool keeper rely on:

* ``worker_statuses`` / ``live_workers`` list the workers whose heartbeat is current (a dead
  one not yet reaped is counted by ``worker_count`` but not listed), each with its own
  queue's depth, and flag a heartbeat that is forged (unsigned, or a copy of another's);
* ``take_back_queue`` moves a worker's queue to the shared queue (routed -> shared, by
  ``drain``), every task once; ``shared_depth``, ``unrouted_depth`` and ``pending_tasks``
  count what waits where;
* ``locate`` names, for each chunk, the live worker that caches it, else a live worker of a
  node whose disk tier holds it (spread over that node's workers), never a leaving or
  forged one;
* the keeper's record: ``publish_keeper`` / ``keepers`` (a keeper whose state expired is
  dropped from the list), ``keeper_event`` / ``keeper_events`` (newest first, capped),
  ``set_pool_floor``, ``request_keeper_stop`` / ``keeper_stop_requested``, ``end_keeper``
  (its log stays), ``workers_joined`` (who reached the broker, also after they left);
* maps in flight: ``request_cancel`` asks the map's client to cancel and removes its
  queued tasks from every queue (backlog, shared, routed -> dropped), ``maps_in_flight``
  reports each map's progress and whether its client lives, and forgets registry entries
  of maps that are gone (unless read only).
"""
from __future__ import annotations

import time

from rhtc.broker.pool import KEEPER_LOG_ENTRIES
from rhtc.broker.wire import messages
from tests.kits.roles import build_map, claim, kill, start_map, status_of, tuned


# -- the workers -----------------------------------------------------------------------------------
def test_worker_statuses_list_the_live_workers_with_their_own_queues_depth(storage):
    assert storage.pool.worker_statuses() == [] and storage.pool.live_workers() == []
    a, b = claim(storage, "a-worker"), claim(storage, "b-worker")
    start_map(storage, 3, to=a.name)
    statuses = storage.pool.worker_statuses()
    assert [(s.name, s.incarnation, s.queued, s.forged) for s in statuses] == \
        [(a.name, a.inc, 3, ""), (b.name, b.inc, 0, "")]
    assert [s.queued for s in storage.pool.worker_statuses(queue_depths=False)] == [None, None]
    assert [(d["name"], d["state"], d["queued"]) for d in storage.pool.live_workers()] == \
        [(a.name, "idle", 3), (b.name, "idle", 0)]


def test_a_dead_worker_not_yet_reaped_is_counted_but_not_listed(storage):
    a, b = claim(storage), claim(storage)
    kill(storage, b)
    assert [s.name for s in storage.pool.worker_statuses()] == [a.name]
    assert storage.pool.worker_count() == 2
    storage.lease.reap(every=0)
    assert storage.pool.worker_count() == 1


def test_a_forged_heartbeat_is_flagged(storage):
    k, key = storage.keys, storage.config.key
    a = claim(storage, "a-worker")
    unsigned = status_of("b-worker", "1" * 16, key).encode()            # claims our key, not signed with it
    storage.r.set(k.heartbeat("b-worker"), unsigned)
    storage.r.set(k.heartbeat("c-worker"), storage.r.get(k.heartbeat(a.name)))   # a copy of a's
    storage.r.sadd(k.workers, "b-worker", "c-worker")
    forged = {s.name: s.forged for s in storage.pool.worker_statuses()}
    assert forged[a.name] == ""
    assert "unsigned" in forged["b-worker"] and "a copy of a-worker's" in forged["c-worker"]


def test_take_back_queue_moves_every_task_of_a_workers_queue_to_the_shared_queue_once(storage):
    k, w = storage.keys, claim(storage)
    with tuned(storage, scan_step=2) as s:
        m = start_map(s, 5, to=w.name)
        other = start_map(s, 1)
        s.pool.take_back_queue(w.name)
    assert storage.r.llen(k.queue(w.name)) == 0
    assert sorted(storage.r.lrange(k.shared_queue, 0, -1)) == sorted(m.frames + other.frames)


def test_the_depths_count_what_waits_in_the_shared_queue_the_backlogs_and_the_workers_queues(storage):
    w = claim(storage)
    with tuned(storage, fair_window=2) as s:
        a = start_map(s, 5)                                    # shared 2, backlog 3
        b = start_map(s, 2, to=w.name)
    assert storage.pool.shared_depth() == 2
    assert storage.pool.unrouted_depth(a.map_id) == 5
    assert storage.pool.unrouted_depth(b.map_id) == 2, "(the shared queue counts every map's)"
    assert storage.pool.pending_tasks() == 7


# -- where chunks are cached ---------------------------------------------------------------------------
def test_locate_names_the_live_worker_that_caches_each_chunk(storage):
    a, b = claim(storage, "a-worker"), claim(storage, "b-worker")
    storage.lease.advertise(a.name, added=["k1"])
    storage.lease.advertise(b.name, added=["k2", "k1"])
    where, live = storage.pool.locate(["k1", "k2", "k3"])
    assert live == [a.name, b.name]
    assert where["k2"] == b.name and where["k1"] in (a.name, b.name) and "k3" not in where
    assert storage.pool.locate([]) == ({}, live)


def test_locate_falls_back_to_the_workers_of_the_node_whose_disk_tier_holds_a_chunk(storage):
    gone = claim(storage, "d-worker", disk_tier="node-1")
    storage.lease.advertise(gone.name, added=["k1", "k2"], tier="node-1")
    kill(storage, gone)                                        # its cache went with it; its node's disk did not
    a, b = claim(storage, "a-worker", disk_tier="node-1"), claim(storage, "b-worker", disk_tier="node-1")
    claim(storage, "c-worker", disk_tier="node-2")
    where, _ = storage.pool.locate(["k1", "k2", "k3"])
    assert where == {"k1": a.name, "k2": b.name}, "not spread over the node's workers"


def test_locate_never_routes_to_a_leaving_or_forged_worker(storage):
    k = storage.keys
    leaving = claim(storage, "a-worker", leaving="idle")
    storage.lease.advertise(leaving.name, added=["k1"])
    storage.r.set(k.heartbeat("b-worker"), status_of("b-worker", "1" * 16, storage.config.key).encode())
    storage.r.sadd(k.workers, "b-worker")
    storage.lease.advertise("b-worker", added=["k2"])
    fine = claim(storage, "c-worker")
    assert storage.pool.locate(["k1", "k2"]) == ({}, [fine.name])


# -- the pool keeper's record --------------------------------------------------------------------------
def test_a_keepers_state_is_read_back_and_dropped_from_the_list_once_expired(storage):
    k = storage.keys
    storage.pool.publish_keeper("p1", {"wanted": 3, "min": 1, "jobs": {"running": 2}}, ttl=30)
    storage.pool.publish_keeper("p2", {"wanted": 1}, ttl=30)
    got = {s["pool"]: s for s in storage.pool.keepers()}
    assert (got["p1"]["wanted"], got["p1"]["jobs"], got["p2"]["wanted"]) == (3, {"running": 2}, 1)
    assert 0 < storage.r.ttl(k.keeper("p1")) <= 30
    storage.r.delete(k.keeper("p2"))                          # p2 stopped renewing it
    assert [s["pool"] for s in storage.pool.keepers()] == ["p1"]
    assert storage.r.zrange(k.keepers, 0, -1) == [b"p1"]


def test_a_keepers_log_is_newest_first_and_capped(storage):
    for i in range(KEEPER_LOG_ENTRIES + 5):
        storage.pool.keeper_event("p1", {"what": "replaced", "job": f"{i}.0", "why": "held"})
    assert storage.r.llen(storage.keys.keeper_log("p1")) == KEEPER_LOG_ENTRIES
    assert [e["job"] for e in storage.pool.keeper_events("p1", n=3)] == \
        [f"{KEEPER_LOG_ENTRIES + 4 - i}.0" for i in range(3)]


def test_ending_a_keeper_removes_its_state_floor_and_stop_request_but_keeps_its_log(storage):
    k = storage.keys
    storage.pool.publish_keeper("p1", {"wanted": 3}, ttl=30)
    storage.pool.keeper_event("p1", {"what": "started", "job": "", "why": ""})
    storage.pool.set_pool_floor(3, ttl=60)
    assert storage.r.get(k.pool_floor) == b"3" and 0 < storage.r.ttl(k.pool_floor) <= 60
    assert storage.pool.keeper_stop_requested("p1") is None
    storage.pool.request_keeper_stop("p1", "rhtc pool stop on n1")
    assert storage.pool.keeper_stop_requested("p1") == "rhtc pool stop on n1"
    storage.pool.end_keeper("p1")
    assert storage.pool.keepers() == [] and storage.r.zrange(k.keepers, 0, -1) == []
    assert not storage.r.exists(k.keeper("p1"), k.pool_floor) and storage.pool.keeper_stop_requested("p1") is None
    assert [e["what"] for e in storage.pool.keeper_events("p1")] == ["started"]


def test_workers_joined_names_who_reached_the_broker_and_when_also_after_they_left(storage):
    before = time.time()
    a = claim(storage)
    after = time.time()
    kill(storage, a)
    assert storage.lease.reap(every=0) == [a.name]             # it left the pool
    joined = storage.pool.workers_joined()
    assert list(joined) == [a.name] and before - 1 < joined[a.name] < after + 1
    assert storage.pool.workers_joined(since=after + 60) == {}


# -- maps in flight -------------------------------------------------------------------------------------
def test_request_cancel_asks_the_client_and_removes_the_maps_queued_tasks_from_every_queue(storage):
    k, w = storage.keys, claim(storage)
    a = build_map(storage.config.key, 7)
    with tuned(storage, fair_window=2) as s:
        s.maps.enqueue(a.map_id, a.fn_hash, a.fn, {"n": 7}, {None: a.frames[:5], w.name: a.frames[5:]},
                       nonce=a.nonce)                          # shared 0 1, backlog 2 3 4, w's queue 5 6
        b = start_map(s, 2)
    assert storage.pool.request_cancel("0123456789abcdef", "me") is None
    assert storage.pool.request_cancel(a.map_id, "rhtc cancel on n1") == 7
    assert sorted(storage.r.lrange(k.shared_queue, 0, -1)) == sorted(b.frames)
    assert not storage.r.exists(k.backlog(a.map_id), k.queue(w.name))
    (request,) = storage.r.lrange(k.results(a.map_id), 0, -1)
    assert messages.cancelled_by(request) == "rhtc cancel on n1"
    assert 0 < storage.r.ttl(k.results(a.map_id)) <= storage.settings.result_ttl
    assert storage.r.exists(k.map(a.map_id)), "(its client ends it)"


def test_maps_in_flight_report_each_maps_progress_and_whether_its_client_lives(storage):
    k = storage.keys
    with tuned(storage, fair_window=2) as s:
        a = start_map(s, 5, client="alive")
        b = start_map(s, 1, client="dead")
        c = start_map(s, 1)
    storage.r.rpush(k.results(a.map_id), b"a result")
    storage.r.delete(k.client("dead"))
    got = {d["map_id"]: d for d in storage.pool.maps_in_flight()}
    assert (got[a.map_id]["unread_results"], got[a.map_id]["queued"], got[a.map_id]["n"]) == (1, 5, "5")
    assert [got[m.map_id]["client_alive"] for m in (a, b, c)] == [True, False, None]
    assert not {"nonce", "sent", "answered", "pooled", "partial_seq", "partials_refused"} & set(got[a.map_id]), \
        "the map's private fields are shown"


def test_maps_in_flight_forget_registry_entries_of_maps_that_are_gone_unless_read_only(storage):
    k = storage.keys
    m = start_map(storage, 1)
    storage.r.zadd(k.maps, {"00000000000gone": 1.0})
    assert [d["map_id"] for d in storage.pool.maps_in_flight(tidy=False)] == [m.map_id]
    assert storage.r.zscore(k.maps, "00000000000gone") is not None
    assert [d["map_id"] for d in storage.pool.maps_in_flight()] == [m.map_id]
    assert storage.r.zrange(k.maps, 0, -1) == [m.map_id.encode()]
