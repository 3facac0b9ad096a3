"""An idle pool costs the broker little, however many workers it has: the broker's side,
without worker processes.

Every idle worker asks the take script for work about once a second; when its queues are
empty the script looks for a backed-up queue to steal from. It used to look at every
registered worker's queue (one LLEN each): a thousand idle workers cost a million LLENs
a second. Now it looks only at the queues the enqueue script routed tasks to, and the set
of those queues forgets the empty ones; an idle worker's heartbeat is one script run
(reaping and the sweep of dead clients' maps ride on it), every ``idle_heartbeat`` s while
it holds nothing. Real redis-server, the real take, beat and lease scripts; the workers are
registered names (and one :class:`~worker.supervisor.Supervisor` in this process). (Real
idle workers that wait without taking, steal, and stop at once:
tests/scenarios/test_idle_workers_wait_quietly.py.)"""
from __future__ import annotations

import uuid

from rhtc.broker import scriptargs
from rhtc.broker.wire.messages import WorkerStatus
from tests.helpers import identity


def _register(storage, n: int) -> list[tuple[str, str]]:
    names = []
    for i in range(n):
        name, inc = f"idle-{i:03d}", uuid.uuid4().hex[:12]
        status = WorkerStatus(name=name, host="node-a", pid=1000 + i, incarnation=inc, key_fingerprint="f")
        assert storage.lease.claim(name, inc, status).ok
        names.append((name, inc))
    return names


def _calls(storage, command: str) -> int:
    return int(storage.r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_an_idle_take_does_not_look_at_every_workers_queue(storage):
    pool = _register(storage, 60)
    storage.lease.take(*pool[0], max_tasks=1)                     # loads the script
    storage.r.config_resetstat()
    for name, inc in pool:
        held, _, batch = storage.lease.take(name, inc, max_tasks=1)
        assert held and batch == []
    llens = _calls(storage, "llen")
    assert llens < len(pool), (
        f"60 idle takes ran {llens} LLENs: each idle take looks at every worker's queue "
        "(O(workers²) commands a second for an idle pool)")


def test_the_routed_set_forgets_empty_and_unregistered_queues(storage):
    """The set of routed queues is bounded: a name whose queue is empty (or whose worker
    left) is removed by the first thief that looks at it."""
    (name, inc), (other, _) = _register(storage, 2)
    storage.r.sadd(storage.keys.routed, other, "ghost-worker")   # as if tasks had been routed there
    storage.lease.take(name, inc, max_tasks=1)
    assert storage.r.smembers(storage.keys.routed) == set()


def test_a_heartbeat_says_which_pool_duties_are_due_once_a_second(storage):
    """Reaping and the dead clients' sweep ride on the heartbeat's one round trip: the
    first beat of each second in the pool is told to do both (one throttle: one write a
    beat), the others are not."""
    (a, ia), (b, ib) = _register(storage, 2)
    status = WorkerStatus(name=a, host="h", pid=1, incarnation=ia, key_fingerprint="f")
    first = storage.lease.heartbeat(a, ia, status, duties=5.0)
    second = storage.lease.heartbeat(b, ib, dataclasses_replace(status, name=b, incarnation=ib), duties=5.0)
    assert first.ok and first.reap_due and first.sweep_due
    assert second.ok and not second.reap_due and not second.sweep_due
    storage.r.delete(storage.keys.reap_due)
    third = storage.lease.heartbeat(b, ib, dataclasses_replace(status, name=b, incarnation=ib), duties=5.0)
    assert third.reap_due and third.sweep_due
    assert not storage.lease.heartbeat(a, ia, status).duties          # without duties: never told


def dataclasses_replace(obj, **kw):
    import dataclasses
    return dataclasses.replace(obj, **kw)


def test_a_maps_window_grows_while_idle_workers_wait(storage):
    """A task popped by an idle worker's blocking pop lets two of its map's backlog in when
    the shared queue is empty by then (idle workers are waiting: the window doubles until
    each has a task), one when tasks are still waiting there (fair turns)."""
    from rhtc.client import submit
    (w, inc), = _register(storage, 1)
    h = submit(identity, range(40), broker=storage.config)
    try:
        window = storage.settings.fair_window
        shared, backlog = storage.keys.shared_queue, storage.keys.backlog(h.map_id)
        assert storage.r.llen(shared) == window
        popped = [storage.r.rpop(shared) for _ in range(window)]    # idle workers' blocking pops

        def lease(frame):                                            # ... and their leases
            storage.link.scripts["lease_one"](args=scriptargs.lease_one(ns=storage.keys.ns, worker=w, incarnation=inc, leases=1, frame=frame, from_shared=1))
        lease(popped[0])
        assert storage.r.llen(shared) == 2, "the window did not grow while the queue ran dry"
        lease(popped[1])
        assert storage.r.llen(shared) == 3, "the window grew although tasks were waiting"
        assert storage.r.llen(backlog) == 40 - window - 3
    finally:
        h.cancel()


def test_a_heartbeat_after_the_name_expired_puts_the_worker_back_in_the_pool(storage):
    """The light heartbeat (beat.lua) renews the workers set and the holds' expiry only on
    a full beat (every FULL_BEAT s) or when the name had expired: a worker that stalled past
    its lease, was reaped from the set, and beats again is back in the set at once."""
    [(name, inc)] = _register(storage, 1)
    status = WorkerStatus(name=name, host="h", pid=1, incarnation=inc, key_fingerprint="f")
    storage.r.sadd(storage.keys.holds(name), "chunk-a")
    assert storage.lease.heartbeat(name, inc, status).ok
    storage.r.srem(storage.keys.workers, name)                 # the reaper saw it dead...
    storage.r.delete(storage.keys.incarnation(name))           # ...its name had expired
    assert storage.lease.heartbeat(name, inc, status).ok
    assert storage.r.sismember(storage.keys.workers, name)
    assert storage.r.ttl(storage.keys.holds(name)) > 0
    other = "someone-else-" + inc
    storage.r.set(storage.keys.incarnation(name), other)        # another incarnation took it over
    got = storage.lease.heartbeat(name, inc, status)
    assert not got.ok and got.holder == other


def test_a_worker_holding_nothing_beats_half_as_often_and_has_nothing_to_reconcile(storage):
    """An idle worker's heartbeat comes every ``idle_heartbeat`` s (its name still lives one
    lease) and its lease is not reconciled while it is empty; as soon as its lease holds an
    entry, it beats every ``heartbeat`` s and the reconcile runs (here it requeues an entry
    of another incarnation)."""
    from rhtc.broker.wire import keys
    from rhtc.worker.supervisor import Supervisor

    sup = Supervisor(storage.config, name="idle-beat", settings_=storage.settings, storage=storage)
    sup.claim()
    st = storage.settings
    assert st.idle_heartbeat > st.heartbeat and st.idle_heartbeat * 2.5 <= st.lease + 1e-9
    storage.r.config_resetstat()
    for _ in range(3):
        assert sup.beat()
        assert sup.beat_every == st.idle_heartbeat
    assert _calls(storage, "hgetall") == 0, "an empty lease was reconciled"
    lease = storage.keys.lease("idle-beat")
    stale = "0" * keys.INCARNATION_LEN + "0" * keys.LEASE_TIME_LEN + "not a frame"
    storage.r.hset(lease, "0123456789abcdef\x00\x00\x00\x01", stale)
    assert sup.beat()
    assert sup.beat_every == st.heartbeat
    assert _calls(storage, "hgetall") >= 1 and storage.r.hlen(lease) == 0, \
        "a lease holding another incarnation's entry was not reconciled at the beat"
