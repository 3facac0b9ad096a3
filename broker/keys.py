"""The key schema: every Redis key the project writes, its type and its owner.

All keys live under the namespace (``rhtc:<user>`` by default). A task moves through
these states, each one a place you can look at with ``redis-cli``:

==============================  ======  ===============================================
key                             type    what / who deletes it
==============================  ======  ===============================================
``{ns}:q:shared``               list    queued tasks any worker may take (LPUSH in, RPOP out)
``{ns}:q:w:{worker}``           list    queued tasks routed to one worker; reaped with it
``{ns}:bell:shared`` / ``:w:``  list    wake-up tokens, one per queued task (capped)
``{ns}:lease:{worker}``         hash    task id -> task frame: started, in flight on worker;
                                        renewed by ``hb``; requeued by the reaper when ``hb`` dies
``{ns}:hb:{worker}``            string  heartbeat + live status JSON, expires after the lease time
``{ns}:workers``                set     registered workers; the reaper removes dead ones
``{ns}:holds:{worker}``         set     routing keys of chunks the worker has cached; expires
``{ns}:map:{map}``              hash    a map in flight (function hash, versions, size); expires
                                        unless its client keeps it alive; deleted when done
``{ns}:maps``                   zset    map ids by start time, for ``rhtc status``
``{ns}:res:{map}``              list    finished and failed results; expires; deleted when read
``{ns}:tries:{map}``            hash    task index -> attempt history (which worker, how it died)
``{ns}:dead:{map}``             list    task frames that exhausted their retries (poison tasks)
``{ns}:fn:{hash}``              string  a packed function, by content hash; expires
``{ns}:log``                    list    recent problems workers saw (bad frames...), capped
``{ns}:reaper``                 string  lock so that one process reaps at a time; expires
``{ns}:floor:q`` / ``:res``     list    ``bench overhead``'s bare-queue floor; deleted after it
==============================  ======  ===============================================
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Keys:
    """Key names under one namespace.

    >>> Keys("rhtc:alice").queue("w1")
    'rhtc:alice:q:w:w1'
    """

    ns: str

    @property
    def shared_queue(self) -> str:
        return f"{self.ns}:q:shared"

    def queue(self, worker: str) -> str:
        return f"{self.ns}:q:w:{worker}"

    @property
    def shared_bell(self) -> str:
        return f"{self.ns}:bell:shared"

    def bell(self, worker: str) -> str:
        return f"{self.ns}:bell:w:{worker}"

    def lease(self, worker: str) -> str:
        return f"{self.ns}:lease:{worker}"

    def heartbeat(self, worker: str) -> str:
        return f"{self.ns}:hb:{worker}"

    @property
    def workers(self) -> str:
        return f"{self.ns}:workers"

    def holds(self, worker: str) -> str:
        return f"{self.ns}:holds:{worker}"

    def map(self, map_id: str) -> str:
        return f"{self.ns}:map:{map_id}"

    @property
    def maps(self) -> str:
        return f"{self.ns}:maps"

    def results(self, map_id: str) -> str:
        return f"{self.ns}:res:{map_id}"

    def tries(self, map_id: str) -> str:
        return f"{self.ns}:tries:{map_id}"

    def dead(self, map_id: str) -> str:
        return f"{self.ns}:dead:{map_id}"

    def function(self, fn_hash: str) -> str:
        return f"{self.ns}:fn:{fn_hash}"

    @property
    def log(self) -> str:
        return f"{self.ns}:log"

    @property
    def reaper_lock(self) -> str:
        return f"{self.ns}:reaper"

    def map_keys(self, map_id: str) -> list[str]:
        """Every key a map owns (deleted together when the map ends)."""
        return [self.map(map_id), self.results(map_id), self.tries(map_id), self.dead(map_id)]
