"""Workers that leave on their own terms (worker/lifetime.py): at the end of their lifetime
they drain (no new task, the one in hand finished, results handed in, exit 0) and no task
is lost or run twice; an idle worker leaves only while the pool stays above its keeper's
floor. Real broker, real worker processes."""
from __future__ import annotations

import json
import time

import pytest

from rhtc import remote_map
from rhtc.broker.storage import Storage

from tests.pools.common import wait_for


def _runs_logged(log: str):
    """A task that sleeps, and appends (index, worker, start, stop) to ``log`` when it ends."""
    def task(x):
        import json
        import os
        import time
        t0 = time.time()
        time.sleep(x[1])
        with open(log, "a") as fh:
            fh.write(json.dumps([x[0], os.environ.get("RHTC_TEST_NAME", "?"), t0, time.time()]) + "\n")
        return x[0]
    return task


def test_a_worker_drains_at_the_end_of_its_lifetime_and_loses_nothing(broker, workers, tmp_path):
    log = tmp_path / "runs.jsonl"
    # two workers with an 8 s lifetime (drain 0.8 s before the end), two without
    short = workers.start(2, env={"RHTC_LIFETIME": "8", "RHTC_LIFETIME_STAGGER": "0"})
    n = 24
    out = []

    def later():
        workers.start(1, names=["stays"])
    import threading
    starter = threading.Timer(3.0, later)
    starter.start()
    try:
        out = remote_map(_runs_logged(str(log)), [(i, 1.3) for i in range(n)], broker=broker.config,
                         progress=False, routing=False)
    finally:
        starter.join()
    assert out == list(range(n))
    for name in short:        # they left on their own, with exit code 0, while the map ran
        assert workers.procs[name].wait(timeout=30) == 0, workers.log(name)
        assert "leaves (its lifetime is up)" in workers.log(name)
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    indices = sorted(r[0] for r in runs)
    assert indices == list(range(n)), f"every task ran exactly once (none handed back mid-run): {indices}"
    s = Storage(broker.config)
    try:
        assert set(short).isdisjoint({w["name"] for w in s.pool.live_workers()})
    finally:
        s.close()


def test_a_worker_publishes_when_it_leaves_from_its_flag_or_its_job_ad(broker, workers, tmp_path):
    ad = tmp_path / "job.ad"
    ad.write_text("ClusterId = 7\nProcId = 0\nMaxRuntime = 200\n")       # as CERN's JobFlavour sets it
    flag, = workers.start(1, env={"RHTC_LIFETIME": "30", "RHTC_LIFETIME_MARGIN": "3", "RHTC_LIFETIME_STAGGER": "0"})
    from_ad, = workers.start(1, env={"_CONDOR_JOB_AD": str(ad), "RHTC_LIFETIME_STAGGER": "0"})
    s = Storage(broker.config)
    try:
        status = {w.name: w for w in s.pool.worker_statuses()}
        assert status[flag].leaves_at == pytest.approx(status[flag].started + 27, abs=1.0)
        assert status[from_ad].leaves_at == pytest.approx(status[from_ad].started + 180, abs=1.0)
        assert not status[flag].leaving
    finally:
        s.close()


def test_an_idle_worker_leaves_only_above_the_pools_floor(broker, workers):
    s = Storage(broker.config)
    try:
        s.pool.set_pool_floor(2, ttl=120)
        names = workers.start(3, env={"RHTC_IDLE_TIMEOUT": "1.5"})
        # one may leave (3 -> 2), the other two stay at the floor
        wait_for(lambda: sum(workers.procs[n].poll() is not None for n in names) >= 1, 30, what="one idle worker to leave")
        time.sleep(4.0)
        gone = [n for n in names if workers.procs[n].poll() is not None]
        assert len(gone) == 1, f"only one of three may leave above a floor of 2: {gone}"
        assert workers.procs[gone[0]].returncode == 0
        assert "leaves (no task for 2 s)" in workers.log(gone[0])
        # without a floor (no keeper), the others leave too
        s.r.delete(s.keys.pool_floor)
        wait_for(lambda: all(workers.procs[n].poll() is not None for n in names), 30, what="the others to leave")
        assert not s.pool.live_workers()
    finally:
        s.close()


def test_a_draining_worker_is_routed_nothing(broker, workers):
    """While it finishes its last task, a leaving worker is still live, but the client's
    routing (Storage.locate) no longer offers it: a chunk sent there would wait for a
    worker that takes nothing more."""
    from rhtc import submit
    name, = workers.start(1, env={"RHTC_LIFETIME": "4", "RHTC_LIFETIME_STAGGER": "0"})
    other, = workers.start(1)
    h = submit(_runs_logged("/dev/null"), [(0, 8.0), (1, 8.0)], broker=broker.config,
               routing=False)
    s = Storage(broker.config)
    try:
        wait_for(lambda: any(w.name == name and w.leaving for w in s.pool.worker_statuses()), 30,
                 what=f"{name} to start draining")
        _, live = s.pool.locate(["uuid:Events:0-100"])
        assert name not in live and other in live, live
        assert sorted(h.wait()) == [0, 1]
    finally:
        s.close()
