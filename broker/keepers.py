"""What a pool keeper (condor/keeper.py) tells the broker, and what ``rhtc status`` reads
back: its state (wanted and actual size, jobs by state), a capped log of what it did and
why, which workers have reached the broker (even those that left since), the pool's floor
(the keeper's minimum, under which no idle worker leaves), the stop
request of ``rhtc pool stop``, and the workers that leave on their own terms. Mixed into
:class:`broker.storage.Storage` (uses its connection, keys, scripts and settings).

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.publish_keeper("p1", {"wanted": 3, "running": 2}, ttl=30)
    ...     s.keeper_event("p1", {"what": "replaced", "job": "12.0", "why": "held: out of memory"})
    ...     [k["pool"] for k in s.keepers()], s.keeper_events("p1")[0]["why"]
    (['p1'], 'held: out of memory')
"""
from __future__ import annotations

import json
import time

from .records import KEEPER_EVENT, MalformedRecord, checked, keeper_state

#: what the keeper's log keeps, at most, and how long after its last entry
KEEPER_LOG_ENTRIES = 200
KEEPER_LOG_TTL = 86400


class Keepers:
    """Pool-keeper methods of :class:`~broker.storage.Storage`."""

    # -- written by the keeper ---------------------------------------------------------
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
        after the worker left (``joined`` in broker/keys.py), so a job whose worker served
        between two of the keeper's looks is known to have started."""
        offset = self.broker_ms() / 1000 - time.time()          # the broker's clock - ours
        low = "-inf" if since <= 0 else int((since + offset) * 1000)
        rows = self.r.zrangebyscore(self.keys.joined, low, "+inf", withscores=True)
        return {name.decode(): ms / 1000 - offset for name, ms in rows}

    def request_keeper_stop(self, pool: str, by: str, ttl: float = 600) -> None:
        self.r.set(self.keys.keeper_stop(pool), by, ex=int(ttl))

    # -- workers that leave on their own terms ----------------------------------------------
    def may_leave(self, worker: str, force: bool = False) -> bool:
        """Whether ``worker`` may leave now: always with ``force`` (its lifetime is up),
        else only above the pool's floor; a yes counts it as leaving."""
        now = int(time.time() * 1000)
        return bool(int(self._scripts["leave"](args=[self.keys.ns, worker, now, "1" if force else "0",
                                                     KEEPER_LOG_TTL])))

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
