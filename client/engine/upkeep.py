"""What a map does once a second while it waits for results: keep itself alive (and
renew its signed liveness token), find the tasks of dead workers and of a restarted
broker, take back tasks stranded in the queue of a worker that takes none, back up
stragglers, sample the workers' metrics, name workers that hold another key or whose
heartbeat is forged, and notice a full broker.

Upkeep only looks after a map: it reads the broker and what the map's state shows, and
hands what it finds to the map as events (:mod:`client.engine.events`: the workers'
statuses, the audit's findings, backups of stragglers, a task given up, the map vanished,
a worker that takes nothing) through the map's one verb, :meth:`MapRun.apply`; it never
writes the map's state, and it knows the map only by its verbs (:mod:`client.engine.verbs`),
not by :mod:`client.engine.maprun` (which imports this module). The task timeouts
(:mod:`client.engine.timeouts`) do the same.
"""
from __future__ import annotations

import logging
import time
import warnings
import weakref

from ...broker.wire import protocol
from ...broker.errors import BrokerOutOfMemory
from ...broker.wire.messages import WORKER_METRICS, ErrorKind, WorkerStatus
from ...broker.registry import renew_map_entry
from ...broker.storage import Storage
from .decisions import straggler_backups
from .events import Audited, Backup, GiveUp, MapVanished, Observed, Unclaimed
from ..errors import BrokerFull, KeyMismatch, RemoteError
from .merged import drain_stalled
from .tasks import TaskState
from .unclaimed import UnclaimedWatch
from .timeouts import TaskTimeouts
from .verbs import MapVerbs

log = logging.getLogger("rhtc.client")

TICK_SECONDS = 1.0            # how often the map renews itself and looks for lost tasks
AUDIT_SECONDS = 5.0           # how often it checks that every waiting task is somewhere
AUDIT_MAX_QUEUE = 1000        # ... unless the shared queue and the map's backlog are longer and results flow
MAX_METRIC_SAMPLES = 200_000
KEY_MISMATCH_SECONDS = 3.0    # every live worker holds another key this long: give up
LOOK_SECONDS = 1.0            # maps submitted within this long share one look at the workers
_looks: "weakref.WeakKeyDictionary[Storage, tuple[float, list[WorkerStatus]]]" = weakref.WeakKeyDictionary()
_WAITING = (TaskState.QUEUED, TaskState.LEASED)
METRIC_KEYS = ("t", *WORKER_METRICS)          # what a map samples of each live worker


