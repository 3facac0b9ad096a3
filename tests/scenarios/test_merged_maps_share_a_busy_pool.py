"""Fair share with a reduction: while another analyst's map keeps the workers busy, a
small map merged on the workers waits for a few of that map's tasks, not for the
partials' timer. A worker hands its partial up the tree as soon as its next task is
another map's (worker/loopstate.py); a big map's partials are not cut short by the turns
it takes with another map: those of a map that goes on wait in its pool for the next
merger, not at its client.

The other analyst is a real client process; real redis-server, real worker processes,
stopped by pid. The timer is set to 60 s, so that no test here can pass by it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from rhtc.processes import stop_processes
from tests.conftest import ROOT
from tests.helpers import register_by_value, wait_until
from tests.kits.merge import counted, everything_once, runs, start_map

register_by_value(__name__)

TIMER = {"merge_seconds": 60.0, "merge_tasks": 150}     # the partials' timer: out of reach here

OTHER_ANALYST = textwrap.dedent("""
    import os, sys, time
    from rhtc.client import submit

    def task(arg):
        folder, i = arg
        open(os.path.join(folder, str(i)), "w").close()
        time.sleep(0.05)
        return i

    folder, n, reduce = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    h = submit(task, [(folder, i) for i in range(n)], reduce=True if reduce else None)
    print(h.map_id, flush=True)
    h.wait(timeout=600)
    print("done", flush=True)
""")


@pytest.fixture
def other_analyst(broker, tmp_path):
    """Start another analyst's process with a map of ``n`` tasks of 0.05 s (``reduce``: it
    merges on the workers too, with the same 60 s timer); returns the folder that counts
    its tasks. Stopped by pid at the end."""
    procs = []

    def start(n: int, reduce: bool = False):
        folder = tmp_path / "other"
        folder.mkdir()
        env = dict(os.environ, **broker.config.env(), RHTC_MERGE_SECONDS="60")
        with open(tmp_path / "other.err", "wb") as err:
            procs.append(subprocess.Popen([sys.executable, "-c", OTHER_ANALYST, str(folder), str(n),
                                           str(int(reduce))], env=env, cwd=str(ROOT),
                                          stdout=subprocess.PIPE, stderr=err))
        return folder
    yield start
    stop_processes(procs)


@pytest.mark.timeout(120)
def test_a_small_reduce_map_on_a_busy_pool_waits_for_a_few_tasks_not_the_timer(broker, workers, tmp_path,
                                                                              other_analyst):
    workers.start(2)
    other = other_analyst(800)
    wait_until(lambda: len(os.listdir(other)) >= 20, 60, "the other analyst's map to keep both workers busy")
    mine = tmp_path / "mine"
    mine.mkdir()
    t0 = time.monotonic()
    h = start_map(broker, counted, [(str(mine), i, 0.0) for i in range(2)], **TIMER)
    got = h.wait(timeout=30)                # the fix answers in well under a second; the timer in 60 s
    took = time.monotonic() - t0
    assert got == everything_once(2)
    assert took < 15, f"the small map took {took:.1f} s: its partials waited for a timer"
    assert len(os.listdir(other)) < 800, "the other map was over: the pool was not busy"


@pytest.mark.timeout(180)
def test_two_reduce_maps_taking_turns_keep_merging(broker, workers, tmp_path, other_analyst):
    """Both maps merge and take turns on the same two workers: a worker switching to the
    other map hands its partial up the tree, where it waits in the pool for the next
    merger while its map's backlog still holds tasks, so each map still arrives in a few
    partials (one per task would be the merge switched off)."""
    workers.start(2)
    other = other_analyst(400, reduce=True)
    wait_until(lambda: len(os.listdir(other)) >= 20, 60, "the other analyst's map to keep both workers busy")
    mine = tmp_path / "mine"
    mine.mkdir()
    n = 200
    t0 = time.monotonic()
    h = start_map(broker, counted, [(str(mine), i, 0.02) for i in range(n)], **TIMER)
    assert h.wait(timeout=120) == everything_once(n)
    took = time.monotonic() - t0            # ~5 s of tasks on each worker, with the turns
    assert took < 40, f"the map took {took:.1f} s: its last partials waited for the 60 s timer"
    assert len(os.listdir(other)) < 400, ("the other map was over before mine: my last partials waited "
                                          "for the pool's queue to run dry")
    assert sorted(len(p) for p in runs(mine).values()) == [1] * n
    assert h.run.partials_accepted <= 12, \
        f"{h.run.partials_accepted} partials for {n} tasks on 2 workers: fair turns cut them short"
