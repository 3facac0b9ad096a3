"""One map in flight on the client: pack, route, submit, collect, clean up.

This is the engine under :func:`client.remote_map`; analysts use the functions in
:mod:`client.api`. A :class:`MapRun` owns its map's keys in Redis and deletes them
when it ends, however it ends. Each task's state lives in a
:class:`~client.engine.tasks.TaskTable` and moves only through its transitions table; the
once-a-second care (:mod:`client.engine.upkeep`) acts through the public verbs of the
"upkeep verbs" section below (``requeue``, ``fail``, ``function_lost``, ``observe``).
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from typing import Iterable, Sequence

from ...broker import messages, protocol
from ...broker.errors import BrokerOutOfMemory, BrokerTrouble, ConnectionProblem
from ...broker.messages import ErrorKind, Fault, ResultMeta, TaskError, WorkerStatus
from ...broker.registry import renew_map_entry
from ...broker.storage import Storage
from . import beacon
from ..errors import BrokerFull, BrokerLost, RemoteError, describe, undecodable_error
from .decisions import apply
from .feed import MapFeed
from .interrupts import held_interrupt
from .invariants import Checked
from .ledger import Ledger
from .merged import accept_partial, function_to_send
from .faults import answered_by_misfit, fault
from .options import MapOptions
from .packing import Frames, pack_function
from .retry import RetryPolicy, RetryQueue
from .routing import owners
from .tasks import TaskResult, TaskState, TaskTable
from .upkeep import Upkeep

log = logging.getLogger("rhtc.client")

_DONE = int(TaskState.DONE)           # the per-result path compares plain ints
SUBMIT_BATCH = 65536     # tasks packed and queued per round trip (bounds the client's memory)


class MapRun(Checked):
    """Submit ``fn`` over ``args`` and collect the results, exactly once each."""

    def __init__(self, storage: Storage, fn, args: Sequence, options: MapOptions = MapOptions(), *,
                 max_task_bytes: int = protocol.MAX_TASK_BYTES, metrics: bool = True, reduce=None):
        self.storage = storage
        self.settings = storage.settings
        self.key = storage.config.key
        self.fingerprint = protocol.key_fingerprint(self.key)
        self.map_id = secrets.token_hex(8)
        self.nonce = protocol.new_nonce()
        self.options = options
        self.label = options.label or getattr(fn, "__name__", type(fn).__name__)
        self.n = len(args)
        self.args = args
        self.policy = RetryPolicy(options.retries, options.retry_on, self.settings.max_attempts,
                                  self.settings.retry_delay)
        self.straggler_factor = options.stragglers
        self.task_timeout = options.task_timeout
        self.sample_metrics = metrics
        self.metric_samples: list[dict] = []
        sent = function_to_send(fn, reduce, options, self.settings.merge_tasks,
                                lambda: max(self.settings.merge_seconds, storage.worker_count() / self.settings.merge_rate))
        self.packed_fn = pack_function(self.key, sent, self.label)
        self.merging = sent is not fn                   # workers fold results into partials
        self.in_partial = bytearray(self.n if self.merging else 0)   # per task: accepted partials covering it
        self.partials_accepted = self.partials_refused = 0
        self.fn_hash = protocol.function_hash(self.packed_fn)
        self.routing = options.routing and any(getattr(a, "routing_key", None) for a in args)
        self.tasks = TaskTable(self.n)
        self.ledger = Ledger(self.n)
        self.feed = MapFeed(self)                       # the dashboard's view of the map
        self.workers: dict[str, WorkerStatus] = {}     # latest status of each live worker
        self.misfits: set[str] = set()                  # live workers holding another key
        self.shunned: set[str] = set()                  # live-looking workers that took none of their queue
        self.start = self.end = None
        self.last_progress = time.monotonic()
        self.routed_to_workers = 0
        self.resubmissions = 0
        self.retry_queue = RetryQueue()
        self.delivered = 0                              # results handed to the caller
        self.cancelled = self.closed = False
        self._sent = self._end_signed = False           # something may be queued in Redis; its end signed
        self.cancelled_by: str | None = None            # who asked, when not this client
        self._fn_uploaded = False
        self._outbox: list[TaskResult] = []
        self._warned_unverified = False
        self.upkeep = Upkeep(self)
        self.frames = Frames(self.key, self.map_id, self.nonce, self.fn_hash, args, max_task_bytes)
        self.frames.check(range(min(self.n, SUBMIT_BATCH)))   # fail fast on an unpicklable argument

    def describe_argument(self, index: int) -> str:
        return describe(self.args[index])

    # -- submitting ---------------------------------------------------------------------
    def submit(self, wait_first: float = 0.0) -> None:
        """Queue every task; with ``wait_first``, also wait that long for the first result
        in the same round trip (what makes a one-task map fast)."""
        self.start = time.time()
        try:
            self.upkeep.look()
            beacon.attach(self)           # its tasks are dropped soon after this process dies
            for lo in range(0, self.n, SUBMIT_BATCH):
                early = self._enqueue(range(lo, min(self.n, lo + SUBMIT_BATCH)), wait_first if lo == 0 else 0.0)
                for frame in early:
                    self._accept(frame)
        except BaseException:             # Ctrl-C, or an argument of a later batch could not
            if self._sent:                # travel: what was queued is taken back
                self.cancel()
            else:
                beacon.detach(self)
            raise
        if not wait_first:                # a map that may run long: its registry entry expires
            renew_map_entry(self.storage, self.map_id)    # if this client dies (ticks renew it)
        self.upkeep.schedule()

    def _enqueue(self, indices: Iterable[int], wait_first: float = 0.0, route: bool = True,
                 fair: bool = True) -> list[bytes]:
        indices = list(indices)
        route = route and self.routing
        owner, home = owners(self.args, indices, locate=self.storage.locate, route=route,
                             avoid=self.misfits | self.shunned,
                             good=self.good_workers() if self.misfits else None)   # a mixed pool
        if route:
            self.routed_to_workers = home
        routed: dict[str | None, list[bytes]] = {}
        for i in indices:
            routed.setdefault(owner.get(i), []).append(self.frames[i])
        upload = not self._fn_uploaded or len(self.packed_fn) < 65536 or \
            not self.storage.function_present(self.fn_hash)
        try:
            with held_interrupt():        # queued whole (and its reply read) or not at all
                self._sent = True
                early = self.storage.enqueue_map(self.map_id, self.fn_hash, self.packed_fn if upload else None,
                                                 self._info(), routed, wait_first=wait_first, nonce=self.nonce,
                                                 client=beacon.client_id(), fair=fair)
        except BrokerOutOfMemory as err:
            used, limit = self.memory()
            raise BrokerFull(f"the broker {self.storage.config!r} is out of memory ({used / 1e6:.0f} MB "
                             f"used of maxmemory {limit / 1e6:.0f} MB): map {self.map_id} could not "
                             "queue its tasks. Free memory in Redis (other maps' unread results?), "
                             "raise its maxmemory, or send fewer/smaller tasks.") from err
        self._fn_uploaded = True
        return early

    def _info(self) -> dict:
        v = protocol.versions()
        return {"n": self.n, "label": self.label, "client": f"{socket.gethostname()}:{os.getpid()}",
                "started": self.start, "python": v["python"], "cloudpickle": v["cloudpickle"],
                "key_fingerprint": self.fingerprint}

    def memory(self) -> tuple[int, int]:
        """(used, maxmemory) bytes of the broker; (0, 0) when it cannot say."""
        return self.storage.memory_or_none()

    # -- upkeep verbs: how client.engine.upkeep (and only it) changes the map ---------------------
    def waiting(self) -> list[int]:
        """Indices of the tasks still owed an answer (walks the table: not per result)."""
        return self.tasks.indices(TaskState.QUEUED, TaskState.LEASED)

    def requeue(self, indices: Iterable[int], *, route: bool = True, backup: bool = False,
                fair: bool = False) -> list[int]:
        """Send these tasks again (those still waiting); ``backup``: a copy beside a slow
        one (first result wins); ``fair``: behind the map's backlog (a broker that lost
        everything), else straight into the shared queue. Returns the ones sent."""
        moved = self.tasks.move_all(indices, TaskState.QUEUED)
        if moved:
            if backup:
                for i in moved:
                    self.tasks.note(i).backup = True
            self.resubmissions += len(moved)
            for lo in range(0, len(moved), SUBMIT_BATCH):
                self._enqueue(moved[lo:lo + SUBMIT_BATCH], route=route, fair=fair)
        return moved

    def fail(self, index: int, error: RemoteError, meta: ResultMeta | None = None) -> bool:
        """Give up on a task: it fails with ``error``. False if it had already finished."""
        if not self.tasks.move(index, TaskState.FAILED):
            return False
        note = self.tasks.notes.get(index)
        if meta is None and error.remote_type == ErrorKind.WORKER_LOST:      # its last run is its row
            meta = self.ledger.lost_runs(index, error.history, final=True)
        self.ledger.add(index, meta, error=f"{error.remote_type}: {error.message}",
                        retries=note.user_attempts if note else 0, received=time.time())
        self.feed.note_error(index, error)
        self.last_progress = time.monotonic()
        self._outbox.append(TaskResult(index, None, meta, error))
        return True

    def function_lost(self) -> None:
        """The broker lost the map and its function (it restarted): upload the function
        again and resend every task still waiting."""
        self._fn_uploaded = False
        self.requeue(self.waiting(), fair=True)

    def observe(self, statuses: list[WorkerStatus]) -> None:
        """What the live workers say: which of our tasks run where, which key they hold."""
        self.workers = {s.name: s for s in statuses}
        self.misfits = {s.name for s in statuses if s.key_fingerprint and s.key_fingerprint != self.fingerprint}
        for s in statuses:
            if s.task is not None and s.task.map_id == self.map_id:
                self.tasks.move(s.task.index, TaskState.LEASED)

    def good_workers(self) -> list[str]:
        """Live workers known to hold this client's key."""
        return sorted(n for n, s in self.workers.items() if n not in self.misfits and n not in self.shunned
                      and not s.forged and s.key_fingerprint == self.fingerprint)

    def durations(self):
        """Run times of the latest finished tasks (numpy array), for the straggler check."""
        return self.ledger.durations()

    def backed_up(self, index: int) -> bool:
        note = self.tasks.notes.get(index)
        return bool(note and note.backup)

    # -- collecting ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Nothing more to wait for: every task answered (or provisionally refused), or
        the map was cancelled. O(1)."""
        return self.cancelled or self.tasks.finished

    @property
    def unfinished(self) -> int:
        return self.tasks.unfinished

    def poll(self, timeout: float) -> list[TaskResult]:
        """New results (each index at most once), waiting up to ``timeout`` for the first."""
        if self.cancelled:
            return self._take()
        deadline = time.monotonic() + max(0.0, timeout)
        lost_since = None
        out = self._take()
        while not self.tasks.finished:
            try:
                if self.upkeep.due():
                    apply(self, self.upkeep.tick())
                    out += self._take()
                next_retry = self._send_due_retries()
                now = time.monotonic()
                wait = 0.0 if out else max(0.0, min(deadline, self.upkeep.next_tick, next_retry) - now)
                frames = self.storage.fetch_results(self.map_id, timeout=wait)
                lost_since = None
            except ConnectionProblem as err:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > self.settings.broker_patience:
                    raise BrokerLost(f"the broker {self.storage.config!r} has been unreachable for "
                                     f"{self.settings.broker_patience:.0f} s during map {self.map_id}: "
                                     f"{err}") from err
                time.sleep(0.5)
                continue
            for frame in frames:
                self._accept(frame)
            out += self._take()
            if out or time.monotonic() >= deadline:
                break
        if self.tasks.finished:
            self._settle_refusals()
            out += self._take()
            if self.end is None:
                self.end = time.time()
                self._sign_end()
                if self.settings.check_invariants:
                    self.validate()
                if self.end - self.start > 0.5:     # a task process restart takes longer
                    self.ledger.read_lost_runs(self.storage, self.map_id)
                self.feed.flush(later=True)    # off the map's path: no round trip
        return out

    def _take(self) -> list[TaskResult]:
        out, self._outbox = self._outbox, []
        self.delivered += len(out)
        return out

    def _settle_refusals(self) -> None:
        """Every other task answered: the refused ones fail with their refusal."""
        for i in self.tasks.indices(TaskState.REFUSED):
            note = self.tasks.note(i)
            self.tasks.move(i, TaskState.FAILED)
            self.ledger.add(i, None, error=f"{note.refusal.remote_type}: {note.refusal.message}")
            self._outbox.append(TaskResult(i, None, None, note.refusal))

    def _accept(self, frame: bytes) -> None:
        by = messages.cancelled_by(frame)
        if by is not None:                # `rhtc cancel` from another shell
            log.warning("map %s (%s) cancelled by %s", self.map_id, self.label, by)
            self.cancelled_by = by
            self.cancel()
            return
        try:
            map_id, index, status, payload = protocol.unpack_result(self.key, frame)
        except protocol.BadFrame as err:
            answered_by_misfit(self, frame, err)
            return
        if status == protocol.MERGED and map_id == self.map_id:
            accept_partial(self, payload)     # several tasks: all counted once, or none
            return
        if map_id != self.map_id or not 0 <= index < self.n or self.tasks.is_final(index):
            return                        # a duplicate (a slow worker's or a backup's second copy)
        if status == protocol.SYSTEM_ERROR:
            fault(self, index, Fault.decode(payload))
            return
        meta, packed = messages.decode_result(payload)
        try:
            value = protocol.loads(packed)
        except Exception as err:          # C5: pickled with something this client lacks
            self.fail(index, undecodable_error(index, meta, err, self.workers.get(meta.worker),
                                               self.describe_argument(index)), meta)
            return
        note = self.tasks.notes.get(index)
        if status == protocol.USER_ERROR:
            if self.tasks.state(index) is TaskState.BACKOFF:
                return                    # a second copy's error: the retry is already planned
            info = TaskError.from_wire(value)
            if self.policy.retry_user_error(self.tasks.note(index), info):
                self._retry_later(index, info, meta)
                return
            self.fail(index, self._remote_error(index, info, meta), meta)
            return
        self.tasks.move(index, _DONE)
        self.ledger.add(index, meta, retries=note.user_attempts if note else 0, received=time.time(),
                        backup=bool(note and note.backup))
        self.last_progress = time.monotonic()
        self._outbox.append(TaskResult(index, value, meta))

    def _retry_later(self, index: int, info: TaskError, meta: ResultMeta) -> None:
        """Send a task whose function raised again, after the policy's pause."""
        note = self.tasks.note(index)
        pause = self.policy.delay(note)
        self.ledger.attempt(index, meta, info.summary(), "retried", backoff=pause)
        log.info("map %s: task %d raised %s; retry %d of %d in %.1f s", self.map_id, index,
                 info.type, note.user_attempts, self.policy.retries, pause)
        if pause > 0 and self.tasks.move(index, TaskState.BACKOFF):
            self.retry_queue.add(index, pause)
        else:
            self.requeue([index])

    def _send_due_retries(self) -> float:
        """Send the retries whose pause has passed; return when the next one is due."""
        due = [i for i in self.retry_queue.pop_due() if self.tasks.state(i) is TaskState.BACKOFF]
        if due:                                  # (a task sent again meanwhile is not sent twice)
            self.requeue(due)
        return self.retry_queue.next_due

    def _remote_error(self, index: int, info: TaskError, meta: ResultMeta) -> RemoteError:
        return RemoteError(index, info.type, info.message, info.traceback, worker=meta.worker, host=meta.host,
                           argument=info.argument or None, exception=self.policy.exception_of(info))

    def cancel(self) -> int:
        """Remove the map's queued tasks and keys; returns how many queued tasks were dropped.
        A map already ended (cancelled, or closed) stays as it is (returns 0)."""
        if self.closed:
            return 0
        self.cancelled = True
        self.tasks.move_all(self.tasks.indices(TaskState.QUEUED, TaskState.LEASED, TaskState.REFUSED,
                                               TaskState.BACKOFF), TaskState.CANCELLED)
        self.retry_queue.clear()
        beacon.detach(self)
        removed = 0
        if self._sent:
            try:
                with held_interrupt():           # a Ctrl-C now would leave the keys behind
                    removed = self.storage.cancel_map(self.map_id)
            except BrokerTrouble:                # unreachable, or refusing (out of memory):
                pass                             # the keys expire by themselves
        self._sign_end()
        self.closed = True
        return removed

    def close(self) -> None:
        """Delete the map's keys (results already read)."""
        if not self.closed:
            self.closed = True
            beacon.detach(self)
            try:
                if self.tasks.unfinished:
                    self.storage.cancel_map(self.map_id)
                else:
                    self.storage.end_map(self.map_id, lazy=True)
            except ConnectionProblem:
                pass
            self._sign_end()

    def _sign_end(self) -> None:
        """Sign the map's end in its token's place: workers refuse its frames from now on."""
        if self._sent and not self._end_signed:
            self._end_signed = True
            try:
                self.storage.sign_map_end(self.map_id, self.nonce)
            except BrokerTrouble:
                pass

    @property
    def metas(self) -> list[dict]:
        """Each finished task's metadata (worker, times, bytes, error), in arrival order."""
        return list(self.ledger.metas())
