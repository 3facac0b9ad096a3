"""The indexes of where a map's tasks are (broker/wire/keys.py): ``map_routed``, the workers
whose own queue its tasks were routed to, and ``map_leased``, the workers whose lease may
hold its tasks or its partials. The client's audit reads those queues and those leases,
and only those (lua/audit.lua), so that its calls do not grow with the pool; the cancel
purges those queues. A worker missing from an index hides the map's tasks it holds from
the audit, which then sends them again.

The contract, against a real redis-server and the real scripts (the test plays the workers
by calling ``storage.lease``, and the client by calling ``storage.maps``):

* after every move of a task or a partial (enqueue, take, an idle worker's wake-up, a
  steal, a hand-in, the merge's park, take and hand-up, reconcile, reap, a new incarnation's
  claim, a retirement) each index names every worker that holds the map's tasks there (a
  superset: a worker stays until the audit finds it holds nothing of the map);
* the audit forgets the workers that hold nothing of the map, and only those;
* the indexes go with the map's other keys, whichever way the map ends (cancelled, ended
  by its client, dropped when its client died), live as the map meanwhile, and one
  recreated by a worker that takes a task of an ended map expires within a second.
"""
from __future__ import annotations

from rhtc.broker.wire import protocol
from rhtc.broker.wire.messages import HandedUp
from tests.kits.roles import build_map, claim, ids_of, kill, lease_of, owned_keys, partial, result, start_map, tuned


def _holding(storage, prefix: str, holds) -> set[str]:
    """The workers whose key under ``prefix`` (a lease, a queue) ``holds(key)``, read raw from
    every such key."""
    return {key.decode()[len(prefix):] for key in storage.r.scan_iter(match=prefix + "*") if holds(key)}


def indexed(storage, map_id: str) -> tuple[set[str], set[str]]:
    """Check both indexes against every worker's queue and lease; returns their members."""
    k, r = storage.keys, storage.r
    routed = {w.decode() for w in r.smembers(k.map_routed(map_id))}
    leased = {w.decode() for w in r.smembers(k.map_leased(map_id))}
    queued_at = _holding(storage, k.queue(""),
                         lambda q: any(protocol.frame_map_id(f) == map_id for f in r.lrange(q, 0, -1)))
    leased_at = _holding(storage, k.lease(""), lambda lease: any(t.startswith(map_id.encode()) for t in r.hkeys(lease)))
    assert queued_at <= routed, f"queues of the map's tasks missing from its routed index: {queued_at - routed}"
    assert leased_at <= leased, f"leases of the map's tasks missing from its leased index: {leased_at - leased}"
    return routed, leased


