"""Big results travel beside the results list (broker/wire/blobs.py): a frame of 256 KiB or
more as a string key of its own, a stub in the list. Nothing is lost or counted twice on
that path either: a blob that expired before the client read it costs a rerun, not the
task, a worker killed or frozen while it holds a big partial loses nothing and leaves no
blob behind, and handing big results in never kills the task process. Real redis-server,
real workers. (The broker's side alone, without workers: tests/integration/test_blobs.py.)"""
from __future__ import annotations

import signal

import numpy as np

from rhtc.client.handle import MapHandle
from rhtc.client.engine.maprun import MapRun
from rhtc.client.engine.options import MapOptions
from tests.kits.blob import blob_keys, counted_big, noise
from tests.helpers import register_by_value, wait_until
from tests.kits.merge import (FAST_LEASE, HOLD, everything_once, freeze_a_worker_holding_a_partial, runs, start_map,
                            task_pid)

register_by_value(__name__)


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
    assert blob_keys(storage) == []


def test_a_frozen_workers_big_partial_is_refused_and_its_blob_deleted(broker, workers, storage, tmp_path):
    got = freeze_a_worker_holding_a_partial(broker, workers, storage, tmp_path, counted_big, 40)
    assert got["c"] == everything_once(40)
    # a worker may be handing in one more partial as the map ends: its blob is written, then
    # the hand-in finds the map gone and deletes it (seen in CI between the two steps)
    wait_until(lambda: blob_keys(storage) == [], 10, f"a refused partial left its blob: {blob_keys(storage)}")


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
