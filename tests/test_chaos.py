"""The chaos test of issue 10: one 5,000-task map with a real toxiproxy between the
workers and Redis. While it runs, at random (seeded; the seed is printed and named in
every failure): connections cut, replies dropped, latency added, peers reset, workers
SIGKILLed and restarted under the same names; one task holds the GIL for three leases.

Every result must be correct, delivered exactly once and in order, and the map must
finish within MAP_BOUND seconds. ``bench chaos`` runs the same scenario (bench/chaos.py).
"""
from __future__ import annotations

import os
import random

import pytest

from rhtc.bench.chaos import FAULT_KINDS, run_chaos

TASKS = 5000
WORKERS = 4
LEASE = 2.0
#: the map's bound with faults. Without faults it takes ~10 s on the 2-core development VM
#: (the GIL task alone holds one worker 7 s); each fault costs at most a few leases.
MAP_BOUND = 150.0


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_5000_task_map_through_a_chaotic_network(tmp_path):
    seed = int(os.environ.get("RHTC_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"chaos seed {seed} (rerun with RHTC_CHAOS_SEED={seed})")
    r = run_chaos(tasks=TASKS, workers=WORKERS, lease=LEASE, seed=seed, faults=True,
                  timeout=MAP_BOUND, log_dir=str(tmp_path))
    print(f"chaos seed {seed}: {r.seconds:.1f} s, faults {dict(r.faults)}, "
          f"{r.correct}/{r.tasks} correct, {r.delivered} delivered")
    where = f"(seed {seed}; worker logs in {tmp_path})"
    assert not r.problems, f"{where}\n" + "\n".join(r.problems)
    assert r.correct == TASKS, f"{r.correct}/{TASKS} results correct and in order {where}"
    assert r.delivered == TASKS, f"{r.delivered} deliveries for {TASKS} tasks {where}"
    assert r.seconds < MAP_BOUND, f"the map took {r.seconds:.0f} s {where}"
    assert all(r.faults[k] >= 1 for k in FAULT_KINDS), f"not every kind of fault was injected: {r.faults}"
