"""The wall-clock efficiency of a real map: a map on a LocalCluster (a private
redis-server and worker processes) reads lower by the wall clock than per worker, and its
figure is the tasks' busy time over (the workers that ran them x the map's submission to
its last result), worked out here from the record's rows."""
from __future__ import annotations

import time

import pytest

from rhtc import LocalCluster, last_map, remote_map
from rhtc.client.reports.efficiency import efficiency

#: starts a local cluster
pytestmark = pytest.mark.heavy


def test_a_map_on_a_local_cluster_is_less_efficient_by_the_wall_clock_than_per_worker():
    with LocalCluster(n_workers=2, name_prefix="effwall"):
        assert remote_map(time.sleep, [0.3] * 8, progress=False) == [None] * 8
        rec = last_map().record()
    eff = efficiency(rec)
    runs = [(t.worker, t.duration) for t in rec.tasks] + [(a.worker, a.duration) for a in rec.attempts if a.timed]
    took_part = {worker for worker, _ in runs}
    assert len(rec.tasks) == 8 and 1 <= len(took_part) <= 2
    assert rec.start < min(t.start for t in rec.tasks) and rec.end >= max(t.stop for t in rec.tasks)
    by_hand = sum(d for _, d in runs) / (len(took_part) * (rec.end - rec.start))
    assert eff["efficiency_wall"] == pytest.approx(by_hand)
    # the submission precedes the first task (the ramp), the last result follows the last task
    assert 0 < eff["efficiency_wall"] < eff["efficiency"] <= 1
    assert eff["efficiency_wall"] <= eff["efficiency_to_end"]
