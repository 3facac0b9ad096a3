"""The task process: take tasks (own queue, then shared queue, then steal), run them one
at a time, hand in signed results. It talks to Redis directly (the supervisor in
:mod:`worker.supervisor` is not on the hot path), keeps the branch cache, and tells its
supervisor what it runs through :class:`worker.shared.SharedState`.

    (not run by the tests: it serves tasks until SIGTERM)
    >>> from rhtc.worker.main import TaskProcess            # doctest: +SKIP
    >>> TaskProcess(config, "w1", incarnation, shared).run()   # doctest: +SKIP
"""
from __future__ import annotations

import collections
import logging
import os
import signal
import socket
import time

from rhtc import context
from ..broker import protocol

from ..broker import messages
from ..broker.merge import MergePlan
from ..broker.config import BrokerConfig, Settings, redact, settings
from ..broker.errors import BrokerTrouble
from ..broker.storage import Storage
from .backoff import Backoff
from .cache import BranchCache, branch_label
from .children import end_task_children
from .frozen import explain
from .disk import finish_writes, open_disk_tier
from .memory import tune_malloc
from .outbox import Outbox
from .preload import Preload, names as preload_names
from .results import describe_error, events_of, pack_result
from .merge import Partials
from .tree import Tree
from .shared import MAX_HELD, SharedState
from .tokens import MapTokens

log = logging.getLogger("rhtc.worker")
BATCH_SECONDS = 0.005      # take as many tasks as fit in this much time (fast tasks only)
IDLE_WAIT = 5.0            # an idle worker's blocking pop (s); a stop or a drain ends it at once (wake)
QUIET_RETAKE = 10.0        # with nothing to steal, an idle worker still takes (checks its name) this often (s)


class HandBack(BaseException):
    """Raised inside the user's function by SIGTERM: the task goes back to the queue."""


def default_name() -> str:
    return f"{socket.gethostname().split('.')[0]}-{os.getpid()}"


