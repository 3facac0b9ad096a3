"""A worker's batch of results goes in with one push per map (``lua/take.lua``): a run of
one map's plain results is one HDEL of their lease entries, one RPUSH and one count, where
it was six commands a result. Order is kept: another map's result or a partial ends a run.

Real parts: a real redis-server, the real take script, results handed in by ``take``.
"""
from __future__ import annotations

from rhtc.broker.wire import protocol
from rhtc.broker.wire.keys import MAP_ANSWERED
from rhtc.broker.wire.merge import encode_partial
from rhtc.broker.wire.messages import ResultMeta
from tests.kits.broker import claimed_worker, queued_map


def _leased(storage, worker: str, inc: str, map_id: str, indices) -> list[bytes]:
    tids = [protocol.TaskRef(map_id, i).task_id for i in indices]
    for tid in tids:
        storage.r.hset(storage.keys.lease(worker), tid, inc.encode() + b"0" * 13 + b"task")
    return tids


def _calls(storage, command: str) -> int:
    return int(storage.r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_batch_of_one_maps_results_is_one_push_and_one_count(broker, storage):
    key = broker.config.key
    inc = claimed_worker(storage, "handin-1")
    map_id = queued_map(storage, key, 40)
    tids = _leased(storage, "handin-1", inc, map_id, range(30))
    storage.lease.take("handin-1", inc, max_tasks=0)                  # (loads the library)
    results = [(map_id, tid, protocol.pack_result(key, map_id, i, protocol.OK, b"v%d" % i))
               for i, tid in enumerate(tids)]
    storage.r.config_resetstat()
    held, _, batch = storage.lease.take("handin-1", inc, max_tasks=0, results=results)
    assert held and batch == []
    assert _calls(storage, "rpush") == 1 and _calls(storage, "hdel") == 1, \
        f"30 results of one map took {_calls(storage, 'rpush')} pushes and {_calls(storage, 'hdel')} HDELs"
    assert storage.r.lrange(storage.keys.results(map_id), 0, -1) == [f for _, _, f in results]
    assert int(storage.r.hget(storage.keys.map(map_id), MAP_ANSWERED)) == 30
    assert storage.r.hlen(storage.keys.lease("handin-1")) == 0


def test_runs_keep_the_order_of_the_hand_in_across_maps_and_partials(broker, storage):
    key = broker.config.key
    inc = claimed_worker(storage, "handin-2")
    a, b = queued_map(storage, key, 10), queued_map(storage, key, 10)
    ta = _leased(storage, "handin-2", inc, a, range(6))
    tb = _leased(storage, "handin-2", inc, b, range(2))

    def plain(m, tid, i):
        return (m, tid, protocol.pack_result(key, m, i, protocol.OK, b"x"))
    meta = ResultMeta(worker="handin-2", host="h", pid=1, start=0.0, stop=1.0)
    part = protocol.pack_result(key, a, 2, protocol.MERGED, encode_partial([2, 3], [meta] * 2, protocol.dumps(2)))
    handed = [plain(a, ta[0], 0), plain(a, ta[1], 1), plain(b, tb[0], 0), (a, ta[2] + ta[3], part),
              plain(a, ta[4], 4), plain(b, tb[1], 1), plain(a, ta[5], 5)]
    held, _, _ = storage.lease.take("handin-2", inc, max_tasks=0, results=handed)
    assert held
    assert storage.r.lrange(storage.keys.results(a), 0, -1) == [h[2] for h in handed if h[0] == a]
    assert storage.r.lrange(storage.keys.results(b), 0, -1) == [h[2] for h in handed if h[0] == b]
    assert int(storage.r.hget(storage.keys.map(a), MAP_ANSWERED)) == 6
    assert int(storage.r.hget(storage.keys.map(b), MAP_ANSWERED)) == 2
    assert storage.r.hlen(storage.keys.lease("handin-2")) == 0


def test_results_of_a_map_that_ended_are_dropped_with_their_lease_entries(broker, storage):
    key = broker.config.key
    inc = claimed_worker(storage, "handin-3")
    map_id = queued_map(storage, key, 4)
    tids = _leased(storage, "handin-3", inc, map_id, range(3))
    storage.r.delete(storage.keys.map(map_id))                   # the map ended meanwhile
    results = [(map_id, tid, protocol.pack_result(key, map_id, i, protocol.OK, b"v")) for i, tid in enumerate(tids)]
    held, _, _ = storage.lease.take("handin-3", inc, max_tasks=0, results=results)
    assert held and storage.r.llen(storage.keys.results(map_id)) == 0
    assert storage.r.hlen(storage.keys.lease("handin-3")) == 0
