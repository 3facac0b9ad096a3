"""Broker state made by hand for the script tests: a worker that holds its name, and a map
queued with a signed function, as the real claim and enqueue scripts leave them."""
from __future__ import annotations

import uuid

from rhtc.broker.wire import protocol
from rhtc.broker.wire.messages import WorkerStatus


def claimed_worker(storage, name: str) -> str:
    """Claim ``name`` for a fresh incarnation; returns the incarnation."""
    inc = uuid.uuid4().hex[:16]
    assert storage.lease.claim(name, inc, WorkerStatus(name=name, host="h", pid=1, incarnation=inc,
                                                 key_fingerprint="f")).ok
    return inc


def queued_map(storage, key: bytes, n: int) -> str:
    """A map of ``n`` tasks registered (none queued); returns its id."""
    map_id, nonce = uuid.uuid4().hex[:16], protocol.new_nonce()
    fn = protocol.sign(key, protocol.dumps(len))
    storage.maps.enqueue(map_id, protocol.function_hash(fn), fn, {"n": n}, {}, nonce=nonce)
    return map_id
