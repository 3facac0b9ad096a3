"""Maps in flight, seen across the queues: where each task of a map is (queued, leased,
pooled, dead or answered), and taking a map's queued tasks out of the queues when it is
cancelled. The places of a map's tasks come from its indexes (:mod:`broker.wire.keys`: the
workers its tasks were routed to, ``map_routed``; those whose lease may hold its tasks or
partials, ``map_leased``), kept by the scripts that put tasks there, so neither the audit
nor the cancel makes a call per registered worker. Every walk over a queue goes in bounded
steps (``settings.scan_step`` items per script call), so a long queue never blocks Redis.
Used by the client's map queue (:class:`broker.mapqueue.MapQueue`: audit, cancel) and the
operator's pool view (:class:`broker.pool.PoolView`: ``rhtc cancel``).

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.maps.audit("0123456789abcdef"), s.pool.request_cancel("0123456789abcdef", "me")
    (set(), None)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from . import scriptargs

if TYPE_CHECKING:  # pragma: no cover
    from .link import Link


def _indices(found: bytes) -> set[int]:
    """The task indices a call of ``lua/audit.lua`` found (4 bytes each, end to end)."""
    return {int.from_bytes(found[i:i + 4], "big") for i in range(0, len(found), 4)}


class InFlight:
    """A map's tasks across the queues (over the shared connection of ``link``)."""

    def __init__(self, link: "Link"):
        self.r, self.keys, self.settings, self.scripts = link.r, link.keys, link.settings, link.scripts

    def routed(self, map_id: str) -> list[str]:
        """The workers whose own queue ``map_id``'s tasks were routed to (its ``routed`` index)."""
        return sorted(w.decode() for w in self.r.smembers(self.keys.map_routed(map_id)))

    def queues(self, map_id: str) -> list[str]:
        """The shared queue and the queues ``map_id``'s tasks were routed to."""
        return [self.keys.shared_queue, *(self.keys.queue(w) for w in self.routed(map_id))]

    def audit(self, map_id: str) -> set[int]:
        """Indices of a map's tasks that are somewhere: queued, leased by a live incarnation
        (in a partial leased to a merger, too), in a partial waiting in the map's pool, dead
        or answered.

        The places are read in the order tasks move through them (``lua/audit.lua``): the
        map's backlog and the queues its tasks were routed to, in bounded steps (tasks only
        leave them, for places read later); the shared queue, in bounded steps, its last
        window read in one atomic step with every lease that may hold the map's tasks and
        its pool, between which tasks and partials move both ways (the tree of partials,
        a lease given back); then its dead and results lists (only this client takes from
        them). However busy the tree, every task is seen where it is; the number of calls
        grows with the map's queued tasks (a call per ``settings.scan_step``), never with
        the number of workers."""
        k, step = self.keys, self.settings.scan_step

        def lists(start: int, keys: list[str]) -> list:
            return scriptargs.audit_lists(ns=k.ns, map_id=map_id, scan_step=step, start=start, lists=keys)

        def queues(start: int, workers: list[str]) -> list:
            return scriptargs.audit_routed(ns=k.ns, map_id=map_id, scan_step=step, start=start, workers=workers)

        seen = self._walk(lists, [k.backlog(map_id)]) | self._walk(queues, self.routed(map_id))
        return seen | self._past_the_queues(map_id) | self._walk(lists, [k.dead(map_id), k.results(map_id)])

    def _walk(self, args: Callable[[int, list[str]], list], places: list[str]) -> set[int]:
        """The indices a walk of ``places`` finds, ``settings.scan_step`` items per call;
        ``args(start, places left)``: the arguments of the next call."""
        seen, start = set(), 0
        while places:
            got = self.scripts["audit"](args=args(start, places))
            places, start = places[int(got[0]):], int(got[1])
            seen |= _indices(got[2])
        return seen

    def _past_the_queues(self, map_id: str) -> set[int]:
        """The shared queue a window at a time; the call whose window reaches its end reads
        the map's leases and pool in the same step. A queue that grows while it is read is
        read for as many windows as it had at first, and one more; then the next call reads
        what is left of it whole, so the walk ends however fast it grows."""
        script, step, seen = self.scripts["audit"], self.settings.scan_step, set()
        start, windows = 0, None
        while start >= 0:
            got = script(args=scriptargs.audit_rest(ns=self.keys.ns, map_id=map_id, scan_step=step, start=start,
                                                    last=int(windows == 0)))
            start = int(got[0])
            windows = (-(-int(got[1]) // step) if windows is None else windows) - 1
            seen |= _indices(got[2])
        return seen

    def leased_to(self, worker: str, map_id: str) -> set[int]:
        """Indices of a map's tasks leased to ``worker``'s live incarnation (running, waiting
        in its batch, or finished in a partial it has not handed in)."""
        return _indices(self.scripts["audit"](args=scriptargs.audit_lease(ns=self.keys.ns, map_id=map_id,
                                                                           worker=worker))[0])

    def drain_pool(self, map_id: str, at_least: int) -> int:
        """Hand the partials of a map's pool (the tree of partials, ``lua/merge.lua``) to
        its client if together they cover at least ``at_least`` tasks; returns how many
        tasks they cover (0: nothing moved). The client's call when its map made no
        progress for a while (the broker's own count moves them at once when every task
        is answered or pooled)."""
        return int(self.scripts["merge"](args=scriptargs.merge_drain(
            ns=self.keys.ns, map_id=map_id, at_least=at_least, result_grace=self.settings.result_grace)))

    def cancel(self, map_id: str) -> int:
        """End a map and remove its queued tasks from the queues (in bounded steps);
        returns how many were removed."""
        queues = self.queues(map_id)                  # (read first: its index goes with its keys)
        pipe = self.r.pipeline(transaction=True)
        pipe.llen(self.keys.backlog(map_id))          # deleted with the map's keys (unlinked: a long
        self.scripts["sweep"](args=scriptargs.sweep(ns=self.keys.ns, every_ms=0, scan_step=self.settings.scan_step,
                                                    ended=[map_id]), client=pipe)
        removed = int(pipe.execute()[0])              # backlog is freed in the background), blobs too
        return removed + self.purge(map_id, queues)

    def purge(self, map_id: str, queues: list[str] | None = None) -> int:
        """Remove a map's queued tasks from the shared queue and the queues its tasks were
        routed to (or ``queues``), in bounded steps; returns how many."""
        script, step, removed = self.scripts["purge"], self.settings.scan_step, 0
        for q in self.queues(map_id) if queues is None else queues:
            todo = int(self.r.llen(q))
            while todo > 0:
                gone, seen = script(args=scriptargs.purge(ns=self.keys.ns, map_id=map_id, queue=q,
                                                          scan_step=min(step, todo)))
                removed += int(gone)
                todo = todo - int(seen) if int(seen) else 0
        return removed
