"""The merge on the workers: with ``reduce=``, workers fold their results into partials;
every task still counts exactly once when a worker holding a partial is killed, frozen
past its lease, backed up as a straggler, or raises; a cancelled map leaves nothing.

Results are built so that double counting shows: each task returns ``Counter({index: 1})``
(counted twice, an index reads 2) and notes each run as a file (tests/kits/merge.py). Real
redis-server, real ``python -m rhtc.worker`` processes, stopped by pid.
"""
from __future__ import annotations

import signal
import time
from collections import Counter

import hist
import pytest

from rhtc.client import RemoteError
from rhtc.client.engine.options import MapOptions
from tests.conftest import map_keys
from tests.helpers import register_by_value, wait_until
from tests.kits.merge import (FAST_LEASE, HOLD, counted, everything_once, freeze_a_worker_holding_a_partial, runs,
                            start_map, task_pid)

register_by_value(__name__)


def with_hist(i):
    h = hist.Hist(hist.axis.Regular(10, 0, 10))
    h.fill([i % 10])
    return {"c": Counter({i: 1}), "h": h, "n": 1}


def test_a_merged_reduction_equals_the_unmerged_one(broker, workers):
    workers.start(2)
    merged = start_map(broker, with_hist, list(range(200)))
    got = merged.wait(timeout=60)
    alone = start_map(broker, with_hist, list(range(200)), options=MapOptions(merge=False))
    want = alone.wait(timeout=60)
    assert got["c"] == want["c"] == everything_once(200)
    assert got["n"] == want["n"] == 200 and got["h"] == want["h"] and got["h"].sum() == 200
    assert merged.run.merging and not alone.run.merging
    assert 1 <= merged.run.partials_accepted < 100 and alone.run.partials_accepted == 0
    metas = merged.run.metas                 # one row per task, with its own worker and times
    assert sorted(m["index"] for m in metas) == list(range(200))
    assert all(m.get("worker") and m["stop"] >= m["start"] for m in metas)


@pytest.mark.quick  # smoke: a worker killed mid-map
def test_a_worker_killed_holding_a_partial_loses_nothing_and_counts_nothing_twice(broker, workers, storage, tmp_path):
    a, b = workers.start(2, env=FAST_LEASE)
    pid = task_pid(storage, a)
    n = 120
    h = start_map(broker, counted, [(str(tmp_path), i, 0.05) for i in range(n)], **HOLD)
    wait_until(lambda: sum(pid in p for p in runs(tmp_path).values()) >= 5, 30, f"{a} ran 5 tasks")
    workers.signal(a, signal.SIGKILL)                # its task process dies with it, partial and all
    assert h.wait(timeout=90) == everything_once(n)
    ran = runs(tmp_path)
    lost = [i for i, pids in ran.items() if pid in pids]
    assert lost and all(len(ran[i]) >= 2 for i in lost), "the killed worker's tasks ran again elsewhere"
    assert h.run.partials_accepted >= 1 and h.run.resubmissions == 0    # its leases brought them back


def test_a_frozen_workers_partial_is_refused_after_its_tasks_ran_elsewhere(broker, workers, storage, tmp_path):
    assert freeze_a_worker_holding_a_partial(broker, workers, storage, tmp_path, counted, 80) == everything_once(80)


def test_a_straggler_with_a_partial_is_backed_up_with_the_tasks_it_holds(broker, workers, tmp_path):
    workers.start(2)
    n = 12
    args = [(str(tmp_path), i, "slow-once" if i == 9 else 0.2) for i in range(n)]
    t = time.monotonic()
    h = start_map(broker, counted, args)
    assert h.wait(timeout=50) == everything_once(n)
    assert time.monotonic() - t < 30                        # the first copy of task 9 sleeps 60 s


def test_errors_travel_alone_and_retries_count_once(broker, workers, tmp_path):
    workers.start(2)
    n = 40
    kinds = {7: "raise", 23: "raise", 11: "flaky"}
    args = [(str(tmp_path), i, kinds.get(i, 0.01)) for i in range(n)]
    h = start_map(broker, counted, args, errors="return", options=MapOptions(retries=1, retry_on=OSError))
    got = h.wait(timeout=60)
    assert got == Counter({i: 1 for i in range(n) if i not in (7, 23)})
    assert sorted((e.index, e.remote_type) for e in h.failures) == [(7, "ValueError"), (23, "ValueError")]
    assert h.run.partials_accepted >= 1
    (tmp_path / "again").mkdir()
    args = [(str(tmp_path / "again"), i, kinds.get(i, 0.01)) for i in range(n)]
    with pytest.raises(RemoteError, match="task 7 fails") as info:
        start_map(broker, counted, args, options=MapOptions(retries=1, retry_on=OSError)).wait(timeout=60)
    assert info.value.index == 7 and [e.index for e in info.value.more] == [23]


def test_a_cancelled_merging_map_leaves_no_keys_and_no_leases(broker, workers, storage, tmp_path):
    names = workers.start(2)
    h = start_map(broker, counted, [(str(tmp_path), i, 0.1) for i in range(200)], **HOLD)
    wait_until(lambda: len(runs(tmp_path)) >= 10, 30, "tasks ran")
    h.cancel()
    wait_until(lambda: not map_keys(storage), 10, "the map's keys are gone")
    wait_until(lambda: not any(storage.maps.leased_to(w, h.map_id) for w in names), 10,
               "no worker holds a lease of the map")
    time.sleep(1.0)                                          # the workers hand their partials in
    assert not map_keys(storage)
