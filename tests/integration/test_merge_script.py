"""The broker's part of the tree of partials (``lua/merge.lua``) on a real redis-server:
what a worker's hand-up becomes. Found at 1,000 light workers: the last partial of a map
whose pool was empty made the script fail ("value is not an integer": Redis refuses
``HINCRBY ... -0``) after it had delivered the partial, so the worker sent it again, the
broker refused the copy, and its tasks ran again."""
from __future__ import annotations

import uuid
from collections import Counter

from rhtc.broker.wire import protocol
from rhtc.broker.wire.messages import HandedUp, ResultMeta, WorkerStatus
from rhtc.worker.merge import Partials
from rhtc.broker.wire.merge import MergePlan

META = ResultMeta(worker="w", host="h", pid=1, start=1.0, stop=2.0)


def _setup(broker, storage, n: int):
    key, name, inc = broker.config.key, "m-" + uuid.uuid4().hex[:6], uuid.uuid4().hex[:16]
    assert storage.lease.claim(name, inc, WorkerStatus(name=name, host="h", pid=1, incarnation=inc, key_fingerprint="f")).ok
    map_id, nonce = uuid.uuid4().hex[:16], protocol.new_nonce()
    fn = protocol.sign(key, protocol.dumps(len))
    fh = protocol.function_hash(fn)
    frames = [protocol.pack_task(key, map_id, i, nonce, fh, i) for i in range(n)]
    storage.maps.enqueue(map_id, fh, fn, {"n": n}, {name: frames}, nonce=nonce)
    held, _, batch = storage.lease.take(name, inc, n)
    assert held and len(batch) == n
    part = Partials(key, room=100)
    plan = MergePlan(lambda i: i, None, 1000, 3600.0, fanin=8)
    for i in range(n):
        part.fold(plan, protocol.TaskRef(map_id, i), Counter({i: 1}), META)
    ids, frame = part.pack_up(map_id)
    return name, inc, map_id, ids, frame


def test_the_last_partial_of_a_map_with_an_empty_pool_is_delivered_once(broker, storage):
    name, inc, map_id, ids, frame = _setup(broker, storage, 3)
    held, outcome, inputs = storage.lease.merge_up(name, inc, map_id, 8, ids, frame, covers=3)
    assert (held, outcome, inputs) == (True, HandedUp.DELIVERED, [])
    assert storage.r.llen(storage.keys.results(map_id)) == 1
    assert not storage.r.hlen(storage.keys.lease(name)), "its tasks left the lease with it"
    assert int(storage.r.hget(storage.keys.map(map_id), "pooled") or 0) == 0
