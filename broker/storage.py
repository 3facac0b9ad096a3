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
import time

import redis

from . import blobs, protocol

from .records import PROBLEM, MalformedLog, checked
from .config import BrokerConfig, Settings, redact
from .config import settings as default_settings
from .errors import PARSER, ConnectionProblem
from .fastlane import FastLane
from .functions import Library, missing
from .inflight import InFlight
from .keepers import Keepers
from .keys import MAP_DATA, MAP_NONCE, MAP_REFUSED, Keys
from .leases import Leases
from .pool import Pool


#: what one fetch of results brings at most, roughly (the count follows the last sizes)
FETCH_BYTES = 64 * 2**20


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


class Storage(Leases, Pool, Keepers, InFlight):
    """The broker as the project sees it: queues, leases, maps, results, workers.
    Here: the connection and a map's own life (queued, kept alive, its results fetched,
    ended). The worker's side (claims, takes, leases) is in :class:`broker.leases.Leases`;
    who is alive and which chunks they hold, in :class:`broker.pool.Pool`; what a pool
    keeper publishes, in :class:`broker.keepers.Keepers`; the maps in flight across every
    queue (audit, cancel), in :class:`broker.inflight.InFlight`."""

    def __init__(self, config: BrokerConfig, settings: Settings | None = None, *,
                 client: redis.Redis | None = None, **redis_kwargs):
        """``client``: share this redis-py client (its connection pool) instead of opening
        one; the hot path still gets a connection of its own (:class:`FastLane`)."""
        self.config = config
        self.settings = settings or default_settings()
        self.keys = Keys(config.namespace)
        self.r = client if client is not None else connect(config, **redis_kwargs)
        self._scripts = Library(self.r)         # the Lua scripts (broker/functions.py)
        self._fast = FastLane(self.r)
        self.malformed = MalformedLog()        # what its readers skipped (broker/records.py)
        self._finished_maps: list[str] = []    # deleted with the next enqueue (or flush)
        self._clock_offset: float | None = None  # broker clock minus ours (ms), from TIME
        self._sent = 0                         # sequence number of the last enqueue call
        self._result_bytes = FETCH_BYTES / 8    # mean size of the result frames fetched last (a first guess)

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

    def server_load(self) -> tuple[float, int, int]:
        """(seconds of CPU the broker has used, system and user; used memory bytes; clients
        connected), from INFO: what ``bench scale`` reads before and after a map."""
        info = self.r.info()
        return (float(info["used_cpu_sys"]) + float(info["used_cpu_user"]), int(info["used_memory"]),
                int(info["connected_clients"]))

    def memory_or_none(self) -> tuple[int, int]:
        """:meth:`memory`, or (0, 0) when the broker cannot say (unreachable, refusing)."""
        try:
            return self.memory()
        except Exception:
            return 0, 0

    # -- maps (client side) ---------------------------------------------------------
    def enqueue_map(self, map_id: str, fn_hash: str, packed_fn: bytes | None, info: dict,
                    routed: dict[str | None, list[bytes]], wait_first: float = 0.0, *,
                    nonce: str, client: str = "", fair: bool = True,
                    home: dict[str, list[bytes]] | None = None) -> list[bytes]:
        """Register a map, store its function (if given) and queue its tasks.

        ``routed`` maps a worker name (or None for the shared queue) to task frames;
        ``home`` a worker name to frames of chunks it holds: queued before its ``routed``
        ones and marked, so a thief leaves them to it while it makes progress
        (``steal_one`` in lua/lib.lua);
        ``nonce`` is the map's nonce (:func:`protocol.new_nonce`) its task frames carry: the
        map's liveness token (signed here, see :meth:`keep_map_alive`) names it;
        ``client`` names the submitting process's beacon (:meth:`renew_client`): when it
        expires, the map and its queued tasks are dropped ('': the map never dies early).
        Unrouted tasks beyond ``settings.fair_window`` wait in the map's backlog, so the
        maps of all clients take turns in the shared queue; ``fair=False`` (a resubmission
        of lost tasks) puts them straight into the shared queue.
        A big map goes in calls of at most ``settings.scan_step`` frames (the first one
        registers the map), sent back to back without waiting for each reply. With
        ``wait_first`` > 0 the same round trip also waits that long for the first
        results, which are returned.
        """
        st = self.settings
        flat_info = [x for kv in dict(info, **{MAP_NONCE: nonce}).items() for x in (kv[0], str(kv[1]))]
        token = self.map_token(map_id, nonce)
        finished, self._finished_maps = self._finished_maps, []
        window = st.fair_window if fair else 0
        first: list = [window, fn_hash, packed_fn or b"", st.map_ttl, st.function_ttl, time.time(),
                       client, int(st.client_ttl * 1000), len(flat_info), *flat_info,
                       len(finished), *finished]
        calls, args, room = [], first, st.scan_step
        groups = [(2, worker, frames) for worker, frames in (home or {}).items()] + \
            [(int(worker is not None), worker, frames) for worker, frames in routed.items()]
        for kind, worker, frames in groups:
            for at in range(0, len(frames), st.scan_step):
                part = frames[at:at + st.scan_step]
                if len(part) > room:
                    calls.append(args)
                    args, room = [window], st.scan_step
                args += [kind, worker or "", len(part), *part]
                room -= len(part)
        calls.append(args)
        script = self._scripts["enqueue"]
        set_token = ("SET", self.keys.live(map_id), token, "PX", int(st.map_ttl * 1000))

        def send() -> list[bytes]:
            # sent again whole after a broken connection: the calls keep their sequence
            # numbers, so the broker skips those it already ran (see enqueue.lua)
            try:
                self._fast.send(*set_token, flush=False)          # goes with the first call
                for k, args in enumerate(numbered):             # (a one-call map's with its wait)
                    self._fast.script(script, [], args, wait=False,
                                      flush=k > 0 or len(numbered) > 1 or wait_first <= 0)
                if wait_first <= 0:
                    self._fast.drain()
                    return []
                got = self._fast.call_behind("BLPOP", self.keys.results(map_id), wait_first)
            except redis.ResponseError as err:
                if not missing(err):
                    raise
                self._fast.reset()
                self._fast.call(*set_token)
                for args in numbered:
                    self._fast.script(script, [], args)
                return []
            return blobs.resolve_or_put_back(self.r, self.keys, map_id, [got[1]], FETCH_BYTES) if got else []

        with self._fast.lock:
            numbered = []
            for k, args in enumerate(calls):
                self._sent += 1
                numbered.append([self.keys.ns, map_id, int(k == 0), self._sent, *args])
            return self._fast.retrying(send, st.broker_patience, f"queue map {map_id}", redact(self.config.url))

    def renew_client(self, client: str) -> None:
        """Say the client process ``client`` is alive for ``settings.client_ttl`` more seconds
        (its maps are dropped, queued tasks and all, once it stops saying so)."""
        self.r.set(self.keys.client(client), 1, px=int(self.settings.client_ttl * 1000))

    def drop_maps_of_dead_clients(self, every: float = 1.0) -> list[str]:
        """Drop the maps whose client's beacon expired, with their queued tasks (at most
        once per ``every`` s across all processes). Returns their ids."""
        if every > 0 and not self.r.set(self.keys.sweep_due, 1, nx=True, px=int(every * 1000)):
            return []     # swept within `every` by someone (as in reap: a SET, not a script run)
        got = self._scripts["sweep"](args=[self.keys.ns, 0, self.settings.scan_step])
        return [m.decode() for m in got]

    def function_present(self, fn_hash: str) -> bool:
        return bool(self.r.exists(self.keys.function(fn_hash)))

    def keep_map_alive(self, map_id: str, fn_hash: str, nonce: str | None = None) -> bool:
        """Renew a map's expiry and, given its ``nonce``, its liveness token (a fresh one,
        valid ``settings.token_ttl`` s by the broker's clock); False if the map is gone
        (cancelled, or the broker restarted)."""
        k, st = self.keys, self.settings
        pipe = self.r.pipeline(transaction=False)
        pipe.time()
        pipe.expire(k.map(map_id), st.map_ttl)
        pipe.expire(k.function(fn_hash), st.function_ttl)
        for name in MAP_DATA:
            pipe.expire(getattr(k, name)(map_id), st.result_ttl)
        if nonce is not None:          # XX: never brings back the token of a map that ended
            pipe.set(k.live(map_id), self.map_token(map_id, nonce), xx=True, px=int(st.map_ttl * 1000))
        got = pipe.execute()
        self._set_clock(got[0])
        return bool(got[1])

    def map_token(self, map_id: str, nonce: str) -> bytes:
        """A signed token saying the map is alive for ``settings.token_ttl`` s more (broker clock)."""
        return protocol.pack_map_token(self.config.key, map_id, nonce,
                                       self.broker_ms() + int(self.settings.token_ttl * 1000))

    def sign_map_end(self, map_id: str, nonce: str, drop: bool = False) -> None:
        """Put a map's signed end in its liveness token's place (kept as long as its last
        token could be valid): workers refuse its frames from now on (worker/tokens.py).
        Written at once on the hot lane, its reply read with the next command's: the map's
        return does not wait a round trip for it (the broker runs it in order all the same).
        ``drop``: the map's keys are deleted in the same write (:meth:`end_map`)."""
        ttl = int(self.settings.token_ttl * 1000)
        with self._fast.lock:
            self._fast.send("SET", self.keys.live(map_id), protocol.pack_map_token(
                self.config.key, map_id, nonce, self.broker_ms() + ttl, ended=True), "PX", ttl, quiet=True,
                flush=not drop)
            if drop:
                self.end_map(map_id, lazy=True)

    def broker_ms(self) -> int:
        """The broker's clock (ms), estimated from ours and the offset last seen by TIME, so
        that tokens do not depend on the clocks of the client's and the workers' nodes."""
        if self._clock_offset is None:
            self._set_clock(self.r.time())
        return int(time.time() * 1000 + self._clock_offset)

    def _set_clock(self, t) -> None:
        self._clock_offset = int(t[0]) * 1000 + int(t[1]) / 1000 - time.time() * 1000

    def fetch_results(self, map_id: str, timeout: float, count: int = 1000) -> list[bytes]:
        """Result frames of a map, waiting up to ``timeout`` seconds for the first one: at
        most ``count``, and about :data:`FETCH_BYTES` when the last ones were big (one pop
        of a thousand 8 MB results held Redis, and every heartbeat, for seconds)."""
        key = self.keys.results(map_id)
        got = self.r.lpop(key, max(1, min(count, int(FETCH_BYTES // self._result_bytes))))
        if got:
            got = blobs.resolve_or_put_back(self.r, self.keys, map_id, got, FETCH_BYTES)
            if got:
                self._result_bytes = max(1.0, sum(len(f) for f in got) / len(got))
            return got
        if timeout <= 0:
            return []
        got = self.r.blpop([key], timeout=timeout)
        return blobs.resolve_or_put_back(self.r, self.keys, map_id, [got[1]], FETCH_BYTES) if got else []

    def unread_results(self, map_id: str) -> int:
        """How many result frames of a map wait for its client."""
        return int(self.r.llen(self.keys.results(map_id)))

    def fetch_dead_tasks(self, map_id: str) -> list[bytes]:
        """Task frames of a map that used up their attempts (poison tasks)."""
        return self.r.lpop(self.keys.dead(map_id), 1000) or []

    def attempt_history(self, map_id: str, task_id: bytes) -> str:
        """How the runs of a task ended (one line per run that killed its worker)."""
        raw = self.r.hget(self.keys.tries(map_id), task_id[protocol.MAP_ID_LEN:protocol.TASK_ID_LEN])
        return raw.decode() if raw else ""

    def attempt_histories(self, map_id: str) -> dict[int, str]:
        """Every task of the map whose runs killed their worker: index -> its history (one
        line per such run; a few entries: only tasks that crashed have one)."""
        raw = self.r.hgetall(self.keys.tries(map_id))
        return {protocol.TaskRef.from_task_id(map_id.encode("ascii") + k).index: v.decode()
                for k, v in raw.items()}

    def partials_refused(self, map_id: str) -> int:
        """How many partials of the map the broker refused (a task they cover had been
        requeued away from their worker: ``lua/take.lua``)."""
        return int(self.r.hget(self.keys.map(map_id), MAP_REFUSED) or 0)

    def end_map(self, map_id: str, lazy: bool = False) -> None:
        """Delete every key a map owns, and the blobs of its unread results (a late hand-in
        after the end finds the map gone: take.lua deletes its blob); its queued tasks are
        dropped by whoever takes them. ``lazy``: sent without waiting for the reply (read
        with the next command's), or, when the broker cannot be reached now, with this
        client's next map (the keys expire anyway). It used to wait for the next map
        always: a notebook idle after its map kept the map's keys, and the next map's
        registration deleted them on its critical path."""
        args = [self.keys.ns, 0, self.settings.scan_step, map_id]
        if not lazy:
            self._scripts["sweep"](args=args)
            return
        try:
            with self._fast.lock:
                self._fast.script(self._scripts["sweep"], [], args, wait=False, quiet=True)
        except ConnectionProblem:
            self._finished_maps.append(map_id)

    def flush(self) -> None:
        """Delete the keys of maps ended lazily."""
        done, self._finished_maps = self._finished_maps, []
        for m in done:
            self.end_map(m)

    def report(self, message: str) -> None:
        """Leave a problem where `rhtc status` and the client can see it."""
        pipe = self.r.pipeline(transaction=False)
        pipe.lpush(self.keys.log, json.dumps({"t": time.time(), "message": message}))
        pipe.ltrim(self.keys.log, 0, 199)
        pipe.expire(self.keys.log, self.settings.log_ttl)
        pipe.execute()

    def recent_problems(self, n: int = 20) -> list[dict]:
        return checked(self, self.keys.log, self.r.lrange(self.keys.log, 0, n - 1), PROBLEM)

    def count_keys(self) -> int:
        """How many keys exist under this namespace (for tests and `rhtc status`)."""
        return sum(1 for _ in self.r.scan_iter(match=f"{self.keys.ns}:*", count=1000))
