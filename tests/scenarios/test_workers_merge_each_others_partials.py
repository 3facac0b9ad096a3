"""The tree of partials: at a map's end workers merge each other's partials, so
its client reads a handful, not one per worker; a partial in flight to a merger is leased
like a task (the audit sees it, a dead merger gives it back); the end waits for no timer.

Results show double counting: each task returns ``Counter({index: 1})`` and notes each
run as a file ``<index>.<pid>.<ns>`` (tests/kits/merge.py). Real redis-server, real
``python -m rhtc.worker`` processes, stopped by pid; faults are driven by the map's
progress (files the tasks and the reduce function write), never by sleeping and hoping.
"""
from __future__ import annotations

import math
import os
import random
import signal
import time
from pathlib import Path

import numpy as np

from rhtc.broker.wire.merge import is_partial_id
from rhtc.client.engine.options import MapOptions
from tests.kits.blob import noise
from tests.conftest import map_keys
from tests.helpers import poll_until, register_by_value, wait_until
from tests.kits.merge import FAST_LEASE, HOLD, counted, everything_once, runs, start_map, task_pid

register_by_value(__name__)


def frames_read(run) -> int:
    """How many result frames the client took in: its partials, and the tasks counted alone."""
    return run.partials_accepted + sum(1 for i in range(run.n) if not run.in_partial[i])


def test_six_workers_hand_the_client_a_handful_of_partials(broker, workers, tmp_path):
    workers.start(6)
    n, fanin = 90, 2
    h = start_map(broker, counted, [(str(tmp_path), i, 0.05) for i in range(n)], merge_fanin=fanin,
                  check_invariants=True, **HOLD)
    assert h.wait(timeout=90) == everything_once(n)
    ran = runs(tmp_path)
    assert len({pid for pids in ran.values() for pid in pids}) >= 5, "most workers ran tasks"
    assert all(len(pids) == 1 for pids in ran.values()), "no task ran twice"
    assert frames_read(h.run) <= math.ceil(6 / fanin) + 1, f"{frames_read(h.run)} frames for 6 workers"
    assert h.run.partials_refused == 0 and h.run.resubmissions == 0


def test_a_map_whose_queues_empty_returns_without_waiting_for_a_timer(broker, workers, tmp_path):
    workers.start(3)
    n = 30
    h = start_map(broker, counted, [(str(tmp_path), i, 0.2) for i in range(n)], merge_rate=0.1, **HOLD)
    assert h.wait(timeout=60) == everything_once(n)
    returned = time.time()
    last_stop = max(m["stop"] for m in h.run.metas)
    # the merge's timers (60 s, workers / 0.1 s) and the client's stall check (5 s) are all
    # out of reach: the last partial went to the client when the broker counted every task
    assert returned - last_stop < 2.0, f"{returned - last_stop:.2f} s from the last task's end to the return"
    assert frames_read(h.run) <= 2


