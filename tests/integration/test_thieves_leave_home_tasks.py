"""A thief leaves a task at home: a task queued for the worker that holds its chunk (the
client routed it there because that worker's cache has it) is not stolen from a live
owner that makes progress unless its queue is long (``RHTC_STEAL_HOME_MIN_QUEUE``); a
task placed on a worker only to balance a cold run is stolen as before, and so is a home
task of a dead or stuck owner.

Why: a warm AGC rerun whose cold placement had balanced file openings, not events, left
one worker 6 warm items and the other 12; the idle one stole from the other's tail,
opened the file and read the chunk again (0.2 s for an item that takes 0.025 s warm at
home), and the warm rerun read from the files (the warm assertions of the coffea tests).

Real parts: a real redis-server (conftest's ``storage``), the real enqueue and take
scripts; the owner and the thief are registered names, the owner's heartbeat says how
long its current task has run.
"""
from __future__ import annotations

import uuid

import pytest

from rhtc.broker.wire import protocol
from rhtc.broker.wire.messages import WorkerStatus
from tests.helpers import square


def _register(storage, name: str, task_seconds: float | None = 0.1) -> str:
    inc = uuid.uuid4().hex[:16]
    status = WorkerStatus(name=name, host="node", pid=1, incarnation=inc, key_fingerprint="f")
    assert storage.lease.claim(name, inc, status).ok
    if task_seconds is not None:           # busy with a task that has run this long
        storage.lease.heartbeat(name, inc, WorkerStatus(name=name, host="node", pid=1, incarnation=inc,
                                                  key_fingerprint="f", task_seconds=task_seconds))
    storage.r.hset(storage.keys.lease(name), "busy-with", "a task")
    return inc


def _map(storage, key: bytes, owner: str, home: int, placed: int) -> tuple[str, list[bytes]]:
    """A map whose first ``home`` tasks are queued for ``owner`` as holding their chunks,
    the next ``placed`` ones for ``owner`` only to balance."""
    map_id, nonce = uuid.uuid4().hex[:16], protocol.new_nonce()
    fn = protocol.sign(key, protocol.dumps(square))
    fh = protocol.function_hash(fn)
    frames = [protocol.pack_task(key, map_id, i, nonce, fh, i) for i in range(home + placed)]
    storage.maps.enqueue(map_id, fh, fn, {"n": len(frames)}, {owner: frames[home:]} if placed else {},
                        nonce=nonce, home={owner: frames[:home]} if home else None)
    return map_id, frames


def _steal(storage, thief: str, inc: str) -> int | None:
    """The index the thief's take stole, or None."""
    held, _, batch = storage.lease.take(thief, inc, 1)
    assert held
    refs = [protocol.frame_ref(frame) for frame, _ in batch]
    return refs[0].index if refs else None


@pytest.fixture
def pair(broker, storage):
    owner = "owner-" + uuid.uuid4().hex[:6]
    thief = "thief-" + uuid.uuid4().hex[:6]
    return owner, thief


def test_home_tasks_stay_with_a_live_owner_that_makes_progress(broker, storage, pair):
    owner, thief = pair
    _register(storage, owner)
    inc = _register(storage, thief)
    n = storage.settings.steal_min_queue + 2            # backed up enough to steal a placed task
    assert n < storage.settings.steal_home_min_queue
    _map(storage, broker.config.key, owner, home=n, placed=0)
    assert _steal(storage, thief, inc) is None, "a thief took a task from the worker that holds its chunk"
    assert storage.r.llen(storage.keys.queue(owner)) == n, "the task left its owner's queue"


def test_placed_tasks_are_stolen_first_and_home_ones_only_from_a_long_queue(broker, storage, pair):
    owner, thief = pair
    _register(storage, owner)
    inc = _register(storage, thief)
    home, placed = storage.settings.steal_home_min_queue - 3, 2
    _, frames = _map(storage, broker.config.key, owner, home=home, placed=placed)
    # placed tasks go after the home ones: the thief takes from the tail, the placed ones
    assert {_steal(storage, thief, inc), _steal(storage, thief, inc)} == {home, home + 1}
    assert _steal(storage, thief, inc) is None
    # a long queue of home tasks: stealing pays even at the cost of a cold read
    _map(storage, broker.config.key, owner, home=storage.settings.steal_home_min_queue, placed=0)
    assert _steal(storage, thief, inc) is not None


@pytest.mark.parametrize("owner_is", ["dead", "stuck"])
def test_home_tasks_of_a_dead_or_stuck_owner_are_stolen(broker, storage, pair, owner_is):
    owner, thief = pair
    stuck = storage.settings.steal_stuck_seconds + 5
    _register(storage, owner, task_seconds=None if owner_is == "dead" else stuck)
    if owner_is == "dead":
        storage.r.delete(storage.keys.heartbeat(owner))
    inc = _register(storage, thief)
    _map(storage, broker.config.key, owner, home=2, placed=0)
    assert _steal(storage, thief, inc) is not None, f"the home tasks of a {owner_is} owner stayed queued"


def test_the_home_marks_go_with_their_map(broker, storage, pair):
    owner, thief = pair
    _register(storage, owner)
    map_id, _ = _map(storage, broker.config.key, owner, home=3, placed=0)
    pinned = storage.keys.pinned(map_id)
    assert storage.r.exists(pinned) and 0 < storage.r.ttl(pinned) <= storage.settings.map_ttl
    storage.maps.cancel(map_id)
    assert not storage.r.exists(pinned)
