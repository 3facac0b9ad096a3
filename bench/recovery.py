"""``bench recovery``: how long a task of a SIGKILLed worker waits before another
worker runs it (lease expiry + reaping), median of a few kills.

    bench recovery --kills 3
"""
from __future__ import annotations

import os
import signal
import statistics
import time

import click

from . import results
from .overhead import nap
from ..broker.wire.config import settings
from ..broker.wire.protocol import TaskRef
from ..broker.wire.messages import WorkerStatus


def _runner_of(storage, task: TaskRef, exclude=()) -> WorkerStatus | None:
    for w in storage.pool.worker_statuses(queue_depths=False):
        if w.task == task and w.name not in exclude:
            return w
    return None


def measure_recovery(kills: int = 3, timeout: float = 60.0) -> list[float]:
    """Seconds from SIGKILL of the worker running a task to that task starting again."""
    from rhtc import LocalCluster, submit
    from ..client.api import storage_for
    out = []
    for _ in range(kills):                       # a fresh pair of workers for each kill
        with LocalCluster(n_workers=2, cache_size="64MB") as cluster:
            storage = storage_for(cluster)
            pids = {p.worker_name: p.pid for p in cluster.procs}
            h = submit(nap, [120.0], broker=cluster, stragglers=None)
            label = TaskRef(h.map_id, 0)
            deadline = time.monotonic() + timeout
            runner = None
            while runner is None and time.monotonic() < deadline:
                runner = _runner_of(storage, label)
                time.sleep(0.02)
            if runner is None:
                raise RuntimeError("no worker picked the task up")
            killed_at = time.time()
            os.kill(pids[runner.name], signal.SIGKILL)
            rescuer = None
            while rescuer is None and time.monotonic() < deadline:
                rescuer = _runner_of(storage, label, exclude=(runner.name,))
                time.sleep(0.02)
            if rescuer is None:
                raise RuntimeError(f"task of killed worker {runner.name} not rerun in {timeout} s")
            out.append(rescuer.t - (rescuer.task_seconds or 0) - killed_at)
            h.cancel()
    return out


@click.command("recovery")
@click.option("--kills", default=3, show_default=True, help="Workers to kill, one after the other.")
@click.option("--json", "json_path", default=None, help="Write the figures here.")
def recovery_command(kills, json_path):
    """Recovery time after SIGKILL of the worker running a task (lease $RHTC_LEASE)."""
    times = measure_recovery(kills)
    lease = settings().lease
    click.echo(f"recovery after SIGKILL (lease {lease:g} s): median {statistics.median(times):.2f} s, "
               f"each: {', '.join(f'{t:.2f}' for t in times)} s")
    if json_path:
        results.write(json_path, "recovery", {"lease_s": lease, "recovery_s": times})