def merge_once_slowly(a, b):
    """``a + b``; on a worker, the first time two partials of several tasks each meet (a
    merger folding another worker's partial into its own), notes ``merging.<pid>`` and
    waits for ``merge-go``."""
    folder = os.environ.get("RHTC_TEST_FOLDER")
    if folder and len(a) > 1 and len(b) > 1:
        try:
            os.close(os.open(Path(folder, "first-merge"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            Path(folder, f"merging.{os.getpid()}").touch()
            poll_until(Path(folder, "merge-go").exists, 90)
    a.update(b)
    return a


def blocked_merger(broker, workers, storage, tmp_path, n: int, first=()):
    """Four workers run :func:`counted` over ``n`` tasks (``first`` replaces the first
    ones' arguments), merging with :func:`merge_once_slowly`; returns (the handle, the
    blocked merger's name, its task process's pid) once a merger holds another's partial."""
    names = workers.start(4, env=dict(FAST_LEASE, RHTC_TEST_FOLDER=str(tmp_path)))
    args = list(first) + [(str(tmp_path), i, 0.05) for i in range(len(first), n)]
    h = start_map(broker, counted, args, reduce=merge_once_slowly, merge_fanin=4, check_invariants=True, **HOLD)
    marker = wait_until(lambda: next(tmp_path.glob("merging.*"), None), 60, "a merger folds another's partial")
    pid = int(marker.name.split(".")[1])
    merger = next(name for name in names if task_pid(storage, name) == pid)
    assert any(is_partial_id(k) for k in storage.r.hkeys(storage.keys.lease(merger))), \
        "the partials it merges are leased to it"
    return h, merger, pid


def only_theirs_ran_again(ran: dict[int, list[int]], pid: int, n: int) -> None:
    """Every task ran once, but those of the merger's own partial (they died with it)."""
    again = {i for i, pids in ran.items() if len(pids) > 1}
    assert set(ran) == set(range(n))
    assert again and all(pid in ran[i] and len(ran[i]) == 2 for i in again), again


def test_a_merger_killed_holding_others_partials_costs_only_their_re_merge(broker, workers, storage, tmp_path):
    n = 80
    h, merger, pid = blocked_merger(broker, workers, storage, tmp_path, n)
    # the audit finds every task not counted yet: in the pool, in the merger's partial
    # entries, in the other workers' leases (none is sent again while the merger lives);
    # counted after the audit, as the client may take in the pool meanwhile (a map without
    # progress for 5 s takes the pool's partials: merged.drain_stalled)
    found = storage.maps.audit(h.map_id)
    counted_now = {i for i in range(n) if h.run.tasks.is_final(i)}
    assert set(range(n)) - counted_now <= found, sorted(set(range(n)) - counted_now - found)
    os.kill(pid, signal.SIGKILL)                                   # the worst instant: inputs in hand,
    os.kill(workers.procs[merger].pid, signal.SIGKILL)             # its own partial half folded
    (tmp_path / "merge-go").touch()
    assert h.wait(timeout=90) == everything_once(n)
    only_theirs_ran_again(runs(tmp_path), pid, n)
    assert h.run.partials_refused == 0 and h.run.resubmissions == 0
    keys_gone_after_the_client_ended(h, storage)


def keys_gone_after_the_client_ended(h, storage) -> None:
    """A finished map's keys go with its client's next command (its end is lazy; here no
    command comes, and the sweep of dead clients' maps waits a whole beacon's life: the
    client's flush now), and nothing the tree recovered writes them again."""
    h.run.storage.maps.flush()
    wait_until(lambda: not map_keys(storage), 10,
               lambda: f"the map's keys are gone (left: {map_keys(storage)})")


def test_a_frozen_merger_is_refused_and_its_inputs_are_merged_by_another(broker, workers, storage, tmp_path):
    n = 80
    h, merger, pid = blocked_merger(broker, workers, storage, tmp_path, n, first=[(str(tmp_path), 0, "wait")])
    pids = [workers.procs[merger].pid, pid]
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    try:        # its name expires: the reaper gives its inputs back to the pool, its tasks to others
        wait_until(lambda: not storage.r.hlen(storage.keys.lease(merger)), 30, "the frozen merger's lease went back")
        wait_until(lambda: sum(len(p) for p in runs(tmp_path).values()) > n, 30, "its own tasks ran again")
        (tmp_path / "merge-go").touch()
    finally:
        for p in reversed(pids):
            os.kill(p, signal.SIGCONT)
    wait_until(lambda: storage.maps.partials_refused(h.map_id) >= 1, 30, "the thawed merger's partial was refused")
    (tmp_path / "go").touch()                                  # task 0 ends: the map with it
    assert h.wait(timeout=90) == everything_once(n)
    only_theirs_ran_again(runs(tmp_path), pid, n)
    assert h.run.resubmissions == 0


def merge_kills_its_merger(a, b):
    """``a + b``; on a worker (``RHTC_TEST_FOLDER`` set), folding another worker's partial
    of several tasks into its own kills the process (``died.<pid>`` noted first): a reduce
    that outgrows memory, or crashes in C, at every merger."""
    folder = os.environ.get("RHTC_TEST_FOLDER")
    if folder and len(a) > 1 and len(b) > 1:
        Path(folder, f"died.{os.getpid()}").touch()
        os._exit(9)
    a.update(b)
    return a


def test_a_reduce_that_kills_every_merger_stops_the_tree_not_the_map(broker, workers, storage, tmp_path):
    """Each merger that folds in another's partial dies; after MERGER_DEATHS deaths the
    map merges no more in the tree: the partials go to the client, which folds them (its
    reduce does not kill it), and every task counts once, none as poison."""
    from rhtc.broker.wire.merge import MERGER_DEATHS
    workers.start(3, env=dict(FAST_LEASE, RHTC_TEST_FOLDER=str(tmp_path)))
    n = 60
    h = start_map(broker, counted, [(str(tmp_path), i, 0.05) for i in range(n)], reduce=merge_kills_its_merger,
                  merge_fanin=8, check_invariants=True, **HOLD)
    assert h.wait(timeout=120) == everything_once(n)
    deaths = len(list(tmp_path.glob("died.*")))
    assert MERGER_DEATHS <= deaths <= MERGER_DEATHS + 1, f"{deaths} mergers died"
    assert set(runs(tmp_path)) == set(range(n)) and h.run.partials_refused == 0
    keys_gone_after_the_client_ended(h, storage)


def test_a_cancelled_map_leaves_no_pool_and_no_partial_leases(broker, workers, storage, tmp_path):
    h, merger, pid = blocked_merger(broker, workers, storage, tmp_path, 80)
    h.cancel()
    (tmp_path / "merge-go").touch()
    wait_until(lambda: not map_keys(storage), 10, "the map's keys are gone")
    wait_until(lambda: not storage.r.hlen(storage.keys.lease(merger)), 15, "the merger holds no lease of the map")


def test_workers_killed_at_random_while_a_merged_map_ends_count_each_task_once(broker, workers, storage, tmp_path):
    """Three workers (chosen by a fixed seed) SIGKILLed by pid and replaced, each once the
    map has run a given number of tasks; the last kill lands in the map's end, while the
    workers merge each other's partials: every task counted once."""
    names = workers.start(4, env=FAST_LEASE)
    n, kills_at = 240, (60, 150, 225)
    h = start_map(broker, counted, [(str(tmp_path), i, 0.03) for i in range(n)], merge_fanin=3,
                  check_invariants=True, **HOLD)
    rng = random.Random(32)
    for at in kills_at:
        wait_until(lambda: len(runs(tmp_path)) >= at, 60, f"{at} tasks ran")
        victim = rng.choice(sorted(name for name in names if workers.procs[name].poll() is None))
        for p in (task_pid(storage, victim), workers.procs[victim].pid):
            os.kill(p, signal.SIGKILL)
        names += workers.start(1, wait=False, env=FAST_LEASE)
    assert h.wait(timeout=120) == everything_once(n)
    assert h.run.partials_refused == 0


def test_big_partials_travel_up_the_tree_as_blobs_and_leave_none_behind(broker, workers, storage):
    names = workers.start(3)
    n = 30
    want = sum(noise(i) for i in range(n))
    merged = start_map(broker, noise, list(range(n)), merge_fanin=2, check_invariants=True, **HOLD)
    assert np.allclose(merged.wait(timeout=60), want) and frames_read(merged.run) <= 2
    alone = start_map(broker, noise, list(range(n)), options=MapOptions(merge=False))   # each through take
    assert np.allclose(alone.wait(timeout=60), want) and alone.run.partials_accepted == 0
    assert not list(storage.r.scan_iter(match=f"{storage.keys.ns}:blob:*")), "a blob was left behind"
    assert not [n for n in names if "Traceback" in workers.log(n)], "a task process died handing a blob in"
