"""Maps in flight, seen across every queue: where each task of a map is (queued, leased,
pooled, dead or answered), and taking a map's queued tasks out of every queue when it is
cancelled. Every walk over a queue goes in bounded steps (``settings.scan_step`` items
per script call), so a long queue never blocks Redis. Used by the client's map queue
(:class:`broker.mapqueue.MapQueue`: audit, cancel) and the operator's pool view
(:class:`broker.pool.PoolView`: ``rhtc cancel``).

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.maps.audit("0123456789abcdef"), s.pool.request_cancel("0123456789abcdef", "me")
    (set(), None)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import scriptargs
from .wire.keys import MAP_PARTIAL_SEQ

if TYPE_CHECKING:  # pragma: no cover
    from .link import Link

#: walks of one audit while the tree moves partials from a map's pool to mergers under it
AUDIT_WALKS = 3


class InFlight:
    """A map's tasks across every queue (over the shared connection of ``link``)."""

    def __init__(self, link: "Link"):
        self.r, self.keys, self.settings, self.scripts = link.r, link.keys, link.settings, link.scripts

    def queues(self) -> list[str]:
        """The shared queue and every registered worker's own queue."""
        return [self.keys.shared_queue] + [self.keys.queue(w.decode()) for w in self.r.smembers(self.keys.workers)]

    def audit(self, map_id: str) -> set[int] | None:
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
        # in the order tasks move (backlog -> shared queue -> lease -> pool, dead or results),
        # so that a task moving during the walk lands where the walk has not looked yet; the
        # pool also before the leases: a merger takes partials from it into its lease
        # (lua/merge.lua), which the walk of a thousand leases may have passed already
        seen = self._walk_lists(map_id, [self.keys.backlog(map_id), *self.queues(), self.keys.pool(map_id)])
        for w in self.r.smembers(self.keys.workers):
            seen |= self.leased_to(w.decode(), map_id)
        return seen | self._walk_lists(map_id, [self.keys.pool(map_id), self.keys.dead(map_id),
                                                self.keys.results(map_id)])

    def _walk_lists(self, map_id: str, lists: list[str]) -> set[int]:
        """The indices of a map's tasks in ``lists``, read a step at a time."""
        script, step, seen = self.scripts["audit"], self.settings.scan_step, set()
        for key in lists:
            start = 0
            while start >= 0:
                got = script(args=scriptargs.audit(ns=self.keys.ns, map_id=map_id, kind="list", where=key,
                                                   start=start, scan_step=step))
                start = int(got[0])
                seen.update(int.from_bytes(x, "big") for x in got[1:])
        return seen

    def leased_to(self, worker: str, map_id: str) -> set[int]:
        """Indices of a map's tasks leased to ``worker``'s live incarnation (running, waiting
        in its batch, or finished in a partial it has not handed in)."""
        got = self.scripts["audit"](args=scriptargs.audit(ns=self.keys.ns, map_id=map_id, kind="lease",
                                                          where=worker, start=0, scan_step=self.settings.scan_step))
        return {int.from_bytes(x, "big") for x in got[1:]}

    def drain_pool(self, map_id: str, at_least: int) -> int:
        """Hand the partials of a map's pool (the tree of partials, ``lua/merge.lua``) to
        its client if together they cover at least ``at_least`` tasks; returns how many
        tasks they cover (0: nothing moved). The client's call when its map made no
        progress for a while (the broker's own count moves them at once when every task
        is answered or pooled)."""
        return int(self.scripts["merge"](args=scriptargs.merge_drain(
            ns=self.keys.ns, map_id=map_id, at_least=at_least, result_grace=self.settings.result_grace)))

    def cancel(self, map_id: str) -> int:
        """End a map and remove its queued tasks from every queue (in bounded steps);
        returns how many were removed."""
        pipe = self.r.pipeline(transaction=True)
        pipe.llen(self.keys.backlog(map_id))          # deleted with the map's keys (unlinked: a long
        self.scripts["sweep"](args=scriptargs.sweep(ns=self.keys.ns, every_ms=0, scan_step=self.settings.scan_step,
                                                    ended=[map_id]), client=pipe)
        removed = int(pipe.execute()[0])              # backlog is freed in the background), blobs too
        return removed + self.purge(map_id)

    def purge(self, map_id: str) -> int:
        """Remove a map's queued tasks from the shared and the workers' queues (in bounded
        steps); returns how many."""
        script, step, removed = self.scripts["purge"], self.settings.scan_step, 0
        for q in self.queues():
            todo = int(self.r.llen(q))
            while todo > 0:
                gone, seen = script(args=scriptargs.purge(ns=self.keys.ns, map_id=map_id, queue=q,
                                                          scan_step=min(step, todo)))
                removed += int(gone)
                todo = todo - int(seen) if int(seen) else 0
        return removed