def test_after_every_move_each_index_names_every_worker_that_holds_the_map(storage):
    k, key = storage.keys, storage.config.key
    a, b, c, d, home = (claim(storage) for _ in range(5))
    m = build_map(key, 10)
    with tuned(storage, fair_window=2) as s:                   # shared 0 1, backlog 2..5, home's queue 6..9
        s.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": 10}, {None: m.frames[:6], home.name: m.frames[6:]},
                       nonce=m.nonce)
    assert indexed(storage, m.map_id) == ({home.name}, set())

    storage.lease.take(a.name, a.inc, 3)                       # take: 0 1 2
    assert indexed(storage, m.map_id)[1] == {a.name}
    assert storage.lease.wait_for_task(b.name, b.inc, timeout=5) is not None
    assert storage.lease.leased_token()[0]                     # an idle worker's wake-up: 3
    assert indexed(storage, m.map_id)[1] == {a.name, b.name}
    storage.lease.take(a.name, a.inc, 10)                      # 4 5: the shared queue and backlog run dry
    assert not storage.r.exists(k.shared_queue, k.backlog(m.map_id))
    storage.lease.take(home.name, home.inc, 1)                 # home runs one of its own
    with tuned(storage, steal_min_queue=2) as s:               # c steals from home's backed-up queue
        held, _, stolen = s.lease.take(c.name, c.inc, 1)
    assert held and len(stolen) == 1
    assert indexed(storage, m.map_id)[1] == {a.name, b.name, c.name, home.name}

    done, *folded = sorted(lease_of(storage, a.name))[:3]
    storage.lease.take(a.name, a.inc, 0, [(m.map_id, m.tid(done), result(key, m.map_id, done))])   # a hand-in
    indexed(storage, m.map_id)
    parked = storage.lease.merge_up(a.name, a.inc, m.map_id, 8, ids_of(m, folded), partial(key, m.map_id, folded),
                                    covers=2)                  # a parks a partial of two
    assert parked[1] == HandedUp.PARKED
    _, given, [(pid, item)] = storage.lease.merge_up(d.name, d.inc, m.map_id, 8)   # d, holding nothing of the
    assert given == HandedUp.INPUTS                            # map, takes it from the pool to merge
    assert d.name in indexed(storage, m.map_id)[1]
    assert storage.lease.merge_up(d.name, d.inc, m.map_id, 8, pid, item, covers=2)[1] == HandedUp.PARKED
    indexed(storage, m.map_id)                                 # (d's hand-up: back to the pool)

    storage.lease.reconcile(b.name, b.inc, gone=True)          # reconcile: b's goes back
    indexed(storage, m.map_id)
    storage.lease.take(b.name, b.inc, 1)
    kill(storage, a)
    assert storage.lease.reap(every=0) == [a.name]             # reap: a's others go back
    indexed(storage, m.map_id)
    kill(storage, c)
    claim(storage, c.name)                                     # a new incarnation of c: its predecessor's go back
    indexed(storage, m.map_id)
    storage.lease.retire(home.name)                            # home leaves: its lease and queue go back
    routed, leased = indexed(storage, m.map_id)

    audited = storage.maps.audit(m.map_id)
    assert audited == set(range(10))
    now_routed, now_leased = indexed(storage, m.map_id)
    assert now_routed == set() and routed == {home.name}, "the audit kept a queue that holds nothing of the map"
    holding = {w for w in leased if storage.maps.leased_to(w, m.map_id)}
    assert now_leased == holding and holding < leased, "the audit forgot a holder, or kept one that holds nothing"

    assert storage.maps.cancel(m.map_id) > 0                   # the end: cancelled
    assert owned_keys(storage, m.map_id, end_kept=True) == []


def test_the_indexes_live_as_the_map_and_go_with_it_however_it_ends(storage):
    k = storage.keys

    def running(routed: bool = False, client: str = ""):
        w = claim(storage)                                     # (a worker that holds nothing yet)
        m = start_map(storage, 4, to=w.name if routed else None, client=client)
        storage.lease.take(w.name, w.inc, 1)
        indexes = [k.map_leased(m.map_id), *([k.map_routed(m.map_id)] if routed else [])]
        assert storage.r.exists(*indexes) == len(indexes)
        assert all(0 < storage.r.ttl(i) <= storage.r.ttl(k.map(m.map_id)) for i in indexes), "an index outlives its map"
        return m

    m = running(routed=True)
    storage.maps.end(m.map_id)                                 # its client ended it
    assert owned_keys(storage, m.map_id, end_kept=True) == []
    m = running(client="gone")
    storage.r.delete(k.client("gone"))                         # its client died: the sweep drops it
    assert m.map_id in storage.maps.drop_dead_clients(every=0)
    assert owned_keys(storage, m.map_id) == []
    m = running()
    storage.r.delete(k.shared_queue)                           # (nothing of it in the queue after the end)
    storage.r.lpush(k.shared_queue, m.frames[3])
    storage.maps.end(m.map_id)
    thief = claim(storage)
    held, _, taken = storage.lease.take(thief.name, thief.inc, 1)   # a copy of a task of the ended map, taken
    assert held and taken                                      # with its signed end (to be refused):
    assert owned_keys(storage, m.map_id, end_kept=True) == []  # no index of the ended map comes back
