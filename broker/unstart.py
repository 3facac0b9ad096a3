"""A map whose start the broker refused goes away whole, with commands a full broker runs.

A map starts with several writes (its signed liveness token, the library's load on a fresh
broker, each call of the enqueue script: function, registration and tasks, then the
registry's renewal, :mod:`broker.registry`). Redis out of memory refuses any of them; which
one meets it first is luck, so what the refused ones left behind is too. A full broker
also refuses every call of our scripts (functions without ``allow-oom``), the cancel's
among them; it still runs deletions. So the map's keys (:data:`broker.wire.keys.MAP_OWNED`),
the blobs of any result already handed in, its registry entry and the tasks it queued
are removed (:meth:`broker.mapqueue.MapQueue.unstart`) with ``UNLINK``, ``ZREM`` and ``LREM``, none of which Redis refuses
when full. What stays is not the map's: the function blob (by content, maybe another
map's too; it expires) and the client's beacon (it expires).

Example (against a running broker)::

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.r.hset(s.keys.map("0123456789abcdef"), "n", 1); s.r.rpush(s.keys.shared_queue, b"frame")
    ...     b.refuse_writes()
    ...     unstart_map(s, "0123456789abcdef", [(None, b"frame")])
    ...     s.r.exists(s.keys.map("0123456789abcdef"), s.keys.shared_queue)
    1
    1
    0
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from .storage import Storage


def unstart_map(storage: "Storage", map_id: str, queued: Iterable[tuple[str | None, bytes]] = ()) -> None:
    """Remove what a refused start of map ``map_id`` may have left: its keys, the blobs of
    its results, its registry entry and ``queued``, the (worker or None, frame) pairs it
    sent (a frame routed to a worker may have gone to the shared queue instead: the
    worker was not live). Raises what the connection raises (the keys expire anyway)."""
    storage.maps.unstart(map_id, queued)
