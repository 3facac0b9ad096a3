"""The operator's pool view: who is alive and what they hold (the workers' statuses,
verified against forgery, their queues' depths, where each chunk is cached: in a
worker's memory or on its node's disk tier), the maps in flight, and what a pool keeper
(condor/keeper.py) publishes and ``rhtc status`` reads back: its state, a capped log of
what it did and why, which workers have reached the broker (even those that left since),
the pool's floor (under which no idle worker leaves) and the stop request of
``rhtc pool stop``.

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.pool.publish_keeper("p1", {"wanted": 3, "running": 2}, ttl=30)
    ...     s.pool.keeper_event("p1", {"what": "replaced", "job": "12.0", "why": "held: out of memory"})
    ...     [k["pool"] for k in s.pool.keepers()], s.pool.keeper_events("p1")[0]["why"], s.pool.locate(["uuid:Events:0-100"])
    (['p1'], 'held: out of memory', ({}, []))
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Sequence

from . import scriptargs
from .wire import messages, protocol, records
from .inflight import InFlight
from .wire.keys import MAP_ANSWERED, MAP_CLIENT, MAP_NONCE, MAP_PARTIAL_SEQ, MAP_POOLED, MAP_REFUSED, MAP_SENT
from .wire.records import KEEPER_EVENT, MalformedRecord, checked, keeper_state, map_entry

if TYPE_CHECKING:  # pragma: no cover
    from .link import Link

#: what the keeper's log keeps, at most, and how long after its last entry
KEEPER_LOG_ENTRIES = 200
KEEPER_LOG_TTL = 86400


class PoolView:
    """The operator's side of the broker (``storage.pool``): read mostly; the keeper's writes."""

    def __init__(self, link: "Link"):
        self.link = link
        self.r, self.keys, self.settings, self.config = link.r, link.keys, link.settings, link.config
        self.scripts, self.malformed = link.scripts, link.malformed
        self.inflight = InFlight(link)

    # -- the workers ------------------------------------------------------------------------
    def worker_statuses(self, queue_depths: bool = True) -> list[messages.WorkerStatus]:
        """Status of every worker whose heartbeat is current, with the length of its own
        queue as ``queued`` unless ``queue_depths=False``."""
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
        out, malformed = [], []
        for name, blob, depth in zip(names, raw, depths):
            if blob:
                try:
                    status = messages.WorkerStatus.decode(blob, self.keys.heartbeat(name))
                except records.MalformedRecord as err:     # skipped, named in rhtc status and the page
                    malformed.append(err)
                    continue
                status.forged = messages.status_forgery(self.config.key, blob, name, status)
                status.name, status.queued = name, depth
                out.append(status)
        self.malformed.read([self.keys.heartbeat(n) for n in names] if self.malformed else (), malformed)
        return out

    def live_workers(self, queue_depths: bool = True) -> list[dict]:
        """:meth:`worker_statuses` as flat dicts (name, host, state, task label...)."""
        return [s.to_dict() for s in self.worker_statuses(queue_depths)]

    def take_back_queue(self, worker: str) -> None:
        """Move every task queued for ``worker`` to the shared queue (in bounded steps): it
        looks live but takes none of them."""
        args = scriptargs.drain(ns=self.keys.ns, worker=worker, scan_step=self.settings.scan_step)
        while int(self.scripts["drain"](args=args)):
            pass

    def worker_count(self) -> int:
        """How many workers are registered (live, or dead and not reaped yet)."""
        return int(self.r.scard(self.keys.workers))

    def shared_depth(self) -> int:
        return int(self.r.llen(self.keys.shared_queue))

    def unrouted_depth(self, map_id: str) -> int:
        """Tasks in the shared queue (any map's) plus those in ``map_id``'s backlog."""
        pipe = self.r.pipeline(transaction=False)
        pipe.llen(self.keys.shared_queue)
        pipe.llen(self.keys.backlog(map_id))
        return sum(pipe.execute())

    def locate(self, routing_keys: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        """For each routing key cached on a live worker, that worker's name, else a live
        worker of a node whose disk tier holds it (spread over that node's workers); and
        the names of the live workers (never one whose heartbeat is forged, nor one that is
        leaving: it takes no new task)."""
        statuses = [w for w in self.worker_statuses(queue_depths=False) if not w.forged and not w.leaving]
        live = [w.name for w in statuses]
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
        tiers: dict[str, list[str]] = {}
        for w in statuses:
            if w.disk_tier:
                tiers.setdefault(w.disk_tier, []).append(w.name)
        rest = [k for k in routing_keys if k not in where]
        if tiers and rest:
            pipe = self.r.pipeline(transaction=False)
            for tier in tiers:
                pipe.smismember(self.keys.disk_holds(tier), rest)
            for (tier, names), flags in zip(tiers.items(), pipe.execute()):
                for n, (key, held) in enumerate(zip(rest, flags)):
                    if held and key not in where:
                        where[key] = sorted(names)[n % len(names)]
        return where, live

    def pending_tasks(self) -> int:
        """Tasks queued and not yet taken, of every map: the shared queue, the maps'
        backlogs and the workers' own queues (what an adaptive pool grows for)."""
        maps = [m.decode() for m in self.r.zrange(self.keys.maps, 0, -1)]
        workers = [w.decode() for w in self.r.smembers(self.keys.workers)]
        pipe = self.r.pipeline(transaction=False)
        pipe.llen(self.keys.shared_queue)
        for m in maps:
            pipe.llen(self.keys.backlog(m))
        for w in workers:
            pipe.llen(self.keys.queue(w))
        return int(sum(pipe.execute()))

    # -- the pool keeper's record -----------------------------------------------------------
    def publish_keeper(self, pool: str, state: dict, ttl: float) -> None:
        """The keeper's state (JSON values), expiring unless renewed within ``ttl`` s."""
        key = self.keys.keeper(pool)
        pipe = self.r.pipeline(transaction=False)
        pipe.delete(key)
        pipe.hset(key, mapping={k: json.dumps(v) for k, v in {**state, "pool": pool, "t": time.time()}.items()})
        pipe.expire(key, max(1, int(ttl)))
        pipe.zadd(self.keys.keepers, {pool: state.get("started", time.time())}, nx=True)
        pipe.execute()

    def keeper_event(self, pool: str, event: dict) -> None:
        """One thing the keeper did, and why (newest first, capped, expiring)."""
        key = self.keys.keeper_log(pool)
        pipe = self.r.pipeline(transaction=False)
        pipe.lpush(key, json.dumps({"t": time.time(), **event}))
        pipe.ltrim(key, 0, KEEPER_LOG_ENTRIES - 1)
        pipe.expire(key, KEEPER_LOG_TTL)
        pipe.execute()

    def set_pool_floor(self, workers: int, ttl: float) -> None:
        """No idle worker leaves while the pool has ``workers`` or fewer (renew within ``ttl``)."""
        self.r.set(self.keys.pool_floor, int(workers), ex=max(1, int(ttl)))

    def end_keeper(self, pool: str) -> None:
        """The keeper stopped: its state, its floor and its stop request go (its log stays
        until it expires, for ``rhtc status``)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.delete(self.keys.keeper(pool), self.keys.keeper_stop(pool), self.keys.pool_floor)
        pipe.zrem(self.keys.keepers, pool)
        pipe.execute()

    def keeper_stop_requested(self, pool: str) -> str | None:
        """Who asked this keeper to stop (``rhtc pool stop``), or None."""
        raw = self.r.get(self.keys.keeper_stop(pool))
        return raw.decode() if raw is not None else None

    # -- read by rhtc status, rhtc pool stop -------------------------------------------
    def keepers(self) -> list[dict]:
        """The state of every keeper whose state is current (stale entries are dropped)."""
        pools = [p.decode() for p in self.r.zrange(self.keys.keepers, 0, -1)]
        if not pools:
            return []
        pipe = self.r.pipeline(transaction=False)
        for p in pools:
            pipe.hgetall(self.keys.keeper(p))
        out, gone, malformed = [], [], []
        for p, raw in zip(pools, pipe.execute()):
            if not raw:
                gone.append(p)
                continue
            try:
                out.append(keeper_state(raw, self.keys.keeper(p)))
            except MalformedRecord as err:         # skipped, named in rhtc status and the page
                malformed.append(err)
        self.malformed.read([self.keys.keeper(p) for p in pools] if self.malformed else (), malformed)
        if gone:
            self.r.zrem(self.keys.keepers, *gone)
        return out

    def keeper_events(self, pool: str, n: int = 20) -> list[dict]:
        key = self.keys.keeper_log(pool)
        return checked(self, key, self.r.lrange(key, 0, n - 1), KEEPER_EVENT)

    def workers_joined(self, since: float = 0.0) -> dict[str, float]:
        """Worker names whose latest incarnation claimed its name at ``since`` or later, with
        when (this machine's clock, s): the broker's record of who reached it, which stays
        after the worker left (``joined`` in broker/wire/keys.py), so a job whose worker served
        between two of the keeper's looks is known to have started."""
        offset = self.link.broker_ms() / 1000 - time.time()          # the broker's clock - ours
        low = "-inf" if since <= 0 else int((since + offset) * 1000)
        rows = self.r.zrangebyscore(self.keys.joined, low, "+inf", withscores=True)
        return {name.decode(): ms / 1000 - offset for name, ms in rows}

    def request_keeper_stop(self, pool: str, by: str, ttl: float = 600) -> None:
        self.r.set(self.keys.keeper_stop(pool), by, ex=int(ttl))
    # -- maps in flight ----------------------------------------------------------------------
    def request_cancel(self, map_id: str, by: str) -> int | None:
        """Ask the client of a map to cancel it (``rhtc cancel``): a cancel request among
        its results (it ends at once with MapCancelled and deletes the keys), and its queued
        tasks removed now, backlog and all, in case that client is gone (its keys then
        expire). Returns how many queued tasks were removed; None if there is no such map."""
        if not self.r.exists(self.keys.map(map_id)):
            return None
        pipe = self.r.pipeline(transaction=True)
        pipe.llen(self.keys.backlog(map_id))
        pipe.unlink(self.keys.backlog(map_id))
        pipe.rpush(self.keys.results(map_id), messages.cancel_request(by))
        pipe.expire(self.keys.results(map_id), self.settings.result_ttl)
        removed = int(pipe.execute()[0])
        return removed + self.inflight.purge(map_id)
    def maps_in_flight(self, tidy: bool = True) -> list[dict]:
        """Every client's maps: their info, ``unread_results``, ``queued`` (tasks in the shared
        queue and the map's backlog, not counting those routed to a worker) and
        ``client_alive`` (its client's beacon is current; None for a map without one).
        ``tidy=False``: read only (the registry's stale entries are left to their owners)."""
        ids = [m.decode() for m in self.r.zrange(self.keys.maps, 0, -1)]
        pipe = self.r.pipeline(transaction=False)
        for m in ids:
            pipe.hgetall(self.keys.map(m))
            pipe.llen(self.keys.results(m))
            pipe.llen(self.keys.backlog(m))
        pipe.lrange(self.keys.shared_queue, 0, self.settings.scan_step - 1)
        *raw, window = pipe.execute()
        in_shared: dict[str, int] = {}
        for frame in window:                  # a few tasks per map (fair turns): cheap to count
            ref = protocol.frame_ref(frame)
            if ref is not None:
                in_shared[ref.map_id] = in_shared.get(ref.map_id, 0) + 1
        out, gone, malformed = [], [], []
        for m, info, nres, nback in zip(ids, raw[0::3], raw[1::3], raw[2::3]):
            if not info:
                gone.append(m)
                continue
            try:
                d = map_entry(info, self.keys.map(m))
            except MalformedRecord as err:
                malformed.append(err)
                continue
            d.pop(MAP_NONCE, None)
            d.pop(MAP_SENT, None)
            for name in (MAP_REFUSED, MAP_ANSWERED, MAP_POOLED, MAP_PARTIAL_SEQ):
                d.pop(name, None)
            d.update(map_id=m, unread_results=nres, queued=nback + in_shared.get(m, 0), client_alive=None)
            out.append(d)
        beacons = [d[MAP_CLIENT] for d in out if d.get(MAP_CLIENT)]
        if beacons:
            alive = dict(zip(beacons, self.r.mget([self.keys.client(c) for c in beacons])))
            for d in out:
                if d.get(MAP_CLIENT):
                    d["client_alive"] = alive[d[MAP_CLIENT]] is not None
        if gone and tidy:
            self.r.zrem(self.keys.maps, *gone)
        self.malformed.read([self.keys.map(m) for m in ids] if self.malformed else (), malformed)
        return out
