"""A worker about to start another map's task first hands up its open partials, whatever
the backlog of their maps: a partial kept open through that task waits for it, however
long it runs, and so does its map's client.

Seen: a map that merges on the workers (map A) takes turns in the shared queue with
another analyst's map (B), whose one task runs for minutes. The worker that took B's
task held its partial of A, because A's backlog still held tasks at that take (a worker
used to hand a partial in at a switch only once its map's backlog was empty). The other
worker ran the rest of A and handed its partial up: not the last one (the held partial's
tasks were neither answered nor pooled), it was pooled, and A's client waited for B's
task to end: A, a few seconds of work, took as long as B.

Two workers: with one, A's backlog comes after B's task in the queue (fair turns), so A
could not end before B's task whatever the partials do. B's task waits for a file that
the test writes only once A is complete (driven by progress, not by a clock); the
partials' timer (60 s) is out of reach. Real redis-server, real worker processes,
stopped by pid.
"""
from __future__ import annotations

import pytest

from tests.helpers import wait_until
from tests.kits.merge import HOLD, counted, everything_once, runs, start_map

WINDOW = 2                 # A's tasks in the shared queue at a time: B's task is taken soon


def _started(run) -> int:
    """When a task's run began (monotonic ns, from its note ``<index>.<pid>.<ns>``)."""
    return int(run.name.split(".")[2])


@pytest.mark.timeout(180)
def test_a_partial_taken_while_its_map_had_a_backlog_goes_before_another_maps_long_task(broker, workers,
                                                                                       tmp_path):
    workers.start(2)
    a_runs, b_runs = tmp_path / "a", tmp_path / "b"
    a_runs.mkdir()
    b_runs.mkdir()
    n = 80
    a = start_map(broker, counted, [(str(a_runs), i, 0.05) for i in range(n)], fair_window=WINDOW, **HOLD)
    wait_until(lambda: len({pid for pids in runs(a_runs).values() for pid in pids}) == 2, 30,
               "both workers ran tasks of map A (each holds a partial of A)")
    b = start_map(broker, counted, [(str(b_runs), 0, "wait")], **HOLD)
    try:
        wait_until(lambda: 0 in runs(b_runs), 30, "map B's long task started")
        b_ns = min(_started(p) for p in b_runs.iterdir() if p.name.startswith("0."))
        try:
            got = a.wait(timeout=30)    # a few seconds of work; before the fix, A ended with B
        except TimeoutError:
            pytest.fail(f"map A is not complete while map B's task runs ({a.received}/{n} results): the "
                        "worker running B's task holds its partial of A")
        assert got == everything_once(n)
        assert not b.done(), "map B's task ended before A did: the test proved nothing"
        after = sum(_started(p) > b_ns for p in a_runs.iterdir())
        assert after > n // 2, (f"only {after} of A's tasks started after B's: A's backlog was (nearly) "
                                "empty when B's task was taken, not the case this test is for")
    finally:
        (b_runs / "go").touch()
    assert b.wait(timeout=60) == everything_once(1)
