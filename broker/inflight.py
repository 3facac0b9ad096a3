"""Maps in flight, seen across every queue: which maps the broker holds and how many of
their tasks wait, where each task of a map is (queued, leased, dead or answered), and
taking a map's queued tasks out of every queue when it is cancelled. Every walk over a
queue goes in bounded steps (``settings.scan_step`` items per script call), so a long
queue never blocks Redis. Mixed into :class:`broker.storage.Storage` (uses its
connection, keys, scripts and settings); a map's own life (queued, kept alive, its
results fetched, ended) is in :mod:`broker.storage`.

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.maps_in_flight(), s.audit_map("0123456789abcdef"), s.request_cancel("0123456789abcdef", "me")
    ([], set(), None)
"""
from __future__ import annotations

from . import messages, protocol
from .keys import MAP_ANSWERED, MAP_CLIENT, MAP_NONCE, MAP_PARTIAL_SEQ, MAP_POOLED, MAP_REFUSED, MAP_SENT
from .records import MalformedRecord, map_entry


#: walks of one audit while the tree moves partials from a map's pool to mergers under it
AUDIT_WALKS = 3


class InFlight:
    """Methods of :class:`~broker.storage.Storage` that look at maps across the queues."""

    def _queues(self) -> list[str]:
        return [self.keys.shared_queue] + [self.keys.queue(w.decode()) for w in self.r.smembers(self.keys.workers)]

    def audit_map(self, map_id: str) -> set[int] | None:
        """Indices of a map's tasks that are somewhere: queued, leased by a live incarnation
        (in a partial leased to a merger, too), in a partial waiting in the map's pool, dead
        or answered. Walks the queues in bounded steps (``settings.scan_step`` items
        per script call), so a long queue never blocks Redis.

        Tasks only move forward along the walk's order, but for one move: a merger taking
        partials from the pool into its lease (``lua/merge.lua``), which the walk may have
        passed. A partial parked after the walk read the pool and taken by such a merger
        before the walk read the pool again is seen nowhere. That move counts the map's
        partial sequence, so a walk during which it changed is done again (a task seen in
        any walk is somewhere); None when it changed during every one of
        :data:`AUDIT_WALKS` walks: the audit cannot tell (the tree is busy; the next one
        will)."""
        seen: set[int] = set()
        for _ in range(AUDIT_WALKS):
            before = self.r.hget(self.keys.map(map_id), MAP_PARTIAL_SEQ)
            seen |= self._walk(map_id)
            if self.r.hget(self.keys.map(map_id), MAP_PARTIAL_SEQ) == before:
                return seen
        return None

    def _walk(self, map_id: str) -> set[int]:
        script, step, ns = self._scripts["audit"], self.settings.scan_step, self.keys.ns
        seen: set[int] = set()

        def walk(keys: list[str]) -> None:
            for key in keys:
                start = 0
                while start >= 0:
                    got = script(args=[ns, map_id, "list", key, start, step])
                    start = int(got[0])
                    seen.update(int.from_bytes(x, "big") for x in got[1:])
        # in the order tasks move (backlog -> shared queue -> lease -> pool, dead or results),
        # so that a task moving during the walk lands where the walk has not looked yet; the
        # pool also before the leases: a merger takes partials from it into its lease
        # (lua/merge.lua), which the walk of a thousand leases may have passed already
        walk([self.keys.backlog(map_id), *self._queues(), self.keys.pool(map_id)])
        for w in self.r.smembers(self.keys.workers):
            seen |= self.leased_to(w.decode(), map_id)
        walk([self.keys.pool(map_id), self.keys.dead(map_id), self.keys.results(map_id)])
        return seen

    def leased_to(self, worker: str, map_id: str) -> set[int]:
        """Indices of a map's tasks leased to ``worker``'s live incarnation (running, waiting
        in its batch, or finished in a partial it has not handed in)."""
        got = self._scripts["audit"](args=[self.keys.ns, map_id, "lease", worker, 0, self.settings.scan_step])
        return {int.from_bytes(x, "big") for x in got[1:]}

    def drain_pool(self, map_id: str, at_least: int) -> int:
        """Hand the partials of a map's pool (the tree of partials, ``lua/merge.lua``) to
        its client if together they cover at least ``at_least`` tasks; returns how many
        tasks they cover (0: nothing moved). The client's call when its map made no
        progress for a while (the broker's own count moves them at once when every task
        is answered or pooled)."""
        return int(self._scripts["merge"](args=[self.keys.ns, "drain", map_id, at_least, self.settings.result_grace]))

    def cancel_map(self, map_id: str) -> int:
        """End a map and remove its queued tasks from every queue (in bounded steps);
        returns how many were removed."""
        pipe = self.r.pipeline(transaction=True)
        pipe.llen(self.keys.backlog(map_id))          # deleted with the map's keys (unlinked: a long
        self._scripts["sweep"](args=[self.keys.ns, 0, self.settings.scan_step, map_id], client=pipe)
        removed = int(pipe.execute()[0])              # backlog is freed in the background), blobs too
        return removed + self._purge(map_id)

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
        return removed + self._purge(map_id)

    def _purge(self, map_id: str) -> int:
        """Remove a map's queued tasks from the shared and the workers' queues (in bounded
        steps); returns how many."""
        script, step, removed = self._scripts["purge"], self.settings.scan_step, 0
        for q in self._queues():
            todo = int(self.r.llen(q))
            while todo > 0:
                gone, seen = script(args=[self.keys.ns, map_id, q, min(step, todo)])
                removed += int(gone)
                todo = todo - int(seen) if int(seen) else 0
        return removed

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
