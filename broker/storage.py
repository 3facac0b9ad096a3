"""Every Redis command of the project, behind one class with plainly named methods.

The rest of the code reads as intent (``enqueue_map``, ``take``, ``wait_for_task``, ``reap``),
never as Redis. The key schema is in :mod:`broker.keys`; the atomic steps are the Lua
scripts in ``broker/lua/``.

Example (against a running broker)::

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.ping()
    True
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

import redis

from rhtc.broker import protocol
from rhtc.broker.config import BrokerConfig, Settings, redact, settings
from rhtc.broker.errors import (PARSER, BrokerOutOfMemory, BrokerRefused, BrokerUnavailable,  # noqa: F401
                                ConnectionProblem, is_out_of_memory)
from rhtc.broker.keys import Keys

_LUA = Path(__file__).with_name("lua")

SETTINGS = settings()
LEASE_SECONDS = SETTINGS.lease                 # kept for callers that read it from here
HEARTBEAT_SECONDS = SETTINGS.heartbeat
MAX_ATTEMPTS = SETTINGS.max_attempts


def connect(config: BrokerConfig, **kwargs) -> redis.Redis:
    """A redis-py client for ``config.url`` (redis://, rediss://, unix://)."""
    opts = dict(socket_timeout=30, socket_connect_timeout=10, health_check_interval=15,
                parser_class=PARSER)
    if not config.url.startswith("unix:"):
        opts["socket_keepalive"] = True
    opts.update(kwargs)
    try:
        return redis.Redis.from_url(config.url, **opts)
    except ValueError as err:
        raise ValueError(f"cannot use broker URL {redact(config.url)}: {err}. Expected "
                         "redis://[:password@]host:port[/db], rediss://... or unix:///path.sock") from err


class Storage:
    """The broker as the project sees it: queues, leases, maps, results, workers."""

    def __init__(self, config: BrokerConfig, settings: Settings | None = None, **redis_kwargs):
        self.config = config
        self.settings = settings or SETTINGS
        self.keys = Keys(config.namespace)
        self.r = connect(config, **redis_kwargs)
        self._scripts = {name: self.r.register_script((_LUA / f"{name}.lua").read_text())
                         for name in ("take", "steal", "reap", "purge", "enqueue", "audit")}
        self._fast = _FastLane(self.r)
        self._finished_maps: list[str] = []    # deleted with the next enqueue (or flush)

    # -- connection -----------------------------------------------------------------
    def ping(self) -> bool:
        """True if the broker answers; raises a clear ConnectionError otherwise."""
        try:
            return bool(self.r.ping())
        except redis.AuthenticationError as err:
            raise PermissionError(f"broker {redact(self.config.url)} refused the password: {err}. "
                                  "Check the password in the URL or config file.") from err
        except ConnectionProblem as err:
            raise ConnectionError(f"cannot reach the broker at {redact(self.config.url)}: {err}. "
                                  "Is it running (`rhtc broker`) and is the URL right?") from err

    def reset_connection(self) -> None:
        """Drop the hot-path connection (it reconnects on the next command)."""
        self._fast.reset()

    def close(self) -> None:
        try:
            self.flush()
        except ConnectionProblem:
            pass
        self._fast.reset()
        self.r.close()

    def server_info(self) -> dict:
        return self.r.info("server")

    def memory(self) -> tuple[int, int]:
        """(used bytes, maxmemory bytes or 0 when unlimited)."""
        info = self.r.info("memory")
        return int(info["used_memory"]), int(info.get("maxmemory", 0))

    # -- maps (client side) ---------------------------------------------------------
    def enqueue_map(self, map_id: str, fn_hash: str, packed_fn: bytes | None, info: dict,
                    routed: dict[str | None, list[bytes]], wait_first: float = 0.0, *,
                    nonce: str) -> list[bytes]:
        """Register a map, store its function (if given) and queue its tasks, atomically.

        ``routed`` maps a worker name (or None for the shared queue) to task frames;
        ``nonce`` is the map's nonce (:func:`protocol.new_nonce`) its task frames carry.
        With ``wait_first`` > 0 the same round trip also waits that long for the first
        results, which are returned.
        """
        args: list = [self.keys.ns, map_id, fn_hash, packed_fn or b"", self.settings.map_ttl, self.settings.function_ttl,
                      time.time()]
        flat_info = [x for kv in dict(info, nonce=nonce).items() for x in (kv[0], str(kv[1]))]
        args += [len(flat_info), *flat_info]
        if self._finished_maps:
            args += ["DEL", len(self._finished_maps), *self._finished_maps]
            self._finished_maps = []
        for worker, frames in routed.items():
            if frames:
                args += [worker or "", len(frames), *frames]
        with self._fast.lock:
            try:
                self._fast.script(self._scripts["enqueue"], [], args, wait=wait_first <= 0)
                if wait_first <= 0:
                    return []
                got = self._fast.call("BLPOP", self.keys.results(map_id), wait_first)
            except redis.exceptions.NoScriptError:
                self._fast._loaded.clear()
                self._fast.script(self._scripts["enqueue"], [], args)
                return []
        return [got[1]] if got else []

    def function_present(self, fn_hash: str) -> bool:
        return bool(self.r.exists(self.keys.function(fn_hash)))

    def keep_map_alive(self, map_id: str, fn_hash: str) -> bool:
        """Renew a map's expiry; False if the map is gone (cancelled, or the broker restarted)."""
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        pipe.expire(k.map(map_id), self.settings.map_ttl)
        pipe.expire(k.function(fn_hash), self.settings.function_ttl)
        for key in (k.results(map_id), k.tries(map_id), k.dead(map_id)):
            pipe.expire(key, self.settings.result_ttl)
        return bool(pipe.execute()[0])

    def fetch_results(self, map_id: str, timeout: float, count: int = 1000) -> list[bytes]:
        """Result frames of a map, waiting up to ``timeout`` seconds for the first one."""
        key = self.keys.results(map_id)
        got = self.r.lpop(key, count)
        if got:
            return got
        if timeout <= 0:
            return []
        got = self.r.blpop([key], timeout=timeout)
        return [got[1]] if got else []

    def fetch_dead_tasks(self, map_id: str) -> list[bytes]:
        """Task frames of a map that used up their attempts (poison tasks)."""
        return self.r.lpop(self.keys.dead(map_id), 1000) or []

    def attempt_history(self, map_id: str, task_id: bytes) -> str:
        raw = self.r.hget(self.keys.tries(map_id), task_id[protocol.MAP_ID_LEN:protocol.TASK_ID_LEN])
        return raw.decode() if raw else ""

    def end_map(self, map_id: str, lazy: bool = False) -> None:
        """Delete every key a map owns. ``lazy``: with this client's next command instead
        (the keys expire anyway); its queued tasks are dropped by whoever takes them."""
        if lazy:
            self._finished_maps.append(map_id)
            return
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(*self.keys.map_keys(map_id))
        pipe.zrem(self.keys.maps, map_id)
        pipe.execute()

    def flush(self) -> None:
        """Delete the keys of maps ended lazily."""
        done, self._finished_maps = self._finished_maps, []
        for m in done:
            self.end_map(m)

    def audit_map(self, map_id: str) -> set[int]:
        """Indices of a map's tasks that are somewhere: queued, leased, dead or answered."""
        raw = self._scripts["audit"](args=[self.keys.ns, map_id])
        return {int.from_bytes(x, "big") for x in raw}

    def cancel_map(self, map_id: str) -> int:
        """End a map and remove its queued tasks from every queue; returns how many."""
        self.end_map(map_id)
        return int(self._scripts["purge"](args=[self.keys.ns, map_id]))

    def maps_in_flight(self) -> list[dict]:
        ids = [m.decode() for m in self.r.zrange(self.keys.maps, 0, -1)]
        pipe = self.r.pipeline(transaction=False)
        for m in ids:
            pipe.hgetall(self.keys.map(m))
            pipe.llen(self.keys.results(m))
        raw = pipe.execute()
        out, gone = [], []
        for m, info, nres in zip(ids, raw[0::2], raw[1::2]):
            if not info:
                gone.append(m)
                continue
            d = {a.decode(): b.decode() for a, b in info.items()}
            d.update(map_id=m, unread_results=nres)
            out.append(d)
        if gone:
            self.r.zrem(self.keys.maps, *gone)
        return out

    # -- workers ----------------------------------------------------------------------
    def heartbeat(self, worker: str, status: dict) -> None:
        """Say this worker is alive (renews its lease) and publish its live status."""
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        pipe.set(k.heartbeat(worker), json.dumps(status), px=int(self.settings.lease * 1000))
        pipe.sadd(k.workers, worker)
        pipe.expire(k.holds(worker), self.settings.holds_ttl)
        pipe.execute()

    def take(self, worker: str, max_tasks: int,
             results: Sequence[tuple[str, bytes, bytes]] = ()) -> list[bytes]:
        """Hand in (map id, task id, result frame) triples, then lease up to ``max_tasks``
        tasks: own queue first, then the shared queue. One round trip."""
        k = self.keys
        args: list = [k.ns, self.settings.result_grace, max_tasks, int(self.settings.leases)]
        for map_id, tid, frame in results:
            args += [map_id, tid, frame]
        return self._fast.script(self._scripts["take"], [k.queue(worker), k.shared_queue,
                                                          k.lease(worker)], args)

    def wait_for_task(self, worker: str, timeout: float) -> bytes | None:
        """Block until a task arrives in this worker's queue or the shared one; lease it.

        The lease is written without waiting for Redis to confirm it (it is on the wire
        before the task starts), so an idle worker's wake-up costs no extra round trip."""
        k = self.keys
        got = self._fast.call("BRPOP", k.queue(worker), k.shared_queue, timeout)
        if not got:
            return None
        frame = got[1]
        if self.settings.leases and protocol.is_task_frame(frame):
            self._fast.send("HSET", k.lease(worker), protocol.task_id(frame), frame)
        return frame

    def steal(self, worker: str) -> bytes | None:
        """Lease one task from the tail of a backed-up, stuck or dead worker's queue."""
        return self._fast.script(self._scripts["steal"], [], [self.keys.ns, worker, self.settings.steal_min_queue,
                                                              self.settings.steal_stuck_seconds]) or None

    def release(self, worker: str, task_ids: Iterable[bytes]) -> None:
        """Drop leases without a result (a frame the worker could not read)."""
        ids = list(task_ids)
        if ids:
            self._fast.call("HDEL", self.keys.lease(worker), *ids)

    def retire(self, worker: str) -> None:
        """A worker leaves: its leased and queued tasks go back to the shared queue."""
        self._fast.drain()
        self._scripts["reap"](args=[self.keys.ns, _now(), MAX_ATTEMPTS, 0, self.settings.result_ttl, worker])
        self.r.delete(self.keys.heartbeat(worker))

    def reap(self, max_attempts: int = MAX_ATTEMPTS, every: float = 1.0) -> list[str]:
        """Recover the tasks of workers whose heartbeat expired (at most once per ``every`` s
        across all processes). Returns the names of the workers found dead."""
        got = self._scripts["reap"](args=[self.keys.ns, _now(), max_attempts, int(every * 1000),
                                          self.settings.result_ttl, ""])
        return [w.decode() for w in got]

    def get_function(self, fn_hash: str) -> bytes | None:
        return self.r.get(self.keys.function(fn_hash))

    def map_info(self, map_id: str) -> dict[str, str]:
        return {a.decode(): b.decode() for a, b in self.r.hgetall(self.keys.map(map_id)).items()}

    def advertise(self, worker: str, added: Iterable[str] = (), removed: Iterable[str] = ()) -> None:
        """Publish which chunks (routing keys) this worker holds in its cache."""
        added, removed = list(added), list(removed)
        pipe = self.r.pipeline(transaction=False)
        if removed:
            pipe.srem(self.keys.holds(worker), *removed)
        if added:
            pipe.sadd(self.keys.holds(worker), *added)
            pipe.expire(self.keys.holds(worker), self.settings.holds_ttl)
        if added or removed:
            pipe.execute()

    def report(self, message: str) -> None:
        """Leave a problem where `rhtc status` and the client can see it."""
        pipe = self.r.pipeline(transaction=False)
        pipe.lpush(self.keys.log, json.dumps({"t": time.time(), "message": message}))
        pipe.ltrim(self.keys.log, 0, 199)
        pipe.expire(self.keys.log, self.settings.log_ttl)
        pipe.execute()

    def recent_problems(self, n: int = 20) -> list[dict]:
        return [json.loads(x) for x in self.r.lrange(self.keys.log, 0, n - 1)]

    # -- who is alive, what they hold -------------------------------------------------
    def live_workers(self, queue_depths: bool = True) -> list[dict]:
        """Status of every worker whose heartbeat is current (name, host, state, task...),
        with the length of its own queue as ``queued`` unless ``queue_depths=False``."""
        names = sorted(m.decode() for m in self.r.smembers(self.keys.workers))
        if not names:
            return []
        raw = self.r.mget([self.keys.heartbeat(n) for n in names])
        depths = [None] * len(names)
        if queue_depths:
            pipe = self.r.pipeline(transaction=False)
            for n in names:
                pipe.llen(self.keys.queue(n))
            depths = pipe.execute()
        out = []
        for name, blob, depth in zip(names, raw, depths):
            if blob:
                d = json.loads(blob)
                d.setdefault("name", name)
                d["queued"] = depth
                out.append(d)
        return out

    def shared_depth(self) -> int:
        return int(self.r.llen(self.keys.shared_queue))

    def locate(self, routing_keys: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        """For each routing key cached on a live worker, that worker's name; and the
        names of the live workers."""
        live = [w["name"] for w in self.live_workers(queue_depths=False)]
        if not routing_keys or not live:
            return {}, live
        pipe = self.r.pipeline(transaction=False)
        for w in live:
            pipe.smismember(self.keys.holds(w), list(routing_keys))
        where: dict[str, str] = {}
        for w, flags in zip(live, pipe.execute()):
            for key, held in zip(routing_keys, flags):
                if held and key not in where:
                    where[key] = w
        return where, live

    def count_keys(self) -> int:
        """How many keys exist under this namespace (for tests and `rhtc status`)."""
        return sum(1 for _ in self.r.scan_iter(match=f"{self.keys.ns}:*", count=1000))


def _now() -> str:
    return time.strftime("%H:%M:%S", time.localtime()) + ("%.3f" % (time.time() % 1))[1:]


class _FastLane:
    """One dedicated connection for a worker's hot path, where a command can be sent
    without waiting for its reply (the reply is read before the next command's)."""

    def __init__(self, r: redis.Redis):
        self.r = r
        self.conn = None
        self.pending = 0
        self._loaded = set()
        self.lock = threading.RLock()     # for clients with several maps in threads

    def _connection(self):
        if self.conn is None:
            self.conn = self.r.connection_pool.get_connection()
        return self.conn

    def drain(self) -> None:
        try:
            while self.pending:
                self.pending -= 1
                self.conn.read_response()
        except ConnectionProblem:
            self.reset()
            raise

    def send(self, *args) -> None:
        try:
            self._connection().send_command(*args)
        except ConnectionProblem:
            self.reset()
            raise
        self.pending += 1

    def call(self, *args):
        self.drain()
        conn = self._connection()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except ConnectionProblem:
            self.reset()
            raise

    def script(self, script, keys: list, args: list, wait: bool = True):
        """Run a Lua script by its hash (loading it if the broker forgot it). With
        ``wait=False`` the reply is read before the next command instead (the script is
        then loaded first, so that a NOSCRIPT cannot go unnoticed)."""
        if not wait:
            if script.sha not in self._loaded:
                self.call("SCRIPT", "LOAD", script.script)
                self._loaded.add(script.sha)
            self.send("EVALSHA", script.sha, len(keys), *keys, *args)
            return None
        try:
            return self.call("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:        # a restarted broker forgot it
            self.call("SCRIPT", "LOAD", script.script)
            return self.call("EVALSHA", script.sha, len(keys), *keys, *args)

    def reset(self) -> None:
        if self.conn is not None:
            try:
                self.conn.disconnect()
                self.r.connection_pool.release(self.conn)
            except Exception:
                pass
        self.conn = None
        self.pending = 0
        self._loaded = set()
