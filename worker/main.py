"""The worker process: take tasks (own queue, then shared queue, then steal), run them one
at a time, hand in signed results, heartbeat, and never lose a task.

    >>> from rhtc.worker.main import Worker          # doctest: +SKIP
    >>> Worker(config, name="w1").run()          # doctest: +SKIP
"""
from __future__ import annotations

import collections
import json
import logging
import os
import signal
import socket
import threading
import time
import traceback

import cloudpickle

from rhtc.broker import context, protocol
from rhtc.broker.config import BrokerConfig, redact
from rhtc.broker.storage import (HEARTBEAT_SECONDS, BrokerRefused, ConnectionProblem, Storage,
                            is_out_of_memory)
from rhtc.worker.cache import BranchCache
from rhtc.worker.memory import tune_malloc
from rhtc.worker.metrics import NodeMetrics

log = logging.getLogger("rhtc.worker")

MAX_RESULT_BYTES = int(os.environ.get("RHTC_MAX_RESULT_BYTES", str(64 * 1024 * 1024)))
BATCH_SECONDS = 0.005      # take as many tasks as fit in this much time (fast tasks only)


class HandBack(BaseException):
    """Raised inside the user's function by SIGTERM: the task goes back to the queue."""


def default_name() -> str:
    return f"{socket.gethostname().split('.')[0]}-{os.getpid()}"


