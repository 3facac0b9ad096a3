"""Who is alive and what they hold: the workers' statuses (verified against forgery), their
queues' depths, and where each chunk is cached (in a worker's memory, or on its node's
disk tier). Mixed into :class:`broker.storage.Storage` (uses its connection, keys,
scripts and settings).

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     Storage(b.config).locate(["uuid:Events:0-100"])
    ({}, [])
"""
from __future__ import annotations

from typing import Sequence

from . import messages, records


class Pool:
    """Reader methods of :class:`~broker.storage.Storage` about the workers."""

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
        while int(self._scripts["drain"](args=[self.keys.ns, worker, self.settings.scan_step])):
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
