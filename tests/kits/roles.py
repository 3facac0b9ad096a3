"""What the contract tests of the adapter's three roles share (tests/integration/
test_maps_role.py, test_lease_role.py, test_pool_role.py): a worker that holds its name, a
map built and queued as the client builds and queues one, the frames a worker hands in
(results, partials), and the places a task can be, read raw from the keys of
broker/wire/keys.py.

Nothing here runs a worker process: the test plays the worker by calling ``storage.lease``
itself, and the client by calling ``storage.maps``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from typing import Iterable, Iterator

from rhtc.broker.storage import Storage
from rhtc.broker.wire import keys, protocol
from rhtc.broker.wire.merge import encode_partial
from rhtc.broker.wire.messages import ResultMeta, WorkerStatus
from rhtc.broker.wire.settings import settings

META = ResultMeta(worker="w", host="h", pid=1, start=1.0, stop=2.0)


@dataclasses.dataclass(frozen=True)
class Worker:
    """A name held by one incarnation (claimed through ``storage.lease.claim``)."""

    name: str
    inc: str
    status: WorkerStatus


def status_of(name: str, inc: str, key: bytes | None = None, **fields) -> WorkerStatus:
    fp = protocol.key_fingerprint(key) if key is not None else "f"
    return WorkerStatus(name=name, host=fields.pop("host", "node"), pid=fields.pop("pid", 1), incarnation=inc,
                        key_fingerprint=fp, **fields)


def claim(storage: Storage, name: str | None = None, **fields) -> Worker:
    """Claim ``name`` (a fresh one by default) for a fresh incarnation; its status is signed
    with the broker's key, as a worker's is."""
    name = name or "w-" + uuid.uuid4().hex[:8]
    inc = uuid.uuid4().hex[:keys.INCARNATION_LEN]
    status = status_of(name, inc, storage.config.key, **fields)
    assert storage.lease.claim(name, inc, status).ok
    return Worker(name, inc, status)


def kill(storage: Storage, worker: Worker) -> None:
    """The worker stops heartbeating: its name and status expire (what a lease's end does)."""
    storage.r.delete(storage.keys.incarnation(worker.name), storage.keys.heartbeat(worker.name))


@dataclasses.dataclass(frozen=True)
class MapSpec:
    """A map as its client builds it: id, nonce, signed function and its hash, task frames."""

    map_id: str
    nonce: str
    fn: bytes
    fn_hash: str
    frames: list[bytes]

    def tid(self, i: int) -> bytes:
        return protocol.TaskRef(self.map_id, i).task_id


def build_map(key: bytes, n: int) -> MapSpec:
    map_id, nonce = uuid.uuid4().hex[:16], protocol.new_nonce()
    fn = protocol.sign(key, protocol.dumps(len))
    fh = protocol.function_hash(fn)
    return MapSpec(map_id, nonce, fn, fh, [protocol.pack_task(key, map_id, i, nonce, fh, i) for i in range(n)])


def start_map(storage: Storage, n: int, *, to: str | None = None, home: str | None = None, fair: bool = True,
              client: str = "") -> MapSpec:
    """A map of ``n`` tasks queued by the client's enqueue: to the shared queue (and its
    backlog past the fair window), to worker ``to``'s own queue, or queued at ``home``."""
    m = build_map(storage.config.key, n)
    routed = {to: m.frames} if to and not home else ({} if home else {None: m.frames})
    storage.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": n}, routed, nonce=m.nonce, client=client, fair=fair,
                         home={home: m.frames} if home else None)
    return m


def register_map(storage: Storage, n: int, client: str = "") -> MapSpec:
    """A map of ``n`` tasks registered by the client's enqueue, none of them queued (the
    test puts its frames where it needs them)."""
    m = build_map(storage.config.key, n)
    storage.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": n}, {}, nonce=m.nonce, client=client)
    return m


@contextlib.contextmanager
def tuned(storage: Storage, **fields) -> Iterator[Storage]:
    """Another adapter on the same broker, its settings ``fields`` changed."""
    s = Storage(storage.config, dataclasses.replace(settings(), **fields))
    try:
        yield s
    finally:
        s.close()


# -- frames a worker hands in ------------------------------------------------------------------
def result(key: bytes, map_id: str, i: int, value: bytes = b"v") -> bytes:
    return protocol.pack_result(key, map_id, i, protocol.OK, value + b"%d" % i)


def partial(key: bytes, map_id: str, indices: list[int], pad: int = 0) -> bytes:
    """A partial (status MERGED) covering ``indices``; ``pad``: with that many random bytes
    in its value (a big one travels as a blob: broker/wire/blobs.py)."""
    payload = encode_partial(indices, [META] * len(indices), protocol.dumps((len(indices), os.urandom(pad))))
    return protocol.pack_result(key, map_id, indices[0], protocol.MERGED, payload)


def ids_of(m: MapSpec, indices: Iterable[int]) -> bytes:
    """The task ids of ``indices``, end to end (what a partial's hand-in names)."""
    return b"".join(m.tid(i) for i in indices)


# -- where tasks are, read raw ------------------------------------------------------------------
def indices(frames: Iterable[bytes]) -> list[int]:
    """The task indices of frames (task or result frames), in their order."""
    return [protocol.frame_index(f) for f in frames]


def queued(storage: Storage, key: str) -> list[int]:
    """The indices of the frames in list ``key``, head to tail (LPUSH in at the head: the
    oldest is last)."""
    return indices(storage.r.lrange(key, 0, -1))


def lease_of(storage: Storage, worker: str) -> dict[int, tuple[str, int, bytes]]:
    """A worker's lease hash: task index -> (incarnation, taken-at ms, frame)."""
    out = {}
    for tid, value in storage.r.hgetall(storage.keys.lease(worker)).items():
        at = keys.INCARNATION_LEN
        out[protocol.TaskRef.from_task_id(tid).index] = (value[:at].decode(), int(value[at:at + keys.LEASE_TIME_LEN]),
                                                         value[at + keys.LEASE_TIME_LEN:])
    return out


def lease_entry(inc: str, frame: bytes, taken_ms: int = 0) -> bytes:
    """A lease value as the scripts write it: incarnation | taken-at ms | frame."""
    return inc.encode() + b"%013d" % taken_ms + frame


def attempts(storage: Storage, map_id: str) -> dict[int, int]:
    """Task index -> runs of it that killed their worker (the map's ``attempts`` hash)."""
    return {int.from_bytes(k, "big"): int(v) for k, v in storage.r.hgetall(storage.keys.attempts(map_id)).items()}


def owned_keys(storage: Storage, map_id: str, *, end_kept: bool = False) -> list[str]:
    """The keys of the map (``keys.MAP_OWNED``) that exist; ``end_kept``: not counting its
    ``live`` key (which holds its signed end after the end)."""
    names = [k for k in keys.MAP_OWNED if not (end_kept and k == "live")]
    return [getattr(storage.keys, k)(map_id) for k in names if storage.r.exists(getattr(storage.keys, k)(map_id))]
