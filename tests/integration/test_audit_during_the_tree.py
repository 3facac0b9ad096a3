"""The audit finds a map's tasks while the tree of partials moves them under its walk.

The client's audit (``Storage.audit_map``) walks the queues, then every worker's lease (a
call each: a thousand at 1,000 workers), then the map's lists. At a map's end the tree
moves partials both ways under that walk: a worker parks its partial (its tasks leave its
lease for the map's pool), a merger takes partials from the pool into its lease. A task
the walk misses twice in a row is sent again, and at 1,000 workers x 1 MB the tree made
the audit miss 15 tasks so ("vanished from the broker; resubmitting them").

Real parts: a real redis-server, the real audit and lease scripts; the moves are the
tree's own writes (the pool list, a lease entry), made at the worst instant of the walk:
while it walks the leases.
"""
from __future__ import annotations

import uuid

from rhtc.broker.wire import protocol
from rhtc.broker.wire.merge import encode_partial, partial_id
from rhtc.broker.wire.messages import HandedUp, ResultMeta
from tests.kits.broker import claimed_worker, queued_map


def _partial(key: bytes, map_id: str, indices: list[int]) -> bytes:
    meta = ResultMeta(worker="w", host="h", pid=1, start=0.0, stop=1.0)
    payload = encode_partial(indices, [meta] * len(indices), protocol.dumps(len(indices)))
    return protocol.pack_result(key, map_id, indices[0], protocol.MERGED, payload)


def _lease_value(inc: str, frame: bytes) -> bytes:
    return inc.encode() + b"0" * 13 + frame


def test_a_partial_a_merger_takes_from_the_pool_during_the_walk_is_found(broker, storage, monkeypatch):
    key = broker.config.key
    names = sorted(f"m{k}-{uuid.uuid4().hex[:4]}" for k in range(3))
    incs = {name: claimed_worker(storage, name) for name in names}
    map_id = queued_map(storage, key, 4)
    item = _partial(key, map_id, [0, 1])
    storage.r.rpush(storage.keys.pool(map_id), item)
    walked: list[str] = []
    real = storage.maps.inflight.leased_to

    def walk_then_move(worker, mid):
        got = real(worker, mid)
        walked.append(worker)
        if len(walked) == 2:        # a merger the walk has passed takes the partial now
            assert storage.r.lpop(storage.keys.pool(map_id)) == item
            storage.r.hset(storage.keys.lease(walked[0]), partial_id(map_id, 1), _lease_value(incs[walked[0]], item))
        return got
    monkeypatch.setattr(storage.maps.inflight, "leased_to", walk_then_move)
    assert {0, 1} <= storage.maps.audit(map_id)


def test_a_partial_parked_during_the_walk_is_found(broker, storage, monkeypatch):
    key = broker.config.key
    names = sorted(f"p{k}-{uuid.uuid4().hex[:4]}" for k in range(3))
    incs = {name: claimed_worker(storage, name) for name in names}
    map_id = queued_map(storage, key, 4)
    for name in names:              # every worker holds two finished tasks in its partial
        i = 2 * names.index(name)
        for j in (i, i + 1):
            storage.r.hset(storage.keys.lease(name), protocol.TaskRef(map_id, j).task_id,
                           _lease_value(incs[name], b"task"))
    walked: list[str] = []
    real = storage.maps.inflight.leased_to

    def walk_then_park(worker, mid):
        if not walked:              # before the walk reaches them, the others park their partials
            for other in names:
                if other != worker:
                    ids = storage.r.hkeys(storage.keys.lease(other))
                    storage.r.hdel(storage.keys.lease(other), *ids)
                    storage.r.rpush(storage.keys.pool(map_id),
                                    _partial(key, map_id, sorted(protocol.TaskRef.from_task_id(t).index for t in ids)))
        walked.append(worker)
        return real(worker, mid)
    monkeypatch.setattr(storage.maps.inflight, "leased_to", walk_then_park)
    assert set(range(6)) <= storage.maps.audit(map_id)


def test_a_partial_parked_then_taken_by_a_merger_the_walk_passed_is_found(broker, storage, monkeypatch):
    """The one move against the walk's order, made by the tree's own script: after the walk
    read the pool and passed a merger, a worker parks its partial (its tasks leave its
    lease for the pool) and that merger takes it into its lease before the walk reads the
    pool again. No single walk sees those tasks; the take counts the map's partial
    sequence, so the audit walks again and finds them."""
    key = broker.config.key
    names = sorted(f"q{k}-{uuid.uuid4().hex[:4]}" for k in range(3))
    incs = {name: claimed_worker(storage, name) for name in names}
    map_id = queued_map(storage, key, 6)
    tids = {name: [protocol.TaskRef(map_id, 2 * k + j).task_id for j in (0, 1)] for k, name in enumerate(names)}
    for name in names:              # every worker holds two finished tasks in its partial
        for tid in tids[name]:
            storage.r.hset(storage.keys.lease(name), tid, _lease_value(incs[name], b"task"))
    walked: list[str] = []
    real = storage.maps.inflight.leased_to

    def walk_then_move(worker, mid):
        got = real(worker, mid)
        walked.append(worker)
        if len(walked) == 1:        # the walk passed this merger: another's partial goes up, to it
            parker = next(n for n in names if n != worker)
            indices = sorted(protocol.TaskRef.from_task_id(t).index for t in tids[parker])
            _, parked, _ = storage.lease.merge_up(parker, incs[parker], map_id, 8, b"".join(tids[parker]),
                                            _partial(key, map_id, indices), covers=2)
            assert parked == HandedUp.PARKED
            _, given, inputs = storage.lease.merge_up(worker, incs[worker], map_id, 8)
            assert given == HandedUp.INPUTS and len(inputs) == 1
        return got
    monkeypatch.setattr(storage.maps.inflight, "leased_to", walk_then_move)
    assert set(range(6)) <= storage.maps.audit(map_id)
    assert len(walked) == 2 * len(names), "the audit did not walk the leases again"
