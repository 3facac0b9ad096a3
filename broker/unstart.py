"""A map whose start the broker refused goes away whole, with commands a full broker runs.

A map starts with several writes (its signed liveness token, the library's load on a fresh
broker, each call of the enqueue script: function, registration and tasks, then the
registry's renewal, :mod:`broker.registry`). Redis out of memory refuses any of them; which
one meets it first is luck, so what the refused ones left behind is too. A full broker
also refuses every call of our scripts (functions without ``allow-oom``), the cancel's
among them; it still runs deletions. So the map's keys (:data:`broker.keys.MAP_OWNED`),
the blobs of any result already handed in, its registry entry and the tasks it queued
are removed here with ``UNLINK``, ``ZREM`` and ``LREM``, none of which Redis refuses
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

import struct
from typing import TYPE_CHECKING, Iterable

from . import blobs

if TYPE_CHECKING:  # pragma: no cover
    from .storage import Storage

BATCH = 1000        # commands per round trip (Redis serves others between them)


def unstart_map(storage: "Storage", map_id: str, queued: Iterable[tuple[str | None, bytes]] = ()) -> None:
    """Remove what a refused start of map ``map_id`` may have left: its keys, the blobs of
    its results, its registry entry and ``queued``, the (worker or None, frame) pairs it
    sent (a frame routed to a worker may have gone to the shared queue instead: the
    worker was not live). Raises what the connection raises (the keys expire anyway)."""
    k, r = storage.keys, storage.r
    pipe = r.pipeline(transaction=False)
    pipe.lrange(k.results(map_id), 0, -1)
    pipe.lrange(k.pool(map_id), 0, -1)
    prefix = k.blob(f"{map_id}:")
    found = [_blob_key(item) for items in pipe.execute() for item in items if blobs.is_stub(item)]
    pipe = r.pipeline(transaction=False)
    pipe.unlink(*k.map_keys(map_id), *(key for key in found if key and key.startswith(prefix)))
    pipe.zrem(k.maps, map_id)
    for n, (worker, frame) in enumerate(queued, 1):
        if worker:
            pipe.lrem(k.queue(worker), 1, frame)
        pipe.lrem(k.shared_queue, 1, frame)
        if n % BATCH == 0:
            pipe.execute()
    pipe.execute()


def _blob_key(stub: bytes) -> str | None:
    try:
        return blobs.parse_stub(stub)[1]
    except (ValueError, IndexError, UnicodeDecodeError, struct.error):   # not ours: not deleted
        return None
