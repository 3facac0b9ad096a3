"""What the tests of the merge on the workers share: a task whose double counting shows, the
runs it noted, a map started with the client's merge settings tuned, and a worker frozen
while it holds a partial.

Results are built so that double counting shows: each task of :func:`counted` returns
``Counter({index: 1})`` (counted twice, an index reads 2) and notes each run as a file
``<index>.<pid>.<ns>`` that :func:`runs` reads back. This module's functions reach the
workers by value (``register_by_value``), as the test modules' own do.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections import Counter
from pathlib import Path

from rhtc.broker.wire.config import settings
from rhtc.broker.storage import Storage
from rhtc.client.handle import MapHandle
from rhtc.client.engine.maprun import MapRun
from rhtc.client.engine.options import MapOptions
from rhtc.client.engine.tasks import TaskState
from tests.helpers import poll_until, register_by_value, wait_until

register_by_value(__name__)

FAST_LEASE = {"RHTC_LEASE": "2"}
#: partials handed in only when a worker's queue runs dry (or it covers 150 tasks)
HOLD = {"merge_seconds": 60.0, "merge_tasks": 150}


def counted(args):
    """Counter({index: 1}) after ``seconds``; ``seconds`` "wait" polls for ``folder/go``,
    "slow-once" sleeps 60 s on its first run, "raise" raises ValueError, "flaky" raises on
    its first run only."""
    folder, i, seconds = args
    first = not any(p.name.startswith(f"{i}.") for p in Path(folder).iterdir())
    Path(folder, f"{i}.{os.getpid()}.{time.monotonic_ns()}").touch()
    if seconds == "wait":
        poll_until(Path(folder, "go").exists, 90)
    elif seconds == "slow-once":
        time.sleep(60 if first else 0.2)
    elif seconds == "raise":
        raise ValueError(f"task {i} fails")
    elif seconds == "flaky":
        if first:
            raise OSError(f"task {i} fails once")
    else:
        time.sleep(seconds)
    return Counter({i: 1})


def runs(folder: Path) -> dict[int, list[int]]:
    """index -> the pids of the processes that ran it (one per run)."""
    out: dict[int, list[int]] = {}
    for p in folder.iterdir():
        parts = p.name.split(".")
        if len(parts) == 3:
            out.setdefault(int(parts[0]), []).append(int(parts[1]))
    return out


def start_map(broker, fn, args, *, reduce=True, errors="raise", options=MapOptions(), **tuned) -> MapHandle:
    """A map collected in the background, its client's merge settings ``tuned``."""
    st = Storage(broker.config, dataclasses.replace(settings(), **tuned))
    run = MapRun(st, fn, args, options, reduce=reduce)
    run.submit()
    return MapHandle(run, reduce=reduce, errors=errors).start_background()


def task_pid(storage: Storage, name: str) -> int:
    return wait_until(lambda: next((w["task_pid"] for w in storage.pool.live_workers() if w["name"] == name), None),
                      10, f"task pid of {name}")


def everything_once(n: int) -> Counter:
    return Counter({i: 1 for i in range(n)})


def freeze_a_worker_holding_a_partial(broker, workers, storage, tmp_path, fn, n: int):
    """Three workers run ``fn`` (:func:`counted` or a variant) over ``n`` tasks, task 0
    waiting for ``go``; one of the others is frozen (SIGSTOP) while its partial holds 3
    tasks, until they ran elsewhere and were counted, then thawed: its partial must be
    refused. Returns the map's result."""
    names = workers.start(3, env=FAST_LEASE)
    args = [(str(tmp_path), 0, "wait")] + [(str(tmp_path), i, 0.05) for i in range(1, n)]
    h = start_map(broker, fn, args, **HOLD)
    wait_until(lambda: 0 in runs(tmp_path), 30, "the waiting task started")
    waiting = runs(tmp_path)[0][0]
    a = next(name for name in names if task_pid(storage, name) != waiting)     # not the one waiting
    pids = [workers.procs[a].pid, task_pid(storage, a)]
    wait_until(lambda: sum(pids[1] in p for p in runs(tmp_path).values()) >= 3, 30, f"{a} ran 3 tasks")
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    try:
        held = [i for i, ps in runs(tmp_path).items() if pids[1] in ps]
        wait_until(lambda: all(h.run.tasks.state(i) is TaskState.DONE for i in held), 60,
                   "the frozen worker's tasks ran elsewhere and were counted")
    finally:
        for p in reversed(pids):
            os.kill(p, signal.SIGCONT)
    wait_until(lambda: storage.maps.partials_refused(h.map_id) >= 1, 30, "the broker refused the stale partial")
    (tmp_path / "go").touch()
    return h.wait(timeout=60)
