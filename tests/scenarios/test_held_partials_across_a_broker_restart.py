"""A broker restart while a worker holds a partial. The restarted broker has lost the map
and the leases; the client sends every task that is not counted yet again, the ones the
worker holds in its partial too. The worker must not run and fold
those a second time (a partial covering a task twice is malformed: the client drops it):
it keeps them, leased again, in its partial. And a partial the client does drop as
malformed costs its own tasks, sent again at once, never the map.

The restart happens when the map's progress reaches a point (the K-th run of a task
waits for a gate), never after a sleep. Real redis-server (killed and started again
empty), real worker processes.
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from rhtc.broker.wire import protocol
from rhtc.broker.wire.config import settings
from rhtc.broker.wire.merge import encode_partial
from rhtc.broker.wire.messages import ResultMeta
from rhtc.broker.storage import Storage
from rhtc.client.handle import MapHandle
from rhtc.client.engine.maprun import MapRun
from rhtc.client.engine.options import MapOptions
from tests.helpers import poll_until, register_by_value, wait_until
from tests.kits.merge import counted, everything_once, runs, start_map

register_by_value(__name__)

TIMER = {"merge_seconds": 60.0, "merge_tasks": 150}     # partials held until the queue runs dry


def gated_at(args):
    """Counter({index: 1}), noting the run as ``<index>.<pid>.<ns>``; the ``k``-th run of
    the map waits for ``folder/go``."""
    folder, i, k = args
    Path(folder, f"{i}.{os.getpid()}.{time.monotonic_ns()}").touch()
    if sum(len(p) for p in runs(Path(folder)).values()) == k:
        poll_until(Path(folder, "go").exists, 90, interval=0.02)
    time.sleep(0.01)
    return Counter({i: 1})


def answering(fn):
    """``fn()``, or False while the restarted broker does not answer yet."""
    try:
        return fn()
    except redis.exceptions.RedisError:
        return False


@pytest.mark.timeout(150)
def test_a_broker_restart_while_a_partial_is_held_runs_no_task_twice(broker, workers, storage, tmp_path):
    workers.start(1)
    n, k = 30, 10
    h = start_map(broker, gated_at, [(str(tmp_path), i, k) for i in range(n)], **TIMER)
    wait_until(lambda: sum(len(p) for p in runs(tmp_path).values()) == k, 60,
               f"the worker to fold {k - 1} tasks into its partial and start one more")
    broker.restart()                          # empty: the map, its queue and the leases are gone
    wait_until(lambda: answering(lambda: storage.r.exists(storage.keys.map(h.map_id)) and (
        storage.r.llen(storage.keys.shared_queue) + storage.r.llen(storage.keys.backlog(h.map_id)))), 60,
        "the client to send the map's tasks again")
    (tmp_path / "go").touch()                 # the held tasks come back to the worker that holds them
    assert h.wait(timeout=90) == everything_once(n)
    ran = runs(tmp_path)
    twice = sorted(i for i, pids in ran.items() if len(pids) > 1)
    assert sorted(ran) == list(range(n)) and not twice, \
        f"task(s) {twice} ran again though the worker held them in its partial"


def test_a_malformed_partial_costs_its_own_tasks_not_the_map(broker, workers, storage, tmp_path):
    """A partial covering task 0 twice (as a worker that folded a task again made them):
    the client drops it and sends tasks 0 and 1 again at once, not after the audit finds
    them missing (twice, seconds apart), and not the whole map."""
    st = Storage(broker.config, dataclasses.replace(settings(), **TIMER))
    run = MapRun(st, counted, [(str(tmp_path), i, 0.0) for i in range(6)], MapOptions(), reduce=True)
    run.submit()
    taken = [storage.r.rpop(storage.keys.shared_queue) for _ in range(2)]      # a worker took 0 and 1
    assert sorted(protocol.frame_ref(f).index for f in taken) == [0, 1]
    meta = ResultMeta(worker="w", host="h", pid=1, start=1.0, stop=2.0)
    payload = encode_partial([0, 0, 1], [meta] * 3, protocol.dumps(Counter({0: 2, 1: 1})))
    storage.r.rpush(storage.keys.results(run.map_id),
                    protocol.pack_result(storage.config.key, run.map_id, 0, protocol.MERGED, payload))
    assert run.poll(0.5) == []
    assert {0, 1} <= storage.maps.audit(run.map_id), "the malformed partial's tasks were not sent again"
    assert run.resubmissions == 2
    workers.start(1)
    assert MapHandle(run, reduce=True).wait(timeout=60) == everything_once(6)
    assert sorted(len(p) for p in runs(tmp_path).values()) == [1] * 6