class Worker:
    """One worker: a loop over its own queue and the shared queue."""

    def __init__(self, config: BrokerConfig, name: str | None = None,
                 cache_bytes: int = 4_000_000_000, max_batch: int = 64):
        self.config = config
        self.name = name or default_name()
        if ":" in self.name or " " in self.name:
            raise ValueError(f"worker name {self.name!r} must not contain ':' or spaces")
        self.key = config.key
        self.storage = Storage(config)
        self.hb_storage = Storage(config)          # the heartbeat thread's own connection
        self.cache = BranchCache(cache_bytes)
        self.metrics = NodeMetrics()
        self.functions: collections.OrderedDict[str, object] = collections.OrderedDict()
        self.max_batch = max_batch
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.stopping = False
        self._in_user_code = False
        self._task_label: str | None = None
        self._task_started: float | None = None
        self._unflushed: list[tuple[str, bytes, bytes]] = []
        self._ewma = 1.0                            # seconds per task, for batch sizing
        self.tasks_done = self.errors = 0
        self.bytes_from_file = self.bytes_from_cache = 0     # totals, for `rhtc status`
        self.started = time.time()
        self._hb_stop = threading.Event()
        self.ctx = context.TaskContext(worker=self.name, cache=self.cache)
        context.current = self.ctx
        tune_malloc()

    # -- lifecycle ---------------------------------------------------------------------
    def run(self) -> int:
        """Serve tasks until SIGTERM/SIGINT; returns the exit code (0)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self._connect_with_backoff()
        hb = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        hb.start()
        log.info("worker %s serving %s (namespace %s)", self.name, redact(self.config.url),
                 self.config.namespace)
        backoff = 0.1
        while not self.stopping:
            try:
                batch = self._take()
                if not batch:           # nothing queued for us: help a backed-up worker
                    stolen = self.storage.steal(self.name)
                    batch = [stolen] if stolen else []
                if not batch:
                    frame = self.storage.wait_for_task(self.name, timeout=1.0)
                    batch = [frame] if frame else []
                if batch:
                    self._run_batch(batch)
                backoff = 0.1
            except HandBack:
                break
            except ConnectionProblem as err:
                log.warning("worker %s lost the broker (%s); retrying in %.1f s", self.name, err, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
            except BrokerRefused as err:
                if not is_out_of_memory(err):
                    raise
                # Redis is full: keep the results, wait for the client to drain or the
                # operator to free memory, never drop anything
                log.warning("worker %s: the broker is out of memory (maxmemory); holding %d "
                            "result(s), retrying in %.1f s", self.name, len(self._unflushed), backoff)
                self.storage.reset_connection()
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        self._shutdown()
        return 0

    def _connect_with_backoff(self) -> None:
        delay = 0.2
        while not self.stopping:
            try:
                self.storage.ping()
                self.storage.heartbeat(self.name, self.status())
                return
            except ConnectionError as err:
                log.warning("%s; retrying in %.1f s", err, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _on_signal(self, signum, frame) -> None:
        self.stopping = True
        if self._in_user_code:
            raise HandBack()

    def _shutdown(self) -> None:
        for attempt in range(3):
            try:
                self._flush()
                self.storage.retire(self.name)     # leased and queued tasks go back
                break
            except (ConnectionProblem, BrokerRefused):
                time.sleep(0.5)
        self._hb_stop.set()
        log.info("worker %s stopped after %d tasks", self.name, self.tasks_done)

    def _heartbeat_loop(self) -> None:
        while not self._hb_stop.wait(HEARTBEAT_SECONDS):
            try:
                self.hb_storage.heartbeat(self.name, self.status())
                self.hb_storage.reap()
            except (ConnectionProblem, BrokerRefused):
                pass
            except Exception:  # never let the heartbeat die silently
                log.exception("heartbeat of %s failed", self.name)

    # -- taking and running ------------------------------------------------------------
    def _take(self) -> list[bytes]:
        """Hand in finished results and lease the next batch, in one round trip."""
        n = 0 if self.stopping else max(1, min(self.max_batch, int(BATCH_SECONDS / max(self._ewma, 1e-6))))
        batch = self.storage.take(self.name, n, self._unflushed)
        self._unflushed = []
        evicted = self.cache.drain_evicted()
        if evicted:
            self.storage.advertise(self.name, removed=evicted)
        return batch

    def _run_batch(self, batch: list[bytes]) -> None:
        for frame in batch:
            if self.stopping:
                break                      # the rest is still leased: retire() hands it back
            self._run_frame(frame)

    def _flush(self) -> None:
        if self._unflushed:
            self.storage.take(self.name, 0, self._unflushed)
            self._unflushed = []

    def _run_frame(self, frame: bytes) -> None:
        map_id = protocol.frame_map_id(frame)
        index = protocol.frame_index(frame)
        if len(frame) < protocol.FRAME_PREFIX + protocol.TASK_ID_LEN or frame[:2] != protocol.MAGIC:
            self._problem(f"worker {self.name} dropped {len(frame)} bytes from a queue that are "
                          f"not a task frame: {frame[:40]!r}")
            return
        try:
            task = protocol.unpack_task(self.key, frame)
        except protocol.BadFrame as err:
            self._problem(f"worker {self.name} refused task {index} of map {map_id}: {err}")
            self.storage.release(self.name, [protocol.task_id(frame)])
            self._system_error(map_id, index, protocol.task_id(frame), f"refused by worker {self.name}: {err}",
                               kind=protocol.FaultKind.BAD_FRAME)
            return
        tid = protocol.task_id(frame)
        try:
            fn = self._function(task.fn_hash, task.map_id)
        except _SystemFault as fault:
            self._system_error(task.map_id, task.index, tid, str(fault), kind=fault.kind)
            return
        self._run_task(fn, task.map_id, task.index, tid, task.packed_arg)

    def _run_task(self, fn, map_id: str, index: int, tid: bytes, packed_arg: bytes) -> None:
        self._task_label = f"{map_id}:{index}"
        self._task_started = t0 = time.time()
        self.ctx.begin_task()
        arg = None
        status = protocol.OK
        try:
            arg = protocol.loads(packed_arg)
            self._in_user_code = True
            try:
                value = fn(arg)
            finally:
                self._in_user_code = False
        except HandBack:
            raise
        except BaseException as err:  # the user's error, whatever it is, goes back to them
            status, value = protocol.USER_ERROR, _describe_error(err, arg)
        t1 = time.time()
        self._ewma = 0.8 * self._ewma + 0.2 * (t1 - t0)
        meta = protocol.ResultMeta(worker=self.name, host=self.host, pid=self.pid, start=t0, stop=t1,
                                   bytes_cache=self.ctx.bytes_from_cache, bytes_file=self.ctx.bytes_from_file,
                                   events=_events_of(arg))
        status, payload = self._pack_result(status, value, meta, arg)
        self._unflushed.append((map_id, tid, protocol.pack_result(self.key, map_id, index,
                                                                  status, payload)))
        self.tasks_done += 1
        self.errors += status != protocol.OK
        self.bytes_from_file += self.ctx.bytes_from_file
        self.bytes_from_cache += self.ctx.bytes_from_cache
        self._task_label = self._task_started = None
        if self.ctx.routing_keys:
            self.storage.advertise(self.name, added=self.ctx.routing_keys)

    @staticmethod
    def _pack_result(status: int, value, meta: protocol.ResultMeta, arg) -> tuple[int, bytes]:
        """(status, payload); a result that cannot travel becomes an error result."""
        try:
            payload = protocol.dumps(value)
        except Exception as err:
            msg = (f"the function returned a {type(value).__name__} that cannot be pickled "
                   f"({type(err).__name__}: {err}); return plain numbers, numpy arrays, "
                   "hist objects or dicts of them")
            return protocol.USER_ERROR, protocol.encode_result(
                protocol.dumps(_error_dict("UnpicklableResult", msg, "", arg)), meta)
        if len(payload) > MAX_RESULT_BYTES:
            msg = (f"the result is {len(payload) / 1e6:.1f} MB compressed, over the limit of "
                   f"{MAX_RESULT_BYTES / 1e6:.0f} MB (RHTC_MAX_RESULT_BYTES): reduce on the worker "
                   "(histograms, sums) instead of returning per-event data")
            return protocol.USER_ERROR, protocol.encode_result(
                protocol.dumps(_error_dict("ResultTooLarge", msg, "", arg)), meta)
        return status, protocol.encode_result(payload, meta)

    def _function(self, fn_hash: str, map_id: str):
        fn = self.functions.get(fn_hash)
        if fn is not None:
            self.functions.move_to_end(fn_hash)
            return fn
        info = self.storage.map_info(map_id)
        ours = protocol.versions()
        theirs = info.get("python", "")
        if theirs and theirs.split(".")[:2] != ours["python"].split(".")[:2]:
            # pickles by value do not travel between Python versions: loading one can
            # crash the interpreter outright, so refuse before trying
            raise _SystemFault(protocol.FaultKind.VERSION_MISMATCH, f"worker {self.name} runs Python {ours['python']} but "
                               f"map {map_id} was sent from Python {theirs}: run the workers with the "
                               "client's Python X.Y (`rhtc pack` builds the worker environment for it)")
        blob = self.storage.get_function(fn_hash)
        if blob is None:
            raise _SystemFault(protocol.FaultKind.MISSING_FUNCTION, f"the function of map {map_id} is not in the "
                               "broker (it expired or the broker restarted); the client re-sends it")
        try:
            protocol.check_function(blob, fn_hash)
        except protocol.FunctionMismatch as err:
            raise _SystemFault(protocol.FaultKind.FUNCTION_MISMATCH, f"worker {self.name} refused map {map_id}: {err}")
        try:
            body = protocol.verify(self.key, blob)
        except protocol.BadFrame as err:
            raise _SystemFault(protocol.FaultKind.BAD_FRAME, f"worker {self.name} refused the function of map {map_id}: {err}")
        try:
            fn = protocol.loads(body)
        except Exception as err:
            theirs = {k: info.get(k, "?") for k in ("python", "cloudpickle")}
            differ = {k: (theirs[k], ours[k]) for k in theirs if theirs[k] != ours[k]}
            hint = ("; the client runs " + ", ".join(f"{k} {a} and this worker {k} {b}" for k, (a, b)
                                                     in differ.items())) if differ else ""
            raise _SystemFault(protocol.FaultKind.FUNCTION_LOAD, f"worker {self.name} cannot load the function of map "
                               f"{map_id}: {type(err).__name__}: {err}{hint}. Install the same packages "
                               "(and versions) on the workers as on the client.")
        self.functions[fn_hash] = fn
        while len(self.functions) > 32:
            self.functions.popitem(last=False)
        return fn

    def _system_error(self, map_id: str | None, index: int | None, tid: bytes, message: str,
                      kind: protocol.FaultKind) -> None:
        if map_id is None or index is None:
            return
        payload = protocol.Fault(kind, message, worker=self.name).encode()
        self._unflushed.append((map_id, tid, protocol.pack_result(self.key, map_id, index,
                                                                  protocol.SYSTEM_ERROR, payload)))

    def _problem(self, message: str) -> None:
        log.warning(message)
        try:
            self.storage.report(message)
        except (ConnectionProblem, BrokerRefused):
            pass

    # -- status --------------------------------------------------------------------------
    def status(self) -> dict:
        now = time.time()
        d = {"name": self.name, "host": self.host, "pid": self.pid, "t": now,
             "state": "busy" if self._task_label else "idle", "task": self._task_label,
             "task_seconds": (now - self._task_started) if self._task_started else None,
             "started": self.started, "tasks_done": self.tasks_done, "errors": self.errors,
             "cache_bytes": self.cache.nbytes, "cache_entries": len(self.cache),
             "cache_limit": self.cache.limit_bytes, "bytes_read": self.bytes_from_file,
             "bytes_from_cache": self.bytes_from_cache, **protocol.versions()}
        d.update(self.metrics.sample())
        return d


class _SystemFault(Exception):
    def __init__(self, kind: protocol.FaultKind, message: str):
        super().__init__(message)
        self.kind = kind


def _events_of(arg) -> int | None:
    n = getattr(arg, "num_entries", None) if arg is not None else None
    return int(n) if isinstance(n, int) else None


def _error_dict(type_name: str, message: str, tb: str, arg, exc: bytes | None = None) -> dict:
    try:
        arg_text = repr(arg)
    except Exception:
        arg_text = f"<{type(arg).__name__}>"
    return {"type": type_name, "message": message, "traceback": tb,
            "argument": arg_text[:500], "exception": exc}


def _describe_error(err: BaseException, arg) -> dict:
    tb = traceback.format_exc()
    try:
        exc = cloudpickle.dumps(err)
    except Exception:
        exc = None
    return _error_dict(type(err).__name__, str(err), tb, arg, exc)
