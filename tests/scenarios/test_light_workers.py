"""The bench's light workers speak the real protocol: a map over 200 of them in two
processes returns every result once, in order, with a timeline; killing one of their
processes mid-map loses nothing (its workers' names expire and their tasks run again)."""
from __future__ import annotations

import time

import pytest
import redis

from rhtc import remote_map
from rhtc.bench.lightworkers import LightPool, light_task
from rhtc.broker.embedded import EmbeddedBroker
from rhtc.client import submit
from rhtc.client.reports.efficiency import efficiency
from tests.helpers import wait_until

#: starts its own broker and light-worker processes: the full suite only
pytestmark = pytest.mark.heavy


def _all_waiting(config, n: int) -> None:
    """Until the task loops of all ``n`` light workers wait in their blocking pops (one blocked
    connection each; registered is not yet waiting): a map submitted then is handed out to
    every one of them in turn, however little CPU their processes get (their task threads run
    at the lowest weight, so on a busy machine they start their pops late)."""
    r = redis.Redis.from_url(config.url)
    try:
        wait_until(lambda: sum("b" in c.get("flags", "") for c in r.client_list()) >= n, 120,
                   f"the {n} light workers' task loops to wait for tasks", interval=0.1)
    finally:
        r.close()


def test_map_over_200_light_workers_in_two_processes():
    with EmbeddedBroker() as b, LightPool(b.config, workers=200, processes=2) as pool:
        _all_waiting(b.config, 200)
        n = 600
        got = remote_map(light_task, [(0.2, 800, i) for i in range(n)], broker=b.config, progress=False)
        assert [tag for tag, _ in got] == list(range(n))
        assert all(value.nbytes == 800 for _, value in got)
        from rhtc import last_map
        rec = last_map().record()
        assert sorted(t.index for t in rec.tasks) == list(range(n))
        eff = efficiency(rec)
        assert len(eff["per_worker"]) > 100          # the work spread over the light workers
        assert {w.rsplit("-", 1)[0] for w in eff["per_worker"]} == {"light0", "light1"}
        assert 0 < eff["efficiency"] <= 1
        assert pool.registered_s is not None


def test_killing_a_light_process_mid_map_loses_nothing():
    with EmbeddedBroker() as b, LightPool(b.config, workers=40, processes=2) as pool:
        _all_waiting(b.config, 40)                      # the first wave is handed to both processes
        n = 120
        h = submit(light_task, [(1.0, 800, i) for i in range(n)], broker=b.config)
        time.sleep(1.5)                                 # the first wave runs on both processes
        killed = set(pool.kill(0))
        got = h.wait(120)
        assert [tag for tag, _ in got] == list(range(n))
        rec = h.record()
        assert sorted(t.index for t in rec.tasks) == list(range(n))
        lost = [a for a in rec.attempts if a.outcome == "lost"]
        assert lost and {a.worker for a in lost} <= killed      # the killed workers' tasks ran again
        rerun = {a.index for a in lost}
        assert all(t.worker not in killed for t in rec.tasks if t.index in rerun)
