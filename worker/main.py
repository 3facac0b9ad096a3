"""The task process: take tasks (own queue, then shared queue, then steal), run them one
at a time, hand in signed results. It talks to Redis directly (the supervisor in
:mod:`worker.supervisor` is not on the hot path), keeps the branch cache, and tells its
supervisor what it runs through :class:`worker.shared.SharedState`.

:class:`TaskProcess` is the driver of the loop's pure state (:class:`worker.loopstate.LoopState`,
which decides the batch size, the idle and steal timing, when partials go in or up, how
long to back off): it carries out the state's instructions (Redis through its storage,
the user's code, folds through :mod:`worker.merge`) and hands it what happened.

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
from ..broker.wire import protocol

from ..broker.wire import messages
from ..broker.wire.merge import MergePlan
from ..broker.wire.config import BrokerConfig, Settings, redact, settings
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
from .functions import Functions, SystemFault
from .loopevents import (AGAIN, ALONE, DROPPED, FOLDED as FOLDED_RESULT, REFUSED, RESULT, Close, Exit,
                         FlushPartials, GoUp, HandedBack, HandedIn, HandIn, Hold, IdleWait, PartialsDue,
                         PartialsOut, Pause, Probe, Probed, Publish, Ran, Recovered, Run, Start, Stop, Take,
                         Tick, Took, Trouble, WentUp, Woke)
from .loopstate import FOLDED, IDLE_WAIT, RUNNING, LoopState  # noqa: F401 - IDLE_WAIT: read by the tests
from .merge import Partials
from .tree import Tree
from .shared import MAX_HELD, SharedState
from .tokens import MapTokens

log = logging.getLogger("rhtc.worker")


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
        self.functions = Functions(self.storage, name, self.key)
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
        self.state = LoopState(max_batch)           # what the loop decides (worker/loopstate.py)
        self._batch: list[tuple[bytes, bytes | None]] = []   # the last batch's (frame, token)s
        self._trouble: BaseException | None = None  # the broker's last error, while it lasts
        self.backoff = Backoff(f"worker {name} (task process {self.pid})")
        self._do = {Take: self._take, Run: self._run, Hold: lambda ins: self._hold(ins.batch),
                    HandIn: self._hand_in, PartialsDue: self._partials_due, Close: self._close,
                    FlushPartials: self._flush_partials, GoUp: self._go_up, IdleWait: self._idle_wait,
                    Probe: self._probe, Pause: self._pause, Recovered: self._recovered,
                    Publish: self._published, Exit: self._exit}
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
        the light workers of ``bench scale`` run many task loops in one process).

        The driver of :attr:`state`: it does each instruction, hands the event that doing
        it answers to the state, and does the instructions that returns first. It never
        exits on a broker error: the state decides what is handed back and how long to wait."""
        self._publish()
        state, do, monotonic = self.state, self._do, time.monotonic
        pending = collections.deque(state.handle(Start(monotonic())))
        while pending:
            try:
                while pending:
                    ins = pending.popleft()
                    event = do[type(ins)](ins)
                    if event is not None:
                        if self.stopping and not state.stopping:
                            state.handle(Stop(event.now))
                        pending.extendleft(reversed(state.handle(event)))
            except HandBack:
                pending = collections.deque(state.handle(HandedBack(monotonic())))
            except BrokerTrouble as err:
                # what was leased but not run is reconciled by the supervisor; results and
                # partials not handed in are kept and sent again
                self.storage.reset_connection()
                self.shared.set_task(None)      # (a lost lease reply after the task ran, too)
                self.outbox.refused(err)
                self._trouble = err
                self._settle_running()
                if state.counts[FOLDED]:        # (a tree that failed half way: what went up)
                    state.handle(WentUp(self._went_up(state.folded(list(state.partial_maps))), monotonic()))
                pending = collections.deque(state.handle(Trouble(monotonic())))
        return 0

    # -- the instructions (each returns the event it answers, or None) --------------------
    def _take(self, ins: Take) -> Took:
        """Hand in finished results and lease the next batch, in one round trip; also says
        whether this incarnation still holds the name."""
        if ins.n:
            self.shared.set_leasing()   # (the supervisor's reconcile waits for the batch's ids)
        holding, self._broker_ms, batch, backlogged = self.outbox.take(ins.n, self.partials.watched())
        self._batch = batch
        return Took(holding, [protocol.task_id(f) for f, _ in batch], backlogged, time.monotonic())

    def _run(self, ins: Run) -> Ran:
        frame, token = self._batch[ins.k]
        outcome, seconds = self._run_frame(frame, token)
        return Ran(protocol.task_id(frame), outcome, seconds, time.monotonic())

    def _hand_in(self, ins: HandIn) -> HandedIn:
        self.outbox.flush()
        return HandedIn(time.monotonic())

    def _partials_due(self, ins: PartialsDue) -> PartialsOut:
        return self._out(self.partials.due(), False)

    def _close(self, ins: Close) -> PartialsOut:
        return self._out(self.partials.close(ins.maps), ins.flush)

    def _flush_partials(self, ins: FlushPartials) -> PartialsOut:
        return self._out(self.partials.flush(), True)

    def _out(self, frames: list, flush: bool) -> PartialsOut:
        """``frames`` from the partials go into the outbox."""
        self.outbox.frames += frames
        n = protocol.TASK_ID_LEN
        tids = [tids[at:at + n] for _, tids, _ in frames for at in range(0, len(tids), n)]
        return PartialsOut(tids, flush, time.monotonic())

    def _go_up(self, ins: GoUp) -> WentUp:
        """The partials of maps at their end up the tree, merging others' while idle
        (worker/tree.py); their results went in first (the state's HandIn)."""
        mine = self.state.folded(ins.maps)
        Tree(self.storage, self.partials, self.name, self.incarnation,
             lambda: self._hold(self.state.batch), self.shared.set_leasing).up(ins.maps, ins.rounds)
        return WentUp(self._went_up(mine), time.monotonic())

    def _settle_running(self) -> None:
        """The broker failed during a task's turn: if its result was kept already (the
        failure came after it ran: advertising its cache), the state hears how it ended."""
        state = self.state
        if state.next < len(state.batch) and state.counts[RUNNING]:
            tid = state.batch[state.next]
            if state.state(tid) is RUNNING:
                if tid in self.outbox.held():
                    outcome = RESULT
                elif tid in self.partials.ready_ids():
                    outcome = ALONE
                elif tid in self.partials.held():
                    outcome = FOLDED_RESULT
                else:
                    return
                state.handle(Ran(tid, outcome, None, time.monotonic()))

    def _went_up(self, mine: list[bytes]) -> list[bytes]:
        """Those of ``mine`` (task ids folded here) that left the partials: up the tree."""
        still = set(self.partials.held())
        still.update(self.partials.ready_ids())
        return [t for t in mine if t not in still]

    def _idle_wait(self, ins: IdleWait) -> Woke:
        with self.preload.idle():
            self._waiting = not self.stopping     # (wake() ends the wait)
            try:
                frame = self._waiting and self.storage.lease.wait_for_task(self.name, self.incarnation, ins.timeout,
                                                                     leasing=self.shared.set_leasing)
            finally:
                self._waiting = False
        if not frame:
            return Woke(None, time.monotonic())
        self._batch = [(frame, None)]
        return Woke(protocol.task_id(frame), time.monotonic())

    def _probe(self, ins: Probe) -> Probed:
        return Probed(self.storage.lease.stealable(), time.monotonic())

    def _pause(self, ins: Pause) -> Tick:
        now = time.monotonic()
        if ins.backoff and self._trouble is not None:
            self.backoff.say(self._trouble, redact(self.config.url), ins.until - now)
        if ins.until > now:
            time.sleep(ins.until - now)
        return Tick(time.monotonic())

    def _recovered(self, ins: Recovered) -> None:
        self._trouble = None
        self.backoff.ok()

    def _published(self, ins: Publish) -> None:
        self._publish()                    # the counters, once a batch (the supervisor reads them once a second)
        evicted = self.cache.drain_evicted()
        if evicted:
            self.storage.lease.advertise(self.name, removed=evicted)

    def _exit(self, ins: Exit) -> None:
        self._shutdown()

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

    # -- running a task ------------------------------------------------------------------
    def _hold(self, batch: list[bytes]) -> None:
        """Tell the supervisor what this process holds: ``batch``, the tasks of its open
        partials and what its outbox keeps to send again (their leases must outlive the
        reconcile), and how many its partials cover."""
        merged = self.partials.held()
        self.shared.set_held(batch + merged + self.outbox.held())
        self.shared.set_counters(merged=len(merged))

    def _run_frame(self, frame: bytes, token: bytes | None) -> tuple[int, float | None]:
        """Verify a frame (signature; its map's liveness token, nonce and expiry; function
        hash) and run it. ``token`` is the map's token from the take (None: an idle
        worker's wake-up, whose lease reply brings it: read while the frame is verified, and
        always before the task runs: a map that ended has its signed end there). Returns how
        it ended (:mod:`worker.loopevents`) and the seconds its user code took (or None)."""
        ref = protocol.frame_ref(frame)
        map_id, index = (ref.map_id, ref.index) if ref else (None, None)
        if not protocol.is_task_frame(frame):
            if token is None:
                self.storage.lease.leased_token()
            self._problem(f"worker {self.name} dropped {len(frame)} bytes from a queue that are "
                          f"not a task frame: {frame[:40]!r}")
            return DROPPED, None
        tid = protocol.task_id(frame)
        try:
            task = protocol.unpack_task(self.key, frame)
        except protocol.BadFrame as err:
            if token is None:
                self.storage.lease.leased_token()
            self._problem(f"worker {self.name} refused task {index} of map {map_id}: {err}")
            self.storage.lease.release(self.name, [tid])
            return self._system_error(map_id, index, tid, f"refused by worker {self.name}: {err}",
                                      kind=messages.FaultKind.BAD_FRAME), None
        if token is None:                  # never run before the map's current token is judged:
            token, self._broker_ms = self.storage.lease.leased_token()   # its signed end may be there
        refused = self._refused(task, tid, token, self._broker_ms)
        if refused is not None:
            return refused, None
        if self.partials.holds(task.ref):  # sent again (a broker restart lost its lease): it is
            # folded here already, leased here again, and goes in with the partial; never run twice
            log.info("worker %s: task %s is already in its partial; not run again", self.name, task.ref)
            return AGAIN, None
        try:
            fn = self.functions.get(task.fn_hash, task.map_id)
        except SystemFault as fault:
            return self._system_error(task.map_id, task.index, tid, str(fault), kind=fault.kind), None
        return self._run_task(fn, task, tid)

    def _refused(self, task: protocol.Task, tid: bytes, token: bytes, broker_ms: int) -> int | None:
        """None if the task's map is alive (:mod:`worker.tokens`); if not, the refusal is
        reported (once per map and kind) and sent as the task's result (REFUSED), or the
        task dropped (DROPPED: the map is gone, nothing to say)."""
        refusal = self.tokens.judge(task, token, broker_ms)
        if refusal is None:
            return None
        if refusal.kind is None:
            return DROPPED
        if refusal.report:
            self._problem(refusal.message)
        self.storage.lease.release(self.name, [tid])
        return self._system_error(task.map_id, task.index, tid, refusal.message, kind=refusal.kind)

    def _run_task(self, fn, task: protocol.Task, tid: bytes) -> tuple[int, float]:
        """Run one verified task (its map's token judged) and keep its signed result for the
        next take (or fold it into its map's partial); how it ended, and its seconds."""
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
        meta = messages.ResultMeta(worker=self.name, host=self.host, pid=self.pid, start=t0, stop=t1,
                                   incarnation=self.incarnation, bytes_cache=self.ctx.bytes_from_cache,
                                   bytes_disk=self.ctx.bytes_from_disk,
                                   bytes_file=self.ctx.bytes_from_file, events=events_of(arg),
                                   files_opened=self.ctx.files_opened, reads=self.ctx.reads_text(arg))
        outcome = RESULT
        if status == protocol.OK and isinstance(fn, MergePlan) and self.partials.fold(fn, ref, value, meta):
            part = self.partials.open.get(ref.map_id)     # (a fold that raised leaves the value alone)
            outcome = FOLDED_RESULT if part is not None and ref.index in part.covered else ALONE
        else:
            status, payload = pack_result(status, value, meta, arg, self.settings.max_result_bytes,
                                          self.storage.lease.bulk_limits, dumps=self.dumps)
            self.outbox.frames.append((ref.map_id, tid, protocol.pack_result(self.key, ref.map_id, ref.index,
                                                                          status, payload)))
        self.tasks_done += 1
        self.errors += status != protocol.OK
        self.bytes_from_file += self.ctx.bytes_from_file
        self.bytes_from_cache += self.ctx.bytes_from_cache
        self.shared.set_task(None)
        if self.ctx.routing_keys:
            self.storage.lease.advertise(self.name, added=self.ctx.routing_keys,
                                   tier=self.cache.disk.tier if self.cache.disk is not None else "")
        return outcome, t1 - t0

    def _publish(self) -> None:
        disk = self.cache.disk
        self.shared.set_counters(disk_bytes=disk.nbytes if disk is not None else 0,
                                 disk_limit=disk.size_limit if disk is not None else 0,
                                 tasks_done=self.tasks_done, errors=self.errors, cache_bytes=self.cache.nbytes,
                                 cache_entries=len(self.cache), cache_limit=self.cache.limit_bytes,
                                 bytes_read=self.bytes_from_file, bytes_from_cache=self.bytes_from_cache,
                                 merged=self.partials.count)

    def _system_error(self, map_id: str | None, index: int | None, tid: bytes, message: str,
                      kind: messages.FaultKind) -> int:
        """The task's fault goes to its client as its result (REFUSED); DROPPED when the frame
        names no task."""
        if map_id is None or index is None:
            return DROPPED
        payload = messages.Fault(kind, message, worker=self.name).encode()
        self.outbox.frames.append((map_id, tid, protocol.pack_result(self.key, map_id, index,
                                                                  protocol.SYSTEM_ERROR, payload)))
        return REFUSED

    def _problem(self, message: str) -> None:
        log.warning(message)
        try:
            self.storage.report(message)
        except BrokerTrouble:
            pass
