"""One map in flight on the client: pack, route, submit, collect, recover, clean up.

This is the engine under :func:`client.remote_map`; analysts use the functions in
:mod:`client.api`. A :class:`MapRun` owns its map's keys in Redis and deletes them
when it ends, however it ends.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import socket
import time
from typing import Any, Sequence

from rhtc.broker import protocol
from rhtc.broker.storage import BrokerRefused, ConnectionProblem, Storage, is_out_of_memory
from rhtc.client.errors import BrokerFull, BrokerLost, RemoteError, describe
from rhtc.client.upkeep import BROKER_PATIENCE, TICK_SECONDS, Upkeep

log = logging.getLogger("rhtc.client")



@dataclasses.dataclass
class TaskResult:
    """One task's outcome: its index in the map, value or error, and the worker's metadata."""

    index: int
    value: Any
    meta: dict
    error: RemoteError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _contiguous_blocks(indices: list[int], workers: list[str]) -> dict[int, str]:
    """Place chunks nobody holds yet: consecutive chunks (mostly of the same file) go to
    the same worker, so each worker opens few files; idle workers steal from the tails
    of the others' queues, so a slow worker cannot hold the map up."""
    if len(indices) < 2 * len(workers):
        return {}                     # too few to split: the shared queue balances best
    block = -(-len(indices) // len(workers))
    return {i: workers[k // block] for k, i in enumerate(indices)}


class MapRun:
    """Submit ``fn`` over ``args`` and collect the results, exactly once each."""

    def __init__(self, storage: Storage, fn, args: Sequence, *, retries: int = 0,
                 retry_on: tuple | None = None, routing: bool = True,
                 max_task_bytes: int = protocol.MAX_TASK_BYTES, label: str | None = None,
                 stragglers: float | None = 3.0, metrics: bool = True):
        self.storage = storage
        self.key = storage.config.key
        self.map_id = secrets.token_hex(8)
        self.nonce = protocol.new_nonce()
        self.fn = fn
        self.label = label or getattr(fn, "__name__", type(fn).__name__)
        self.n = len(args)
        self.retries = retries
        self.retry_on = retry_on
        self.straggler_factor = stragglers
        self.sample_metrics = metrics
        self.metric_samples: list[dict] = []
        self.backups: set[int] = set()
        self._durations: list[float] = []
        self._last_progress = time.monotonic()
        self.packed_fn = self._pack_function(fn)
        self.fn_hash = protocol.function_hash(self.packed_fn)
        self.frames = [self._pack_argument(i, a, max_task_bytes) for i, a in enumerate(args)]
        self.routing_keys = [getattr(a, "routing_key", None) for a in args] if routing else [None] * self.n
        self._args = args
        self.pending = set(range(self.n))
        self.rejected: dict[int, RemoteError] = {}  # provisional: a genuine result may still come
        self.user_attempts: dict[int, int] = {}
        self.system_attempts: dict[int, int] = {}
        self.start = self.end = None
        self.metas: list[dict] = []
        self.routed_to_workers = 0
        self.resubmissions = 0
        self.cancelled = self.closed = False
        self._next_tick = 0.0
        self.upkeep = Upkeep(self)
        self._fn_uploaded = False
        self._early: list[bytes] = []


    # -- packing ----------------------------------------------------------------------
    def _pack_function(self, fn) -> bytes:
        if not callable(fn):
            raise TypeError(f"remote_map needs a function as its first argument, got {describe(fn)}")
        try:
            return protocol.sign(self.key, protocol.dumps(fn))
        except Exception as err:
            raise TypeError(f"cannot pickle the function {self.label!r} to send it to the workers "
                            f"({type(err).__name__}: {err}). Functions that hold open files, locks, "
                            "sockets or generators cannot travel: open them inside the function.") from err

    def _pack_argument(self, index: int, arg, limit: int) -> bytes:
        try:
            packed = protocol.dumps(arg)
        except Exception as err:
            raise TypeError(f"cannot pickle argument {index} ({type(arg).__name__}: {describe(arg)}): "
                            f"{type(err).__name__}: {err}") from err
        if len(packed) > limit:
            raise ValueError(
                f"argument {index} ({type(arg).__name__}) is {len(packed) / 1e6:.1f} MB after "
                f"compression, over the {limit / 1e6:.0f} MB limit per task: pass file paths and "
                "entry ranges (make_chunks) and let the worker read the data, not the data itself")
        return protocol.sign(self.key, protocol.pack_task_body(self.map_id, index, self.nonce, self.fn_hash, packed))

    # -- submitting ---------------------------------------------------------------------
    def submit(self, wait_first: float = 0.0) -> None:
        """Queue every task; with ``wait_first``, also wait that long for the first result
        in the same round trip (what makes a one-task map fast)."""
        self.start = time.time()
        self._early = self._enqueue(range(self.n), wait_first)
        self._next_tick = time.monotonic() + TICK_SECONDS

    def _enqueue(self, indices, wait_first: float = 0.0, route: bool = True) -> list[bytes]:
        indices = list(indices)
        routed: dict[str | None, list[bytes]] = {}
        keys = [self.routing_keys[i] for i in indices if self.routing_keys[i]] if route else []
        where, live = self.storage.locate(keys) if keys else ({}, [])
        owner = {i: where[self.routing_keys[i]] for i in indices
                 if self.routing_keys[i] and self.routing_keys[i] in where}
        self.routed_to_workers = len(owner)
        if keys and live:
            owner.update(_contiguous_blocks([i for i in indices if self.routing_keys[i] and i not in owner],
                                            sorted(live)))
        for i in indices:
            routed.setdefault(owner.get(i), []).append(self.frames[i])
        upload = not self._fn_uploaded or len(self.packed_fn) < 65536 or \
            not self.storage.function_present(self.fn_hash)
        try:
            early = self.storage.enqueue_map(self.map_id, self.fn_hash, self.packed_fn if upload else None,
                                             self._info(), routed, wait_first=wait_first,
                                             nonce=self.nonce)
        except BrokerRefused as err:
            if not is_out_of_memory(err):
                raise
            used, limit = self._memory()
            raise BrokerFull(f"the broker {self.storage.config!r} is out of memory ({used / 1e6:.0f} MB "
                             f"used of maxmemory {limit / 1e6:.0f} MB): map {self.map_id} could not "
                             "queue its tasks, nothing was sent. Free memory in Redis (other maps' "
                             "unread results?), raise its maxmemory, or send fewer/smaller tasks.") from err
        self._fn_uploaded = True
        return early

    def _info(self) -> dict:
        v = protocol.versions()
        return {"n": self.n, "label": self.label, "client": f"{socket.gethostname()}:{os.getpid()}",
                "started": self.start, "python": v["python"], "cloudpickle": v["cloudpickle"]}

    def _requeue(self, indices, route: bool = True) -> None:
        self.resubmissions += len(indices)
        self._enqueue(indices, route=route)

    def _memory(self) -> tuple[int, int]:
        try:
            return self.storage.memory()
        except Exception:
            return 0, 0

    # -- collecting ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Nothing more to wait for: every task answered (or provisionally refused), or
        the map was cancelled."""
        return self.cancelled or not (self.pending - set(self.rejected))

    def poll(self, timeout: float) -> list[TaskResult]:
        """New results (each index at most once), waiting up to ``timeout`` for the first."""
        out: list[TaskResult] = []
        if self.done and not self._early and not self.rejected:
            return out
        if self._early:
            for frame in self._early:
                r = self._accept(frame)
                if r is not None:
                    out.append(r)
            self._early = []
            if self.done:
                self.end = time.time()
                return out
        deadline = time.monotonic() + max(0.0, timeout)
        lost_since = None
        while True:
            try:
                if time.monotonic() >= self._next_tick:
                    out += self.upkeep.tick()
                wait = min(max(0.0, deadline - time.monotonic()), max(0.0, self._next_tick - time.monotonic()))
                frames = self.storage.fetch_results(self.map_id, timeout=wait if not out else 0)
                lost_since = None
            except ConnectionProblem as err:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > BROKER_PATIENCE:
                    raise BrokerLost(f"the broker {self.storage.config!r} has been unreachable for "
                                     f"{BROKER_PATIENCE:.0f} s during map {self.map_id}: {err}") from err
                time.sleep(0.5)
                continue
            for frame in frames:
                r = self._accept(frame)
                if r is not None:
                    out.append(r)
            if out or self.done or time.monotonic() >= deadline:
                break
        if self.done and self.rejected:
            for i, err in sorted(self.rejected.items()):
                self.pending.discard(i)
                out.append(TaskResult(i, None, {}, err))
            self.rejected.clear()
        if self.done and self.end is None:
            self.end = time.time()
        return out

    def _accept(self, frame: bytes) -> TaskResult | None:
        try:
            map_id, index, status, payload = protocol.unpack_result(self.key, frame)
        except protocol.BadFrame as err:
            log.warning("dropped a result of map %s that failed verification: %s", self.map_id, err)
            return None
        if map_id != self.map_id or index not in self.pending:
            return None                        # a duplicate (a slow worker's second copy)
        if status == protocol.SYSTEM_ERROR:
            return self._system_error(index, json.loads(payload))
        meta_obj, packed_value = protocol.decode_result(payload)
        value, meta = protocol.loads(packed_value), meta_obj.to_dict()
        if status == protocol.USER_ERROR:
            attempts = self.user_attempts.get(index, 0)
            if attempts < self.retries and self._retryable(value):
                self.user_attempts[index] = attempts + 1
                self._requeue([index])
                return None
            err = self._remote_error(index, value, meta)
            self.pending.discard(index)
            self.rejected.pop(index, None)
            self.metas.append(dict(meta, index=index, error=f"{err.remote_type}: {err.message}"[:200],
                                   retries=attempts, received=time.time()))
            self._last_progress = time.monotonic()
            return TaskResult(index, None, meta, err)
        self.pending.discard(index)
        self.rejected.pop(index, None)
        self.metas.append(dict(meta, index=index, error=None, retries=self.user_attempts.get(index, 0),
                               received=time.time(), backup=index in self.backups))
        if "start" in meta and "stop" in meta:
            self._durations.append(meta["stop"] - meta["start"])
        self._last_progress = time.monotonic()
        return TaskResult(index, value, meta)

    def _retryable(self, info: dict) -> bool:
        if not self.retry_on:
            return True
        names = {t if isinstance(t, str) else t.__name__ for t in self.retry_on}
        if info.get("type") in names:
            return True
        try:
            exc = protocol.loads_plain(info["exception"]) if info.get("exception") else None
        except Exception:
            exc = None
        types = tuple(t for t in self.retry_on if isinstance(t, type))
        return bool(exc is not None and types and isinstance(exc, types))

    def _remote_error(self, index: int, info: dict, meta: dict) -> RemoteError:
        exc = None
        if info.get("exception"):
            try:
                exc = protocol.loads_plain(info["exception"])
            except Exception:
                exc = None
        return RemoteError(index, info.get("type", "Error"), info.get("message", ""),
                           info.get("traceback", ""), worker=meta.get("worker"), host=meta.get("host"),
                           argument=info.get("argument"), exception=exc)

    def _system_error(self, index: int, info: dict) -> TaskResult | None:
        kind, message, worker = info.get("kind"), info.get("message", ""), info.get("worker")
        if kind == "missing-function":
            n = self.system_attempts.get(index, 0)
            if n < 3:
                self.system_attempts[index] = n + 1
                self._fn_uploaded = False
                self._requeue([index])
                return None
        err = RemoteError(index, "WorkerRefused" if kind == "bad-frame" else "WorkerError", message,
                          worker=worker, argument=describe(self._args[index]))
        if kind == "bad-frame":
            self.rejected[index] = err         # a forged copy must not beat the real task
            return None
        self.pending.discard(index)
        self.metas.append({"index": index, "worker": worker, "error": f"{kind}: {message}"[:200]})
        return TaskResult(index, None, {"worker": worker}, err)

    # -- ending -------------------------------------------------------------------------
    def cancel(self) -> int:
        """Remove the map's queued tasks and keys; returns how many queued tasks were dropped."""
        self.cancelled = True
        try:
            removed = self.storage.cancel_map(self.map_id)
        except ConnectionProblem:
            removed = 0                          # the keys expire by themselves
        self.closed = True
        return removed

    def close(self) -> None:
        """Delete the map's keys (results already read)."""
        if not self.closed:
            self.closed = True
            try:
                if self.pending:
                    self.storage.cancel_map(self.map_id)
                else:
                    self.storage.end_map(self.map_id, lazy=True)
            except ConnectionProblem:
                pass
