"""Big results travel beside the results list (broker/wire/blobs.py): a frame of 256 KiB or
more as a string key of its own, a stub in the list. Nothing is lost or counted twice on
that path either: a dropped stub takes its blob with it, a blob that expired before the
client read it costs a rerun, not the task, and a worker killed or frozen while it holds
a big partial loses nothing and leaves no blob behind. Real redis-server, real workers."""
from __future__ import annotations

import os
import signal
import uuid

import numpy as np

from rhtc.broker.wire import blobs, protocol
from rhtc.broker.wire.messages import ResultMeta, WorkerStatus, encode_result
from rhtc.client.handle import MapHandle
from rhtc.client.engine.maprun import MapRun
from rhtc.client.engine.options import MapOptions
from tests.helpers import register_by_value, wait_until
from tests.test_merge import (FAST_LEASE, HOLD, counted, everything_once, freeze_a_worker_holding_a_partial,
                              runs, start_map, task_pid)

register_by_value(__name__)

MAP = "0123456789abcdef"


def counted_big(args):
    """:func:`tests.test_merge.counted` with 320 kB of incompressible floats beside it."""
    return {"c": counted(args), "pad": np.random.default_rng(args[1]).random(40_000)}


def big_frame(key: bytes, index: int, nbytes: int = 400_000) -> bytes:
    meta = ResultMeta(worker="w", host="h", pid=1, start=1.0, stop=2.0)
    return protocol.pack_result(key, MAP, index, protocol.OK, encode_result(os.urandom(nbytes), meta))


def _worker(storage) -> tuple[str, str]:
    name, inc = f"blob-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:12]
    status = WorkerStatus(name=name, host="h", pid=1, incarnation=inc, key_fingerprint="f")
    assert storage.lease.claim(name, inc, status).ok
    return name, inc


def _blob_keys(storage) -> list[bytes]:
    return storage.r.keys(storage.keys.blob("*"))


def test_a_big_result_travels_as_a_blob_and_leaves_nothing(storage):
    name, inc = _worker(storage)
    storage.r.hset(storage.keys.map(MAP), "fn", "x")
    storage.r.expire(storage.keys.map(MAP), 600)
    frame = big_frame(storage.config.key, 3)
    tid = protocol.TaskRef(MAP, 3).task_id
    storage.lease.take(name, inc, 0, [(MAP, tid, frame)])
    (item,) = storage.r.lrange(storage.keys.results(MAP), 0, -1)
    assert blobs.is_stub(item) and len(item) < 200, "the list holds the 400 kB frame itself"
    (key,) = _blob_keys(storage)
    assert blobs.parse_stub(item) == (len(frame), key.decode()) and 0 < storage.r.ttl(key) <= 600 + 30
    assert storage.maps.fetch_results(MAP, timeout=0) == [frame]
    assert _blob_keys(storage) == [] and storage.r.llen(storage.keys.results(MAP)) == 0


def test_a_stub_the_broker_drops_takes_its_blob_with_it(storage):
    """Results of a map that is gone are dropped by take: the big one's blob too."""
    name, inc = _worker(storage)
    tid = protocol.TaskRef(MAP, 0).task_id
    storage.lease.take(name, inc, 0, [(MAP, tid, big_frame(storage.config.key, 0))])
    assert _blob_keys(storage) == [] and storage.r.llen(storage.keys.results(MAP)) == 0


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
    assert _blob_keys(storage) == []


def test_a_blob_that_expired_before_it_was_read_costs_a_rerun_not_the_task(broker, storage, workers, tmp_path):
    run = MapRun(storage, counted_big, [(str(tmp_path), i, 0.0) for i in range(3)], MapOptions(merge=False))
    run.submit()                                       # nobody reads the results yet
    workers.start(1)
    key = storage.keys.results(run.map_id)
    wait_until(lambda: storage.r.llen(key) == 3, 30, "three stubs in the results list")
    storage.r.delete(storage.r.keys(storage.keys.blob(f"{run.map_id}:*"))[0])    # one blob expires
    h = MapHandle(run, reduce=False).start_background()
    run.state.last_progress -= 60                            # the audit looks at once
    got = h.wait(timeout=60)
    assert [g["c"] for g in got] == [{i: 1} for i in range(3)]
    assert run.resubmissions == 1 and sorted(len(p) for p in runs(tmp_path).values()) == [1, 1, 2]


def test_a_worker_killed_holding_a_big_partial_loses_nothing(broker, workers, storage, tmp_path):
    a, b = workers.start(2, env=FAST_LEASE)
    pid = task_pid(storage, a)
    n = 60
    h = start_map(broker, counted_big, [(str(tmp_path), i, 0.05) for i in range(n)], **HOLD)
    wait_until(lambda: sum(pid in p for p in runs(tmp_path).values()) >= 5, 30, f"{a} ran 5 tasks")
    workers.signal(a, signal.SIGKILL)
    assert h.wait(timeout=90)["c"] == everything_once(n)
    assert h.run.partials_accepted >= 1
    assert _blob_keys(storage) == []


def test_a_frozen_workers_big_partial_is_refused_and_its_blob_deleted(broker, workers, storage, tmp_path):
    got = freeze_a_worker_holding_a_partial(broker, workers, storage, tmp_path, counted_big, 40)
    assert got["c"] == everything_once(40)
    # a worker may be handing in one more partial as the map ends: its blob is written, then
    # the hand-in finds the map gone and deletes it (seen in CI between the two steps)
    wait_until(lambda: _blob_keys(storage) == [], 10, f"a refused partial left its blob: {_blob_keys(storage)}")


def noise(i):
    """An incompressible 320 kB array, ``i`` at its first place: a result that travels as a blob."""
    a = np.random.default_rng(i).random(40_000)
    a[0] = i
    return a


def test_results_big_enough_for_a_blob_are_handed_in_without_killing_the_task_process(broker, workers, storage):
    """Each result's blob is SET on the fast lane before the take script that hands its stub
    in; the take read the SET's reply as its own ("too many values to unpack") and the task
    process died on every big result since the clock moved beside the take (7a72f7f): real
    workers came back through their supervisor, slower; light workers never did."""
    names = workers.start(3)
    n = 30
    got = start_map(broker, noise, list(range(n)), reduce=False, options=MapOptions(merge=False)).wait(timeout=60)
    assert [a[0] for a in got] == list(range(n)) and all(np.array_equal(a, noise(i)) for i, a in enumerate(got))
    dead = [name for name in names if "Traceback" in workers.log(name) or "too many values" in workers.log(name)]
    assert not dead, f"task processes died handing big results in: {[workers.log(name)[-2000:] for name in dead]}"
    wait_until(lambda: not list(storage.r.scan_iter(match=f"{storage.keys.ns}:blob:*")), 10, "a blob was left behind")