class Upkeep:
    """The once-a-second care of one map."""

    def __init__(self, run: MapVerbs):
        self.run = run
        self.next_tick = 0.0
        self._next_audit = 0.0
        self._warned_no_workers = False
        self._warned_misfits: set[str] = set()
        self._all_misfits_since: float | None = None
        self._full_since: float | None = None
        self._warned_forged: set[str] = set()
        self._unclaimed = UnclaimedWatch(run.storage.settings.unclaimed_seconds)
        self.metric_samples: list[dict] = []      # the live workers' metrics, once a tick
        self.timeouts = TaskTimeouts(run, run.task_timeout, self.parked_behind) if run.task_timeout else None

    def look(self) -> None:
        """Before a map is queued: which workers are live and which key they hold (so it
        routes around misfits and forged workers from the start and warns even if it ends
        within a second).
        One read of the workers serves every map submitted within :data:`LOOK_SECONDS`."""
        storage = self.run.storage
        seen = _looks.get(storage)
        if seen is None or time.monotonic() - seen[0] > LOOK_SECONDS:
            seen = _looks[storage] = (time.monotonic(), storage.pool.worker_statuses(queue_depths=False))
        self.run.apply(Observed(seen[1], time.time()))
        self._check_keys(seen[1])
        self._check_forged(seen[1])

    def schedule(self) -> None:
        """The first tick comes one period after the map was submitted."""
        self.next_tick = time.monotonic() + TICK_SECONDS

    def due(self) -> bool:
        return time.monotonic() >= self.next_tick

    def tick(self) -> None:
        """Once a second: keep the map alive, recover from dead workers and restarts,
        check the workers' keys, back up stragglers, sample the workers' metrics; what it
        finds goes to the map as events."""
        self.next_tick = time.monotonic() + TICK_SECONDS
        try:
            self._tick()
        except BrokerOutOfMemory:
            self._full_since = self._full_since or time.monotonic()
        self._check_full()

    def _tick(self) -> None:
        run = self.run
        storage = run.storage
        if not storage.maps.keep_alive(run.map_id, run.fn_hash, run.nonce):
            run.apply(MapVanished(time.time()))
            return
        renew_map_entry(storage, run.map_id)
        run.feed.flush()
        storage.lease.reap()
        if time.monotonic() >= self._next_audit:
            self._audit()
        live = storage.pool.worker_statuses()
        _looks[storage] = (time.monotonic(), live)      # fresh for the next map's look
        run.apply(Observed(live, time.time()))
        if run.merging:                   # a pool of partials no worker will come for
            drain_stalled(storage, run.map_id, run.state.tasks.unfinished, run.n, run.state.last_progress,
                          sum(w.merged for w in live))
        self._check_keys(live)
        self._check_forged(live)
        self._unclaimed_workers(live)
        if not live and not self._warned_no_workers:
            self._warned_no_workers = True
            log.warning("map %s waits for workers: none is connected to %r (`rhtc workers -n 4`, "
                        "or `condor_submit condor/workers.sub`)", run.map_id, storage.config)
        if run.sample_metrics and len(self.metric_samples) < MAX_METRIC_SAMPLES:
            for w in live:
                d = w.to_dict()
                self.metric_samples.append({k: d.get(k) for k in METRIC_KEYS} | {"worker": w.name})
        if run.straggler_factor:
            self._stragglers(live)
        if self.timeouts is not None:
            self.timeouts.check(live)
        for frame in storage.maps.dead_tasks(run.map_id):
            index = protocol.frame_index(frame)
            if index is None or not 0 <= index < run.n:
                continue
            history = storage.maps.attempt_history(run.map_id, protocol.task_id(frame))
            run.apply(GiveUp(index, RemoteError(
                index, ErrorKind.WORKER_LOST, "the process running the task died every time it was tried "
                "(see the attempts); the task may be what kills it (memory? a crash in compiled code?)",
                worker=None,
                argument=run.describe_argument(index), history=history), time.time()))

    def _check_keys(self, live: list[WorkerStatus]) -> None:
        """Workers holding another key cannot run this map: fail fast when all of them do,
        warn (and let the map route around them) when some do."""
        run = self.run
        live = [w for w in live if not w.forged]
        misfits = sorted(w.name for w in live if w.name in run.state.misfits)
        if not misfits:
            self._all_misfits_since = None
            return
        theirs = sorted({w.key_fingerprint for w in live if w.name in run.state.misfits and w.key_fingerprint})
        if len(misfits) == len(live):
            self._all_misfits_since = self._all_misfits_since or time.monotonic()
            if time.monotonic() - self._all_misfits_since >= KEY_MISMATCH_SECONDS:
                raise KeyMismatch(
                    f"map {run.map_id}: every live worker holds another signing key than this client "
                    f"(the workers' key fingerprint {', '.join(theirs) or '?'}, this client's "
                    f"{run.fingerprint}): {', '.join(misfits[:20])}{' ...' if len(misfits) > 20 else ''}. "
                    "They cannot verify its tasks. Start the workers with this client's key "
                    "(the same RHTC_KEY or config file), then run the map again.")
            return
        self._all_misfits_since = None
        new = set(misfits) - self._warned_misfits
        if new:
            self._warned_misfits |= new
            warnings.warn(f"map {run.map_id}: worker(s) {', '.join(sorted(new))} hold another signing key "
                          f"(fingerprint {', '.join(theirs) or '?'}, this client's {run.fingerprint}); "
                          "the map routes around them. Restart them with this client's key.",
                          RuntimeWarning, stacklevel=2)

    def _check_forged(self, live: list[WorkerStatus]) -> None:
        """Name (once per map) the workers whose heartbeat no holder of our key signed: the
        map never routes to them (:meth:`Storage.locate` leaves them out)."""
        run = self.run
        for w in live:
            if w.forged and w.name not in self._warned_forged:
                self._warned_forged.add(w.name)
                msg = (f"map {run.map_id}: worker {w.name} is forged: {w.forged}. Someone with the Redis "
                       "password wrote it; the map does not route to it. Change the Redis password.")
                log.warning(msg)
                run.storage.report(msg)

    def _unclaimed_workers(self, live: list[WorkerStatus]) -> None:
        """Shun a worker that looks live but takes nothing: its queue goes to the shared
        queue, and no more tasks to it (:mod:`client.engine.unclaimed`)."""
        for name in self._unclaimed.stranded(live):
            self.run.apply(Unclaimed(name, f"map {self.run.map_id}: worker {name} looks live but took none of the tasks in "
                           f"its queue for {self._unclaimed.seconds:.0f} s (a forged or replayed heartbeat, "
                           "or a wedged worker); they were moved to the shared queue and the map routes "
                           "no more tasks to it", time.time()))

    def _check_full(self) -> None:
        """Warn when no result came for a while because Redis is full; give up after the
        broker patience (nothing is lost until then: workers hold their results)."""
        run = self.run
        patience = run.storage.settings.broker_patience
        if time.time() - run.state.last_progress < 3 * TICK_SECONDS:
            self._full_since = None
            return
        used, limit = run.memory()
        if not limit or used < limit * 0.98:
            self._full_since = None
            return
        if self._full_since is None:
            self._full_since = time.monotonic()
            log.warning("map %s is stalled: the broker is out of memory (%.0f of %.0f MB); workers "
                        "hold their results until memory is freed", run.map_id, used / 1e6, limit / 1e6)
        elif time.monotonic() - self._full_since > patience:
            raise BrokerFull(f"the broker {run.storage.config!r} has been out of memory ({used / 1e6:.0f} of "
                             f"{limit / 1e6:.0f} MB) for {patience:.0f} s during map {run.map_id}, "
                             f"with {run.state.tasks.unfinished} tasks unfinished: free memory in Redis or raise its "
                             "maxmemory, then run the map again")

    def _stragglers(self, live: list[WorkerStatus]) -> None:
        """In the tail of the map, when a worker is idle, a backup copy of a task that has
        run much longer than the median (:func:`client.engine.decisions.straggler_backups`)."""
        run, state = self.run, self.run.state
        running = [(w.task.index, w.task_seconds or 0.0) for w in live
                   if w.task is not None and w.task.map_id == run.map_id]
        backed_up = {i for i, _ in running if state.backed_up(i)}
        idle = sum(w.task is None and not w.forged and w.name not in state.misfits for w in live)
        parked = sum(w.merged for w in live) if run.merging else 0     # finished, in partials
        slow = straggler_backups(unfinished=max(0, state.tasks.unfinished - parked), n=run.n, idle=idle,
                                 durations=state.ledger.durations(), factor=run.straggler_factor,
                                 running=running, backed_up=backed_up)
        if slow:
            behind = self.parked_behind(slow.indices, live) if parked else ()
            run.apply(Backup(slow.indices + behind, slow.why, time.time()))

    def parked_behind(self, slow: tuple[int, ...], live: list[WorkerStatus]) -> tuple[int, ...]:
        """The tasks of the map that finished on the workers running ``slow`` but wait in
        their partials (merge on the workers): backed up with the slow ones, else they would
        wait for them to end (a task that hangs would hold them for good)."""
        run = self.run
        here = [w for w in live if w.task is not None and w.task.map_id == run.map_id]
        leased: set[int] = set()
        for w in here:
            if w.task.index in slow and w.merged:
                leased |= run.storage.maps.leased_to(w.name, run.map_id)
        if not leased:
            return ()
        leased -= {w.task.index for w in here} | set(slow)
        return tuple(sorted(leased & set(run.state.waiting())))

    def _audit(self) -> None:
        """Requeue waiting tasks that are nowhere in the broker, twice in a row (a worker
        killed between taking a task and its lease reaching Redis; a lost connection).

        The audit reads every queue, so it runs only when it is cheap (a short shared
        queue) or needed (no result for a while): a lost task shows at the end of a map.
        Never while results wait unread: it would copy each into the broker's Lua (8 MB
        results of 100 workers blocked Redis for 18 s, and with it every heartbeat, so that
        live workers were reaped); they are read first."""
        run = self.run
        self._next_audit = time.monotonic() + AUDIT_SECONDS
        if run.storage.maps.unread_results(run.map_id):
            return
        stalled = time.time() - run.state.last_progress > AUDIT_SECONDS
        if not stalled and run.storage.pool.unrouted_depth(run.map_id) > AUDIT_MAX_QUEUE:
            return
        if run.state.tasks.count(*_WAITING):
            run.apply(Audited(run.storage.maps.audit(run.map_id), time.time()))
