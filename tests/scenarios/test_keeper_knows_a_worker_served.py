"""Whether a batch job's worker served comes from the broker, not from the keeper's looks
(condor/keeper_rules.py's ``mark_served``): a worker named as a job's that ran a task and
left is still in the broker's record of claims, so a job held after its worker served is
no failed start-up. A real broker, a real worker process."""
from __future__ import annotations

import signal
import time

from rhtc.condor.batch import job_of_worker
from rhtc.condor.keeper_rules import KeeperPlan, Tracked, mark_served, verdict


def test_the_broker_remembers_a_worker_that_served_and_left(broker, workers):
    """Whether a job served comes from the broker: a worker named as a batch job's, that
    ran a task and left (its heartbeat gone), is still in the broker's record of claims."""
    from rhtc.broker.storage import Storage
    from rhtc.client import remote_map
    t0 = time.time()
    name = workers.start(names=["condor-4242.0@node1"])[0]
    assert remote_map(abs, [-3], broker=broker, progress=False) == [3]
    workers.signal(name, signal.SIGTERM)                  # as condor_hold does: it retires and exits 0
    assert workers.procs[name].wait(30) == 0
    s = Storage(broker.config)
    try:
        assert name not in {w.name for w in s.pool.worker_statuses(queue_depths=False)}, "its heartbeat is gone"
        joined = s.pool.workers_joined()
        assert name in joined and t0 - 1 <= joined[name] <= time.time() + 1, joined
        assert job_of_worker(name) == "4242.0"
        assert s.pool.workers_joined(since=time.time() + 60) == {}, "a later look reads only newer claims"
        assert s.r.ttl(s.keys.joined) > 0, "the record expires"
    finally:
        s.close()
    t = Tracked("4242.0", submitted=t0)
    assert mark_served(t, joined[name])
    assert verdict(t, "held", "via condor_hold", 1, time.time(), time.time(), KeeperPlan(1, 1)).failure is False
