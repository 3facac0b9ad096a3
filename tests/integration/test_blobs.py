"""The broker's side of big results (broker/wire/blobs.py), without workers: a frame of
256 KiB or more travels as a string key of its own, a stub in the results list. A fetch
reads the blob and deletes it, a stub the broker drops takes its blob with it, a fetch
past its budget puts the stubs back in order, and a map that ends with stubs unread (its
normal end, a lazy end, a cancel) deletes their blobs with its keys (``drop_map`` in
lua/lib.lua).

Real redis-server, the real take and fetch scripts; the worker is a registered name that
hands results in through ``take``. (With real workers, killed or frozen while they hold
big partials, and maps ended every other way: tests/scenarios/test_big_results_lose_nothing.py,
tests/scenarios/test_ended_maps_leave_no_blobs.py.)"""
from __future__ import annotations

import os
import uuid

import pytest

from rhtc.broker.wire import blobs, protocol
from rhtc.broker.wire.messages import ResultMeta, WorkerStatus, encode_result
from tests.kits.blob import blob_keys

MAP = "0123456789abcdef"


def big_frame(key: bytes, index: int, nbytes: int = 400_000) -> bytes:
    meta = ResultMeta(worker="w", host="h", pid=1, start=1.0, stop=2.0)
    return protocol.pack_result(key, MAP, index, protocol.OK, encode_result(os.urandom(nbytes), meta))


def _worker(storage) -> tuple[str, str]:
    name, inc = f"blob-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:12]
    status = WorkerStatus(name=name, host="h", pid=1, incarnation=inc, key_fingerprint="f")
    assert storage.lease.claim(name, inc, status).ok
    return name, inc


def test_a_big_result_travels_as_a_blob_and_leaves_nothing(storage):
    name, inc = _worker(storage)
    storage.r.hset(storage.keys.map(MAP), "fn", "x")
    storage.r.expire(storage.keys.map(MAP), 600)
    frame = big_frame(storage.config.key, 3)
    tid = protocol.TaskRef(MAP, 3).task_id
    storage.lease.take(name, inc, 0, [(MAP, tid, frame)])
    (item,) = storage.r.lrange(storage.keys.results(MAP), 0, -1)
    assert blobs.is_stub(item) and len(item) < 200, "the list holds the 400 kB frame itself"
    (key,) = blob_keys(storage)
    assert blobs.parse_stub(item) == (len(frame), key.decode()) and 0 < storage.r.ttl(key) <= 600 + 30
    assert storage.maps.fetch_results(MAP, timeout=0) == [frame]
    assert blob_keys(storage) == [] and storage.r.llen(storage.keys.results(MAP)) == 0


def test_a_stub_the_broker_drops_takes_its_blob_with_it(storage):
    """Results of a map that is gone are dropped by take: the big one's blob too."""
    name, inc = _worker(storage)
    tid = protocol.TaskRef(MAP, 0).task_id
    storage.lease.take(name, inc, 0, [(MAP, tid, big_frame(storage.config.key, 0))])
    assert blob_keys(storage) == [] and storage.r.llen(storage.keys.results(MAP)) == 0


def test_stubs_past_a_fetchs_budget_go_back_in_order(storage):
    name, inc = _worker(storage)
    storage.r.hset(storage.keys.map(MAP), "fn", "x")
    storage.r.expire(storage.keys.map(MAP), 600)
    frames = [big_frame(storage.config.key, i) for i in range(5)]
    storage.lease.take(name, inc, 0, [(MAP, protocol.TaskRef(MAP, i).task_id, f) for i, f in enumerate(frames)])
    popped = storage.r.lpop(storage.keys.results(MAP), 5)
    got = storage.maps.resolve(MAP, popped, budget=2 * len(frames[0]))
    assert got == frames[:2], "more than the budget was read at once, or out of order"
    assert storage.maps.fetch_results(MAP, timeout=0) + storage.maps.fetch_results(MAP, timeout=0) == frames[2:]
    assert blob_keys(storage) == []


def _map_with_a_stub(storage) -> None:
    """Map MAP registered, with a big result handed in by a worker: its stub in the results
    list, its blob beside."""
    name, inc = f"blob-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:16]
    assert storage.lease.claim(name, inc, WorkerStatus(name=name, host="h", pid=1, incarnation=inc,
                                                 key_fingerprint="f")).ok
    storage.r.hset(storage.keys.map(MAP), "fn", "x")
    storage.r.expire(storage.keys.map(MAP), 600)
    storage.lease.take(name, inc, 0, [(MAP, protocol.TaskRef(MAP, 0).task_id, big_frame(storage.config.key, 0))])
    assert len(blob_keys(storage)) == 1 and storage.r.llen(storage.keys.results(MAP)) == 1


@pytest.mark.parametrize("end", ["end", "lazy end", "cancel"])
def test_a_map_ended_with_unread_stubs_takes_their_blobs(storage, end):
    """A late hand-in that reached the list before the client's (lazy) end, or results
    never read: the end deletes their blobs with the map's keys."""
    _map_with_a_stub(storage)
    if end == "end":
        storage.maps.end(MAP)
    elif end == "lazy end":
        storage.maps.end(MAP, lazy=True)
        storage.maps.flush()
        storage.link.fast.drain()      # the end went without waiting for its reply: read it first
    else:
        storage.maps.cancel(MAP)
    assert blob_keys(storage) == [] and not storage.r.exists(storage.keys.results(MAP), storage.keys.map(MAP))