class TaskProcess:
    """The loop over one worker's own queue and the shared queue."""

    def __init__(self, config: BrokerConfig, name: str, incarnation: str, shared: SharedState,
                 cache_bytes: int = 4_000_000_000, max_batch: int = 64, settings_: Settings | None = None,
                 storage: Storage | None = None):
        self.config = config
        self.settings = settings_ or settings()
        self.name = name
        self.incarnation = incarnation
        self.shared = shared
        self.key = config.key
        self.storage = storage or Storage(config, self.settings)
        self.dumps = protocol.dumps_parts           # how a value is packed (bench's light workers memoize it)
        self.cache = BranchCache(cache_bytes, disk=open_disk_tier(self.settings, name))
        self.functions: collections.OrderedDict[str, object] = collections.OrderedDict()
        self.tokens = MapTokens(self.key, name)
        self._broker_ms = 0                         # the broker's clock at the last take
        self.max_batch = max_batch
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.stopping = False
        self._waiting = False                       # in the idle blocking pop (wake() ends it)
        self._in_user_code = False
        self.outbox = Outbox(self.storage, name, incarnation, self.key)   # results not handed in yet
        self.partials = Partials(self.key, MAX_HELD - max_batch, self.settings.max_result_bytes,
                                 self.storage.lease.bulk_limits)     # results of maps that merge (reduce=)
        self._ewma = 1.0                            # seconds per task, for batch sizing
        self._quiet_until = 0.0                     # idle with nothing to steal: only pop until then
        self.tasks_done = self.errors = 0
        self.bytes_from_file = self.bytes_from_cache = 0     # totals, for `rhtc status`
        self.ctx = context.TaskContext(worker=self.name, cache=self.cache)
        self.preload = Preload([])                  # run() imports the analysis stack while idle
        context.current = self.ctx
        if self.settings.malloc_tuning:
            tune_malloc()

    # -- lifecycle ---------------------------------------------------------------------
    def run(self) -> int:
        """Serve tasks until SIGTERM/SIGINT; returns the exit code (0)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGUSR1, self._on_drain)
        self.preload = Preload(preload_names(self.settings.preload))
        return self.serve()

    def serve(self) -> int:
        """Serve tasks until :attr:`stopping` is set (by a signal, or by the caller's thread:
        the light workers of ``bench scale`` run many task loops in one process)."""
        self._publish()
        backoff = Backoff(f"worker {self.name} (task process {self.pid})")
        while not self.stopping:
            try:
                quiet = time.monotonic() < self._quiet_until
                holding, batch = (True, []) if quiet else self._take()
                if not holding:     # the name is not ours (yet/any more): the supervisor claims or stops
                    time.sleep(0.2)
                    continue
                if not batch and not self.stopping:
                    if self.partials:           # the queue ran dry: the partials of maps at their end
                        self._ending(self.partials.ending(None), [])    # go up the tree, the rest in
                        self.outbox.frames += self.partials.flush()
                        self.outbox.flush()
                        self._hold([])
                    with self.preload.idle():
                        self._waiting = not self.stopping     # (wake() ends the wait)
                        try:
                            frame = self._waiting and self.storage.lease.wait_for_task(self.name, self.incarnation, IDLE_WAIT,
                                                                                     leasing=self.shared.set_leasing)
                        finally:
                            self._waiting = False
                    batch = [(frame, None)] if frame else []
                    if frame or self.storage.lease.stealable():   # (a take per idle second costs the broker a
                        self._quiet_until = 0.0             # script run per worker-second: 25 % of a core
                    elif not quiet:                         # at 1,000 workers; a SCARD, ~1 %)
                        self._quiet_until = time.monotonic() + QUIET_RETAKE
                if batch:
                    self._run_batch(batch)
                backoff.ok()
            except HandBack:
                break
            except BrokerTrouble as err:
                # never exit on a broker error: what was leased but not run is reconciled
                # by the supervisor; results not handed in are kept and sent again
                self.storage.reset_connection()
                self._hold([])                  # what was leased but not handed in is reconciled
                self.shared.set_task(None)      # (a lost lease reply after the task ran, too)
                self.outbox.refused(err)
                backoff.wait(err, redact(self.config.url))
        self._shutdown()
        return 0

    def _on_signal(self, signum, frame) -> None:
        self.stopping = True
        if self._in_user_code:
            raise HandBack()
        self.wake()

    def _on_drain(self, signum, frame) -> None:
        """SIGUSR1 from the supervisor (the worker leaves on its own terms): finish the task
        in hand, take no more; what the batch still holds goes back when the worker retires."""
        self.stopping = True
        self.wake()

    def wake(self) -> None:
        """Told to stop (:attr:`stopping` set): end an idle wait now rather than at its
        timeout (``IDLE_WAIT``). From a signal handler, or the thread that stops a light worker."""
        if self._waiting:
            self.storage.lease.unblock_wait()

    def _shutdown(self) -> None:
        self.outbox.frames += self.partials.flush()
        for _ in range(3):
            try:
                self.outbox.flush()
                break
            except BrokerTrouble:
                if not self.outbox:
                    break
                time.sleep(0.5)
        finish_writes(self.cache.disk, self.name)          # the node keeps what this worker read
        log.info("worker %s: task process stopped after %d tasks", self.name, self.tasks_done)

    # -- taking and running ------------------------------------------------------------
    def _take(self) -> tuple[bool, list[tuple[bytes, bytes | None]]]:
        """Hand in finished results and lease the next batch, in one round trip; also says
        whether this incarnation still holds the name."""
        n = 0 if self.stopping else max(1, min(self.max_batch, int(BATCH_SECONDS / max(self._ewma, 1e-6))))
        if n:
            self.shared.set_leasing()   # (the supervisor's reconcile waits for the batch's ids)
        holding, self._broker_ms, batch, self.partials.backlogged = self.outbox.take(n, self.partials.watched())
        self._hold([protocol.task_id(f) for f, _ in batch])    # the results are in; the new batch held
        evicted = self.cache.drain_evicted()
        if evicted:
            self.storage.lease.advertise(self.name, removed=evicted)
        return holding, batch

    def _run_batch(self, batch: list[tuple[bytes, bytes | None]]) -> None:
        tids = [protocol.task_id(f) for f, _ in batch]
        self._hold(tids)
        for frame, token in batch:
            if self.stopping:
                break                      # the rest is still leased: the supervisor hands it back
            ref = protocol.frame_ref(frame)
            ending = self.partials.ending(ref.map_id if ref else None)
            if ending:                     # another map's task next: a map near its end is not
                self._ending(ending, tids)  # kept waiting for it (worker/merge.py)
            due = self.partials.switching(ref.map_id if ref else None)
            if due:
                self.outbox.frames += due
                self.outbox.flush()
                self._hold(tids)
            self._run_frame(frame, token)
        self._publish()                    # the counters, once a batch (the supervisor reads them once a second);
        # the batch stays held until the next take hands its results in (not a lease nobody runs)

    def _ending(self, map_ids: list[str], batch: list[bytes]) -> None:
        """Maps with nothing left queued for this worker: its results in first (so the
        broker counts them), then their partials up the tree (worker/tree.py), merging
        others' while idle, one round of them before the next ``batch``."""
        self.outbox.flush()
        Tree(self.storage, self.partials, self.name, self.incarnation,
             lambda: self._hold(batch), self.shared.set_leasing).up(map_ids, 1 if batch else None)
        self._hold(batch)

    def _hold(self, batch: list[bytes]) -> None:
        """Tell the supervisor what this process holds: ``batch``, the tasks of its open
        partials and what its outbox keeps to send again (their leases must outlive the
        reconcile), and how many its partials cover."""
        merged = self.partials.held()
        self.shared.set_held(batch + merged + self.outbox.held())
        self.shared.set_counters(merged=len(merged))

    def _run_frame(self, frame: bytes, token: bytes | None) -> None:
        """Verify a frame (signature; its map's liveness token, nonce and expiry; function
        hash) and run it. ``token`` is the map's token from the take (None: an idle
        worker's wake-up, whose lease reply brings it: read while the frame is verified, and
        always before the task runs: a map that ended has its signed end there)."""
        ref = protocol.frame_ref(frame)
        map_id, index = (ref.map_id, ref.index) if ref else (None, None)
        if not protocol.is_task_frame(frame):
            if token is None:
                self.storage.lease.leased_token()
            self._problem(f"worker {self.name} dropped {len(frame)} bytes from a queue that are "
                          f"not a task frame: {frame[:40]!r}")
            return
        tid = protocol.task_id(frame)
        try:
            task = protocol.unpack_task(self.key, frame)
        except protocol.BadFrame as err:
            if token is None:
                self.storage.lease.leased_token()
            self._problem(f"worker {self.name} refused task {index} of map {map_id}: {err}")
            self.storage.lease.release(self.name, [tid])
            self._system_error(map_id, index, tid, f"refused by worker {self.name}: {err}",
                               kind=messages.FaultKind.BAD_FRAME)
            return
        if token is None:                  # never run before the map's current token is judged:
            token, self._broker_ms = self.storage.lease.leased_token()   # its signed end may be there
        if not self._alive(task, tid, token, self._broker_ms):
            return
        if self.partials.holds(task.ref):  # sent again (a broker restart lost its lease): it is
            # folded here already, leased here again, and goes in with the partial; never run twice
            log.info("worker %s: task %s is already in its partial; not run again", self.name, task.ref)
            return
        try:
            fn = self._function(task.fn_hash, task.map_id)
        except _SystemFault as fault:
            self._system_error(task.map_id, task.index, tid, str(fault), kind=fault.kind)
            return
        self._run_task(fn, task, tid)

    def _alive(self, task: protocol.Task, tid: bytes, token: bytes, broker_ms: int) -> bool:
        """Whether the task's map is alive (:mod:`worker.tokens`); if not, the refusal is
        reported (once per map and kind) and sent as the task's result."""
        refusal = self.tokens.judge(task, token, broker_ms)
        if refusal is None:
            return True
        if refusal.kind is None:            # the map is gone: its task is dropped, nothing to say
            return False
        if refusal.report:
            self._problem(refusal.message)
        self.storage.lease.release(self.name, [tid])
        self._system_error(task.map_id, task.index, tid, refusal.message, kind=refusal.kind)
        return False

    def _run_task(self, fn, task: protocol.Task, tid: bytes) -> None:
        """Run one verified task (its map's token judged) and keep its signed result for the
        next take."""
        ref, packed_arg = task.ref, task.packed_arg
        self.shared.set_task(ref)
        t0 = time.time()
        self.ctx.begin_task()
        arg = None
        status = protocol.OK
        try:
            arg = protocol.loads(packed_arg)
            self._in_user_code = True
            try:
                value = (fn.fn if isinstance(fn, MergePlan) else fn)(arg)
            finally:
                self._in_user_code = False
                end_task_children(self.name, ref)
        except HandBack:
            self.shared.set_task(None)
            raise
        except BaseException as err:  # the user's error, whatever it is, goes back to them
            err = explain(err, [(branch_label(key, tag), v) for key, tag, v in self.ctx.handed])
            status, value = protocol.USER_ERROR, describe_error(err, arg)
        self.ctx.handed = []               # an evicted array is not kept alive by an idle worker
        t1 = time.time()
        self._ewma = 0.8 * self._ewma + 0.2 * (t1 - t0)
        meta = messages.ResultMeta(worker=self.name, host=self.host, pid=self.pid, start=t0, stop=t1,
                                   incarnation=self.incarnation, bytes_cache=self.ctx.bytes_from_cache,
                                   bytes_disk=self.ctx.bytes_from_disk,
                                   bytes_file=self.ctx.bytes_from_file, events=events_of(arg),
                                   files_opened=self.ctx.files_opened, reads=self.ctx.reads_text(arg))
        if not (status == protocol.OK and isinstance(fn, MergePlan) and self.partials.fold(fn, ref, value, meta)):
            status, payload = pack_result(status, value, meta, arg, self.settings.max_result_bytes,
                                          self.storage.lease.bulk_limits, dumps=self.dumps)
            self.outbox.frames.append((ref.map_id, tid, protocol.pack_result(self.key, ref.map_id, ref.index,
                                                                          status, payload)))
        if self.partials:                  # (open partials, or ready ones)
            self.outbox.frames += self.partials.due()
        self.tasks_done += 1
        self.errors += status != protocol.OK
        self.bytes_from_file += self.ctx.bytes_from_file
        self.bytes_from_cache += self.ctx.bytes_from_cache
        self.shared.set_task(None)
        if self.ctx.routing_keys:
            self.storage.lease.advertise(self.name, added=self.ctx.routing_keys,
                                   tier=self.cache.disk.tier if self.cache.disk is not None else "")

    def _publish(self) -> None:
        disk = self.cache.disk
        self.shared.set_counters(disk_bytes=disk.nbytes if disk is not None else 0,
                                 disk_limit=disk.size_limit if disk is not None else 0,
                                 tasks_done=self.tasks_done, errors=self.errors, cache_bytes=self.cache.nbytes,
                                 cache_entries=len(self.cache), cache_limit=self.cache.limit_bytes,
                                 bytes_read=self.bytes_from_file, bytes_from_cache=self.bytes_from_cache,
                                 merged=self.partials.count)

    def _function(self, fn_hash: str, map_id: str):
        fn = self.functions.get(fn_hash)
        if fn is not None:
            self.functions.move_to_end(fn_hash)
            return fn
        info = self.storage.lease.map_info(map_id)
        ours = protocol.versions()
        theirs = info.get("python", "")
        if theirs and theirs.split(".")[:2] != ours["python"].split(".")[:2]:
            # pickles by value do not travel between Python versions: loading one can
            # crash the interpreter outright, so refuse before trying
            raise _SystemFault(messages.FaultKind.VERSION_MISMATCH, f"worker {self.name} runs Python {ours['python']} but "
                               f"map {map_id} was sent from Python {theirs}: run the workers with the "
                               "client's Python X.Y (`rhtc pack` builds the worker environment for it)")
        blob = self.storage.lease.get_function(fn_hash)
        if blob is None:
            raise _SystemFault(messages.FaultKind.MISSING_FUNCTION, f"the function of map {map_id} is not in the "
                               "broker (it expired or the broker restarted); the client re-sends it")
        try:
            protocol.check_function(blob, fn_hash)
        except protocol.FunctionMismatch as err:
            raise _SystemFault(messages.FaultKind.FUNCTION_MISMATCH, f"worker {self.name} refused map {map_id}: {err}")
        try:
            body = protocol.verify(self.key, blob)
        except protocol.BadFrame as err:
            raise _SystemFault(messages.FaultKind.BAD_FRAME, f"worker {self.name} refused the function of map {map_id}: {err}")
        try:
            fn = protocol.loads(body)
        except Exception as err:
            theirs = {k: info.get(k, "?") for k in ("python", "cloudpickle")}
            differ = {k: (theirs[k], ours[k]) for k in theirs if theirs[k] != ours[k]}
            hint = ("; the client runs " + ", ".join(f"{k} {a} and this worker {k} {b}" for k, (a, b)
                                                     in differ.items())) if differ else ""
            raise _SystemFault(messages.FaultKind.FUNCTION_LOAD, f"worker {self.name} cannot load the function of map "
                               f"{map_id}: {type(err).__name__}: {err}{hint}. Install the same packages "
                               "(and versions) on the workers as on the client.")
        self.functions[fn_hash] = fn
        while len(self.functions) > 32:
            self.functions.popitem(last=False)
        return fn

    def _system_error(self, map_id: str | None, index: int | None, tid: bytes, message: str,
                      kind: messages.FaultKind) -> None:
        if map_id is None or index is None:
            return
        payload = messages.Fault(kind, message, worker=self.name).encode()
        self.outbox.frames.append((map_id, tid, protocol.pack_result(self.key, map_id, index,
                                                                  protocol.SYSTEM_ERROR, payload)))

    def _problem(self, message: str) -> None:
        log.warning(message)
        try:
            self.storage.report(message)
        except BrokerTrouble:
            pass


class _SystemFault(Exception):
    def __init__(self, kind: messages.FaultKind, message: str):
        super().__init__(message)
        self.kind = kind

