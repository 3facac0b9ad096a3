"""What a map does once a second while it waits for results: keep itself alive, find
the tasks of dead workers and of a restarted broker, back up stragglers, sample the
workers' metrics, and notice a full broker. Split from :mod:`client.maprun`, which owns
the map; this module only looks after it."""
from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from rhtc.broker import protocol
from rhtc.broker.storage import BrokerRefused, is_out_of_memory
from rhtc.client.errors import BrokerFull, RemoteError, describe

if TYPE_CHECKING:  # pragma: no cover
    from rhtc.client.maprun import MapRun, TaskResult

log = logging.getLogger("rhtc.client")

TICK_SECONDS = 1.0            # how often the map renews itself and looks for lost tasks
AUDIT_SECONDS = 5.0           # how often it checks that every pending task is somewhere
AUDIT_MAX_QUEUE = 1000        # ... unless the shared queue is longer and results flow
STRAGGLER_MIN_SECONDS = 1.0   # never back up a task that has run less than this
MAX_METRIC_SAMPLES = 200_000
BROKER_PATIENCE = float(os.environ.get("RHTC_BROKER_PATIENCE", "300"))   # unreachable or full


class Upkeep:
    """The once-a-second care of one :class:`~client.maprun.MapRun`."""

    def __init__(self, run: "MapRun"):
        self.run = run
        self._next_audit = 0.0
        self._missing_before: set[int] = set()
        self._warned_no_workers = False
        self._full_since: float | None = None

    def tick(self) -> list[TaskResult]:
        """Once a second: keep the map alive, recover from dead workers and restarts,
        back up stragglers, sample the workers' metrics."""
        run = self.run
        run._next_tick = time.monotonic() + TICK_SECONDS
        try:
            out = self._tick_inner()
        except BrokerRefused as err:
            if not is_out_of_memory(err):
                raise
            out = []
            self._full_since = self._full_since or time.monotonic()
        self._check_full()
        return out

    def _check_full(self) -> None:
        """Warn when no result came for a while because Redis is full; give up after the
        broker patience (nothing is lost until then: workers hold their results)."""
        run = self.run
        if time.monotonic() - run._last_progress < 3 * TICK_SECONDS:
            self._full_since = None
            return
        used, limit = run._memory()
        if not limit or used < limit * 0.98:
            self._full_since = None
            return
        if self._full_since is None:
            self._full_since = time.monotonic()
            log.warning("map %s is stalled: the broker is out of memory (%.0f of %.0f MB); workers "
                        "hold their results until memory is freed", run.map_id, used / 1e6, limit / 1e6)
        elif time.monotonic() - self._full_since > BROKER_PATIENCE:
            raise BrokerFull(f"the broker {run.storage.config!r} has been out of memory ({used / 1e6:.0f} of "
                             f"{limit / 1e6:.0f} MB) for {BROKER_PATIENCE:.0f} s during map {run.map_id}, "
                             f"with {len(run.pending)} tasks pending: free memory in Redis or raise its "
                             "maxmemory, then run the map again")

    def _tick_inner(self) -> list[TaskResult]:
        from rhtc.client.maprun import TaskResult  # the module that owns it imports this one
        run = self.run
        out: list[TaskResult] = []
        if not run.storage.keep_map_alive(run.map_id, run.fn_hash):
            if run.cancelled or run.done:
                return out
            log.warning("map %s vanished from the broker (did it restart?); resubmitting %d tasks",
                        run.map_id, len(run.pending))
            run._fn_uploaded = False
            run._requeue(sorted(run.pending))
            return out
        run.storage.reap()
        if time.monotonic() >= self._next_audit:
            self._audit()
        live = run.storage.live_workers(queue_depths=False)
        if not live and not self._warned_no_workers:
            self._warned_no_workers = True
            log.warning("map %s waits for workers: none is connected to %r (`rhtc workers -n 4`, "
                        "or `condor_submit condor/workers.sub`)", run.map_id, run.storage.config)
        if run.sample_metrics and len(run.metric_samples) < MAX_METRIC_SAMPLES:
            self._sample(live)
        if run.straggler_factor:
            self._back_up_stragglers(live)
        for frame in run.storage.fetch_dead_tasks(run.map_id):
            index = protocol.frame_index(frame)
            if index in run.pending:
                history = run.storage.attempt_history(run.map_id, protocol.task_id(frame))
                err = RemoteError(index, "WorkerLost", "the task was running on a worker that died, "
                                  "every time it was tried; it may be what kills them (memory? a crash "
                                  "in compiled code?)", worker=None,
                                  argument=describe(run._args[index]), history=history)
                run.pending.discard(index)
                run.metas.append({"index": index, "error": "WorkerLost: " + history[:180]})
                out.append(TaskResult(index, None, {}, err))
        return out

    def _sample(self, live: list[dict]) -> None:
        run = self.run
        for w in live:
            run.metric_samples.append({k: w.get(k) for k in (
                "t", "name", "cpu", "rss", "cache_bytes", "cache_entries", "bytes_read", "net_recv",
                "net_sent", "disk_read", "node_cpu")} | {"worker": w.get("name")})

    def _back_up_stragglers(self, live: list[dict]) -> None:
        """In the tail of the map, when a worker is idle, run a backup copy of a task that
        has run much longer than the median; the first result wins."""
        run = self.run
        waiting = run.pending - set(run.rejected)
        if not waiting or len(waiting) > max(2, 0.05 * run.n) or len(run._durations) < 3:
            return
        idle = sum(w.get("state") == "idle" for w in live)
        if not idle:
            return
        median = sorted(run._durations)[len(run._durations) // 2]
        limit = max(STRAGGLER_MIN_SECONDS, run.straggler_factor * median)
        prefix = run.map_id + ":"
        slow = []
        for w in live:
            task = w.get("task") or ""
            if task.startswith(prefix) and (w.get("task_seconds") or 0) > limit:
                index = int(task[len(prefix):])
                if index in waiting and index not in run.backups:
                    slow.append(index)
        slow = slow[:idle]
        if slow:
            log.info("map %s: backing up %d straggler(s) running over %.1f s: %s", run.map_id,
                     len(slow), limit, slow)
            run.backups.update(slow)
            run._requeue(slow, route=False)

    def _audit(self) -> None:
        """Requeue pending tasks that are nowhere in the broker, twice in a row (a worker
        killed between taking a task and its lease reaching Redis; a lost connection).

        The audit reads every queue, so it runs only when it is cheap (a short shared
        queue) or needed (no result for a while): a lost task shows at the end of a map."""
        run = self.run
        self._next_audit = time.monotonic() + AUDIT_SECONDS
        waiting = run.pending - set(run.rejected)
        if not waiting:
            return
        stalled = time.monotonic() - run._last_progress > AUDIT_SECONDS
        if not stalled and run.storage.shared_depth() > AUDIT_MAX_QUEUE:
            return
        missing = waiting - run.storage.audit_map(run.map_id)
        lost = sorted(missing & self._missing_before)
        self._missing_before = missing - set(lost)
        if lost:
            log.warning("map %s: %d task(s) vanished from the broker; resubmitting them", run.map_id, len(lost))
            run._requeue(lost)
