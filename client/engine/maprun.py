"""One map in flight on the client: the driver of its state through Redis.

This is the engine under :func:`client.remote_map`; analysts use the functions in
:mod:`client.api`. A :class:`MapRun` holds no per-task state of its own: that is its
:class:`~client.engine.state.MapState`. The driver packs and queues the tasks, turns
what Redis answers (result frames, worker statuses, the audit, upkeep's findings) into
events for the state (:meth:`MapRun.apply`), and carries out the instructions the state
returns (queue these tasks, upload the function, take a queue back, end the map). It
owns its map's keys in Redis and deletes them when the map ends, however it ends.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from typing import Iterable, Sequence

from ...broker.wire import messages, protocol
from ...broker.errors import BrokerOutOfMemory, BrokerTrouble, ConnectionProblem
from ...broker.wire.merge import decode_partial, partial_depth
from ...broker.wire.messages import Fault, TaskError
from ...broker.registry import renew_map_entry
from ...broker.storage import Storage
from ..errors import BrokerFull, BrokerLost, describe, undecodable_error
from . import beacon
from .events import (Cancel, CancelMap, Enqueue, Faulted, Finish, NoteError, Observed, Partial, Raised,
                     Report, Result, Results, TakeBack, Tick, Undecodable, Unverifiable)
from .feed import MapFeed
from .interrupts import held_interrupt
from .lifecycle import Close, EndSigned, KeysDropped, Removed, Sending, Unsent
from .invariants import validate
from .merged import function_to_send
from .options import MapOptions
from .packing import Frames, pack_function
from .refused import refused_start
from .retry import RetryPolicy
from .routing import owners
from .state import MapState
from .upkeep import Upkeep

log = logging.getLogger("rhtc.client")

SUBMIT_BATCH = 65536     # tasks packed and queued per round trip (bounds the client's memory)
_OK, _MERGED, _SYSTEM_ERROR = protocol.OK, protocol.MERGED, protocol.SYSTEM_ERROR


class MapRun:
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
        self.straggler_factor = options.stragglers
        self.task_timeout = options.task_timeout
        self.sample_metrics = metrics
        sent = function_to_send(fn, reduce, options, self.settings.merge_tasks,
                                lambda: max(self.settings.merge_seconds, storage.pool.worker_count() / self.settings.merge_rate),
                                self.settings.merge_fanin)
        self.packed_fn = pack_function(self.key, sent, self.label)
        self.merging = sent is not fn                   # workers fold results into partials
        self.fn_hash = protocol.function_hash(self.packed_fn)
        self.routing = options.routing and any(getattr(a, "routing_key", None) for a in args)
        policy = RetryPolicy(options.retries, options.retry_on, self.settings.max_attempts, self.settings.retry_delay)
        self.state = MapState(self.n, self.map_id, policy, fingerprint=self.fingerprint, merging=self.merging,
                              describe=self.describe_argument, now=time.time())
        self.feed = MapFeed(self)                       # the dashboard's view of the map
        self.start = self.end = None
        self.routed_to_workers = 0
        self.frames_read = self.bytes_read = self.tree_depth = 0   # what the map's results cost it
        self._starting: dict[str | None, list[int]] | None = None   # while it starts: where it sent which task
        self._applying = threading.RLock()              # one event at a time (apply)
        self.upkeep = Upkeep(self)
        self.frames = Frames(self.key, self.map_id, self.nonce, self.fn_hash, args, max_task_bytes)
        self.frames.check(range(min(self.n, SUBMIT_BATCH)))   # fail fast on an unpicklable argument

    def describe_argument(self, index: int) -> str:
        return describe(self.args[index])

    # -- what the map shows (read from its state) -----------------------------------------
    tasks = property(lambda self: self.state.tasks)
    ledger = property(lambda self: self.state.ledger)
    cancelled = property(lambda self: self.state.cancelled)
    cancelled_by = property(lambda self: self.state.cancelled_by)
    closed = property(lambda self: self.state.life.closed, doc="Cancelled, or closed by its caller.")
    done = property(lambda self: self.state.done, doc="Every task answered, or the map cancelled. O(1).")
    unfinished = property(lambda self: self.state.tasks.unfinished)
    resubmissions = property(lambda self: self.state.resubmissions)
    partials_accepted = property(lambda self: self.state.partials_accepted)
    partials_refused = property(lambda self: self.state.partials_refused)
    in_partial = property(lambda self: self.state.in_partial)
    metric_samples = property(lambda self: self.upkeep.metric_samples)

    @property
    def metas(self) -> list[dict]:
        """Each finished task's metadata (worker, times, bytes, error), in arrival order."""
        return list(self.state.ledger.metas())

    def validate(self) -> None:
        """Raise :class:`~client.engine.invariants.InvariantBroken` if the state's containers disagree."""
        validate(self.state)

    # -- events in, instructions out --------------------------------------------------------
    def apply(self, event) -> None:
        """Hand ``event`` to the map's state and carry out what it returns: one event at a
        time (a handle's collecting thread and the caller's cancel both send events)."""
        with self._applying:
            self._carry_out(self.state.handle(event))

    def _carry_out(self, instructions: list) -> None:
        for ins in instructions:
            kind = type(ins)
            if kind is Enqueue:
                try:
                    for lo in range(0, len(ins.indices), SUBMIT_BATCH):
                        self._enqueue(ins.indices[lo:lo + SUBMIT_BATCH], route=ins.route, fair=ins.fair,
                                      upload=ins.upload)
                except BrokerOutOfMemory as err:
                    raise BrokerFull.refused(self.storage.config, *self.memory(),
                                             f"map {self.map_id} could not queue its tasks") from err
            elif kind is NoteError:
                self.feed.note_error(ins.index, ins.error)
            elif kind is Report:
                log.log(logging.WARNING if ins.level == "warning" else logging.INFO, "%s", ins.message)
                if ins.broker:
                    self.storage.report(ins.message)
            elif kind is TakeBack:
                self.storage.pool.take_back_queue(ins.worker)
            elif kind is CancelMap:
                self._cancel_in_broker(ins.by)
            elif kind is Finish:
                self._finish()
            else:                                     # pragma: no cover (a new instruction unhandled)
                raise TypeError(f"map {self.map_id}: no driver for the instruction {ins!r}")

    # -- submitting ---------------------------------------------------------------------
    def submit(self, wait_first: float = 0.0) -> None:
        """Queue every task; with ``wait_first``, also wait that long for the first result
        in the same round trip (what makes a one-task map fast)."""
        self.start = time.time()
        try:
            self.upkeep.look()
            beacon.attach(self)           # its tasks are dropped soon after this process dies
            self._starting = {}
            try:
                for lo in range(0, self.n, SUBMIT_BATCH):
                    early = self._enqueue(range(lo, min(self.n, lo + SUBMIT_BATCH)), wait_first if lo == 0 else 0.0)
                    for frame in early:
                        self._accept(frame)
                if not wait_first:        # a map that may run long: its registry entry expires
                    renew_map_entry(self.storage, self.map_id)    # if this client dies (ticks renew it)
            except BrokerOutOfMemory as err:       # any write of its start (which one is luck)
                full, removed = refused_start(self, self._starting)
                if removed and self.state.life.in_broker:  # (nothing of it there: its cancel has nothing to do)
                    self.apply(Unsent())
                raise full from err
            self._starting = None
        except BaseException:             # Ctrl-C, or an argument of a later batch could not
            if self.state.life.in_broker:    # travel: what was queued is taken back
                self.cancel()
            else:
                beacon.detach(self)
            raise
        if not self.n:
            self.apply(Tick(time.time()))                 # nothing to wait for: it ends now
        self.upkeep.schedule()

    def _enqueue(self, indices: Iterable[int], wait_first: float = 0.0, route: bool = True,
                 fair: bool = True, upload: bool = False) -> list[bytes]:
        """Write tasks ``indices`` (and the function: the map's first write, when ``upload``,
        when it is small, or when the broker lacks it)."""
        indices = list(indices)
        state = self.state
        route = route and self.routing
        owner, home = owners(self.args, indices, locate=self.storage.pool.locate, route=route,
                             avoid=state.misfits | state.shunned,
                             good=state.good_workers() if state.misfits else None)   # a mixed pool
        if route:
            self.routed_to_workers = len(home)
        routed: dict[str | None, list[bytes]] = {}
        held: dict[str, list[bytes]] = {}         # (a thief leaves these to their owner)
        for i in indices:
            (held if i in home else routed).setdefault(owner.get(i), []).append(self.frames[i])
            if self._starting is not None:        # (refused or not: the broker may have queued it)
                self._starting.setdefault(owner.get(i), []).append(i)
        upload = upload or not state.life.in_broker or len(self.packed_fn) < 65536 or \
            not self.storage.maps.function_present(self.fn_hash)
        with held_interrupt():            # queued whole (and its reply read) or not at all
            self.apply(Sending())
            early = self.storage.maps.enqueue(self.map_id, self.fn_hash, self.packed_fn if upload else None,
                                             self._info(), routed, wait_first=wait_first, nonce=self.nonce,
                                             client=beacon.client_id(), fair=fair, home=held)
        return early

    def _info(self) -> dict:
        v = protocol.versions()
        return {"n": self.n, "label": self.label, "client": f"{socket.gethostname()}:{os.getpid()}",
                "started": self.start, "python": v["python"], "cloudpickle": v["cloudpickle"],
                "key_fingerprint": self.fingerprint}

    def memory(self) -> tuple[int, int]:
        """(used, maxmemory) bytes of the broker; (0, 0) when it cannot say."""
        return self.storage.memory_or_none()

    # -- collecting ---------------------------------------------------------------------
    def poll(self, timeout: float):
        """New results (each index at most once), waiting up to ``timeout`` for the first."""
        state = self.state
        if state.cancelled:
            return state.take()
        deadline = time.monotonic() + max(0.0, timeout)
        lost_since = None
        out = state.take()
        while not state.tasks.finished:
            try:
                if self.upkeep.due():
                    self.upkeep.tick()
                    out += state.take()
                now = time.time()
                if state.retries.next_due <= now:
                    self.apply(Tick(now))
                mono = time.monotonic()
                wait = 0.0 if out else max(0.0, min(deadline, self.upkeep.next_tick,
                                                     mono + state.retries.next_due - now) - mono)
                frames = self.storage.maps.fetch_results(self.map_id, timeout=wait)
                lost_since = None
            except ConnectionProblem as err:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > self.settings.broker_patience:
                    raise BrokerLost(f"the broker {self.storage.config!r} has been unreachable for "
                                     f"{self.settings.broker_patience:.0f} s during map {self.map_id}: "
                                     f"{err}") from err
                time.sleep(0.5)
                continue
            self._accept_all(frames)
            out += state.take()
            if out or time.monotonic() >= deadline:
                break
        return out + state.take() if state.tasks.finished else out

    def _accept_all(self, frames: list[bytes]) -> None:
        """Frames from the map's result list, as events for its state: the OK results of
        a run of frames go as one :class:`Results` event (in order with the others)."""
        batch: list = []
        for frame in frames:
            self._accept(frame, batch)
        self._flush(batch)

    def _flush(self, batch: list) -> None:
        if batch:
            self.apply(Results(batch[:], time.time()))
            batch.clear()

    def _accept(self, frame: bytes, batch: list | None = None) -> None:
        """One frame from the map's result list, as an event for its state (an OK result
        appended to ``batch`` instead, when given)."""
        self.frames_read += 1
        self.bytes_read += len(frame)
        by = messages.cancelled_by(frame)
        if by is not None:                # `rhtc cancel` from another shell
            log.warning("map %s (%s) cancelled by %s", self.map_id, self.label, by)
            self._flush(batch or [])
            self.apply(Cancel(time.time(), by))
            return
        try:
            map_id, index, status, payload = protocol.unpack_result(self.key, frame)
        except protocol.BadFrame as err:
            self._flush(batch or [])
            self._unverifiable(frame, err)
            return
        if map_id != self.map_id:
            return
        state = self.state
        if status == _OK and 0 <= index < self.n and not state.tasks.is_final(index):
            meta, packed = messages.decode_result(payload)
            try:
                value = protocol.loads(packed)
            except Exception as err:      # pickled with something this client lacks
                self._flush(batch or [])
                self.apply(Undecodable(index, undecodable_error(index, meta, err, state.workers.get(meta.worker),
                                                                self.describe_argument(index)), meta, time.time()))
                return
            if batch is None:
                self.apply(Result(index, value, meta, time.time()))
            else:
                batch.append((index, value, meta))
            return
        self._flush(batch or [])
        now = time.time()
        if status == _MERGED:             # several tasks: all counted once, or none
            indices, metas, packed = decode_partial(payload)
            self.tree_depth = max(self.tree_depth, partial_depth(payload))
            self.apply(Partial(indices, metas, lambda: protocol.loads(packed), now))
            return
        if not 0 <= index < self.n or state.tasks.is_final(index):
            return                        # a duplicate: not even decoded
        if status == _SYSTEM_ERROR:
            self.apply(Faulted(index, Fault.decode(payload), now))
            return
        meta, packed = messages.decode_result(payload)
        try:
            value = protocol.loads(packed)
        except Exception as err:          # pickled with something this client lacks
            self.apply(Undecodable(index, undecodable_error(index, meta, err, state.workers.get(meta.worker),
                                                            self.describe_argument(index)), meta, now))
            return
        self.apply(Raised(index, TaskError.from_wire(value), meta, now))   # USER_ERROR

    def _unverifiable(self, frame: bytes, err: Exception) -> None:
        """A frame for our map that we cannot verify: a worker holding another key took the task."""
        ref = protocol.frame_ref(frame)
        if ref is None or ref.map_id != self.map_id:
            log.warning("map %s: dropped a result that failed verification: %s", self.map_id, err)
            return
        if not self.state.workers:        # before the first tick: learn who holds which key
            self.apply(Observed(self.storage.pool.worker_statuses(queue_depths=False), time.time()))
        self.apply(Unverifiable(ref.index, str(err), time.time()))

    # -- ending -------------------------------------------------------------------------
    def _finish(self) -> None:
        """Every task answered: sign the map's end, check its state, keep its lost runs."""
        self.end = time.time()
        # every result is read: the keys go in the end's own write, and the runs lost with
        # their process come back in its reply (read with the next command's, or when the
        # record is asked for: settle), whatever the map's length, with no round trip on the
        # map's return. (It used to read them only for maps over 0.5 s, "a restart takes
        # longer", and a short map's crashed run was missing from its record; then in a
        # round trip of its own at every map's end: 0.23 ms of a 1.1 ms one-task map.)
        self._sign_end(drop=True)
        if self.state.life.may_drop_keys:     # the end was not written: read them now
            self.state.ledger.read_lost_runs(self.storage, self.map_id)
            self._drop()
        if self.settings.check_invariants:
            self.validate()
        self.feed.flush(later=True)    # off the map's path: no round trip

    def settle(self) -> None:
        """Read what the broker still owes this client's hot lane: the runs lost with their
        process, which come with the reply of the write that ended the map."""
        self.storage.maps.settle()

    def cancel(self) -> int:
        """Remove the map's queued tasks and keys; returns how many queued tasks were dropped.
        A map already ended (cancelled, or closed) stays as it is (returns 0)."""
        if self.closed:
            return 0
        self.apply(Cancel(time.time()))
        return self.state.life.removed

    def _cancel_in_broker(self, by: str | None) -> None:
        beacon.detach(self)
        if self.state.life.in_broker:
            try:
                with held_interrupt():           # a Ctrl-C now would leave the keys behind
                    removed = self.storage.maps.cancel(self.map_id)
                self.apply(Removed(removed))
            except BrokerTrouble:                # unreachable, or refusing (out of memory):
                pass                             # the keys expire by themselves
        self._sign_end()

    def close(self) -> None:
        """Delete the map's keys (results already read)."""
        with self._applying:
            if self.closed:
                return
            self.apply(Close())
            beacon.detach(self)
            life, unfinished = self.state.life, self.state.tasks.unfinished
            try:
                if unfinished and life.in_broker:
                    self.apply(Removed(self.storage.maps.cancel(self.map_id)))
                elif life.may_drop_keys:
                    self._drop()
            except ConnectionProblem:
                pass
            self._sign_end(drop=not unfinished)

    def _sign_end(self, drop: bool = False) -> None:
        """Sign the map's end in its token's place: workers refuse its frames from now on.
        ``drop``: and delete its keys in the same write (every result is read). Once: the
        map's state says whether it is still to do (:mod:`client.engine.lifecycle`)."""
        if not self.state.life.may_sign_end:
            return
        signed = False
        try:
            self.storage.maps.sign_end(self.map_id, self.nonce, drop=drop,
                                       lost_runs=self.state.ledger.note_lost_runs if drop else None)
            signed = True
        except BrokerTrouble:
            pass
        finally:
            self.apply(EndSigned(dropped=drop and signed))

    def _drop(self) -> None:
        """Delete the map's keys, without waiting for the reply (``Storage.end_map``)."""
        if self.state.life.may_drop_keys:
            self.apply(KeysDropped())
            self.storage.maps.end(self.map_id, lazy=True)
