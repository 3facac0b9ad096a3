"""The contract of the client's map queue (``storage.maps``, broker/mapqueue.py) with a real
redis-server: each test drives one public method (or the Lua move behind it) and reads
the broker's state before and after, through the roles' own reads or the keys of
broker/wire/keys.py. No worker process: where a task must be leased or answered, the test
plays the worker through ``storage.lease``.

What a client relies on:

* ``enqueue`` registers the map (its hash, its signed liveness token, its entry in the
  registry, the function by content, the client's beacon) and queues every frame exactly
  once: up to the map's fair window in the shared queue, the rest in its backlog, in
  order; into a live worker's own queue when routed there (the tasks at home marked in the
  map's pin bitmap), into the shared queue when that worker is not live; a resubmission
  (``fair=False``) straight into the shared queue; a big map in several calls, none
  queued twice when a call is sent again; the client's ended maps it names are deleted;
* ``keep_alive`` renews the map's keys and token, says False once the map is gone, and
  never brings back the token of a map that ended; ``sign_end`` puts the signed end in
  the token's place (``drop``: and deletes the map's keys);
* ``fetch_results`` pops the map's results in order, at most ``count``, waiting up to its
  timeout for the first; ``unread_results``, ``dead_tasks``, ``attempt_history(ies)`` read
  what the workers left;
* ``audit`` finds a task wherever it is (backlog, shared queue, a worker's own queue, a live
  incarnation's lease, the map's pool of partials, its dead list, its results) and not in a
  stale incarnation's lease; ``leased_to`` names one worker's live entries;
* ``cancel`` removes the map's queued tasks from every queue and its keys; ``end`` (eager or
  lazy) leaves no key of the map; ``drop_dead_clients`` drops the maps whose client's beacon
  expired; ``unstart`` removes what a refused start queued; ``renew_entry`` forgets registry
  entries nobody renewed; ``drain_pool`` hands a stalled pool of partials to the client.

Moves of broker/taskmoves.py made here: new -> backlog / shared / routed (enqueue);
backlog, pooled, result -> dropped (enqueue, sweep, UNLINK); shared, routed -> dropped
(purge, LREM); pooled -> result (merge 'drain'); result, dead -> read (LPOP).
"""
from __future__ import annotations

import threading

import pytest

from rhtc.broker import scriptargs
from rhtc.broker.wire import protocol
from rhtc.broker.wire.keys import MAP_ANSWERED, MAP_POOLED
from rhtc.broker.wire.messages import HandedUp
from tests.helpers import wait_until
from tests.kits.roles import (build_map, claim, ids_of, lease_entry, owned_keys, partial, queued, register_map,
                              result, start_map, tuned)


def _token(storage, map_id: str) -> protocol.MapToken:
    return protocol.unpack_map_token(storage.config.key, storage.r.get(storage.keys.live(map_id)))


def _fill(storage, m) -> None:
    """Leave something in every key a map owns, as a map in flight has."""
    k, key = storage.keys, storage.config.key
    storage.r.rpush(k.results(m.map_id), result(key, m.map_id, 0))
    storage.r.rpush(k.pool(m.map_id), partial(key, m.map_id, [1, 2]))
    storage.r.rpush(k.dead(m.map_id), m.frames[3])
    storage.r.hset(k.tries(m.map_id), m.tid(3)[16:], "w1 stopped heartbeating\n")
    storage.r.hset(k.attempts(m.map_id), m.tid(3)[16:], 3)
    storage.r.rpush(k.backlog(m.map_id), m.frames[4])
    storage.r.setbit(k.pinned(m.map_id), 4, 1)


def _hand_in_once_the_client_waits(storage, map_id: str, frame: bytes) -> None:
    """A worker's hand-in, as soon as the client blocks waiting for the map's results."""
    wait_until(lambda: any("b" in c["flags"] for c in storage.r.client_list()), 10, "the client's blocking pop")
    storage.r.rpush(storage.keys.results(map_id), frame)


# -- a map's start -------------------------------------------------------------------------------
def test_enqueue_registers_the_map_its_signed_token_its_function_and_its_clients_beacon(storage):
    st, k = storage.settings, storage.keys
    m = build_map(storage.config.key, 2)
    assert not storage.maps.function_present(m.fn_hash)
    storage.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": 2, "label": "a run"}, {None: m.frames}, nonce=m.nonce,
                         client="client-1")
    info = storage.lease.map_info(m.map_id)
    assert (info["fn"], info["nonce"], info["n"], info["label"], info["client_id"]) == \
        (m.fn_hash, m.nonce, "2", "a run", "client-1")
    assert 0 < storage.r.ttl(k.map(m.map_id)) <= st.map_ttl
    assert storage.r.zscore(k.maps, m.map_id) is not None
    assert storage.r.get(k.function(m.fn_hash)) == m.fn and storage.maps.function_present(m.fn_hash)
    token, now = _token(storage, m.map_id), storage.broker_ms()
    assert (token.map_id, token.nonce, token.ended) == (m.map_id, m.nonce, False)
    assert now < token.valid_until_ms <= now + st.token_ttl * 1000 + 1000
    assert 0 < storage.r.pttl(k.client("client-1")) <= st.client_ttl * 1000


def test_tasks_past_the_fair_window_wait_in_the_maps_backlog_in_order(storage):
    with tuned(storage, fair_window=3) as s:
        m = start_map(s, 7)
    k = storage.keys
    assert queued(storage, k.shared_queue) == [2, 1, 0], "the window's tasks are not the first three, oldest last"
    assert queued(storage, k.backlog(m.map_id)) == [6, 5, 4, 3]
    assert 0 < storage.r.ttl(k.backlog(m.map_id)) <= storage.r.ttl(k.map(m.map_id))


def test_a_resubmission_goes_straight_to_the_shared_queue(storage):
    with tuned(storage, fair_window=3) as s:
        m = start_map(s, 7, fair=False)
    assert queued(storage, storage.keys.shared_queue) == [6, 5, 4, 3, 2, 1, 0]
    assert not storage.r.exists(storage.keys.backlog(m.map_id))


def test_tasks_routed_to_a_live_worker_wait_in_its_queue_and_those_of_a_gone_one_in_the_shared_queue(storage):
    w, k = claim(storage), storage.keys
    m = build_map(storage.config.key, 5)
    storage.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": 5}, {w.name: m.frames[:3], "gone-worker": m.frames[3:]},
                         nonce=m.nonce)
    assert queued(storage, k.queue(w.name)) == [2, 1, 0]
    assert storage.r.smembers(k.routed) == {w.name.encode()}
    assert queued(storage, k.shared_queue) == [4, 3]
    assert not storage.r.exists(k.queue("gone-worker")), "a queue without an owner"


def test_tasks_queued_at_home_are_marked_in_the_maps_pin_bitmap_and_placed_ones_are_not(storage):
    w, k = claim(storage), storage.keys
    m = build_map(storage.config.key, 4)
    storage.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": 4}, {w.name: m.frames[2:]}, nonce=m.nonce,
                         home={w.name: m.frames[:2]})
    assert sorted(queued(storage, k.queue(w.name))) == [0, 1, 2, 3]
    assert [storage.r.getbit(k.pinned(m.map_id), i) for i in range(4)] == [1, 1, 0, 0]


def test_an_enqueue_call_sent_again_queues_nothing_and_a_later_call_of_a_gone_map_neither(storage):
    """The Lua move a reconnecting client relies on: each call's sequence number is run once."""
    k, st = storage.keys, storage.settings
    m = build_map(storage.config.key, 4)
    enqueue = storage.link.scripts["enqueue"]
    first = scriptargs.enqueue_first(ns=k.ns, map_id=m.map_id, seq=1, window=0, fn_hash=m.fn_hash, packed_fn=m.fn,
                                     map_ttl=st.map_ttl, function_ttl=st.function_ttl, start=0.0, client="",
                                     client_ttl_ms=10000, info=["n", "4"], finished=[],
                                     groups=[0, "", 2, *m.frames[:2]])
    more = scriptargs.enqueue_more(ns=k.ns, map_id=m.map_id, seq=2, window=0, groups=[0, "", 1, m.frames[2]])
    assert [enqueue(args=first), enqueue(args=first), enqueue(args=more), enqueue(args=more)] == [1, 1, 1, 1]
    assert queued(storage, k.shared_queue) == [2, 1, 0], "a call sent again queued its frames twice"
    storage.r.delete(k.map(m.map_id))                       # cancelled meanwhile
    late = scriptargs.enqueue_more(ns=k.ns, map_id=m.map_id, seq=3, window=0, groups=[0, "", 1, m.frames[3]])
    assert enqueue(args=late) == 0
    assert queued(storage, k.shared_queue) == [2, 1, 0]


def test_a_big_map_goes_in_several_calls_each_frame_queued_once_in_order(storage):
    with tuned(storage, scan_step=3) as s:
        m = start_map(s, 10, fair=False)
    assert queued(storage, storage.keys.shared_queue) == list(range(9, -1, -1))


@pytest.mark.xfail(strict=True, reason=(
    "bug: enqueue.lua gives every call of a map a fresh fair window while the map's backlog is empty, so with "
    "scan_step < fair_window (both settings allow it) each call of a big map puts up to a window more into the "
    "shared queue and the backlog stays empty: here all 10 tasks of a window of 4. (With the defaults, 2000 >= 8, "
    "the first call's unrouted part overflows into the backlog and later calls keep to the window.)"))
def test_a_map_sent_in_several_calls_keeps_to_its_fair_window(storage):
    with tuned(storage, scan_step=3, fair_window=4) as s:
        m = start_map(s, 10)
    assert storage.r.llen(storage.keys.shared_queue) <= 4
    assert storage.r.llen(storage.keys.backlog(m.map_id)) == 6


def test_an_enqueue_that_waits_for_the_first_results_returns_one_that_came_meanwhile(storage):
    m = build_map(storage.config.key, 1)
    frame = result(storage.config.key, m.map_id, 0)
    worker = threading.Thread(target=_hand_in_once_the_client_waits, args=(storage, m.map_id, frame))
    worker.start()
    try:
        got = storage.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": 1}, {None: m.frames}, wait_first=20,
                                   nonce=m.nonce)
    finally:
        worker.join(20)
    assert got == [frame] and storage.maps.unread_results(m.map_id) == 0
    assert queued(storage, storage.keys.shared_queue) == [0]


def test_a_broker_that_lost_the_scripts_still_gets_the_map_registered_and_queued(storage):
    register_map(storage, 1)                                  # the library is loaded on the client's lane
    storage.r.function_flush()                                # (a broker restarted without persistence)
    m = start_map(storage, 2)
    assert storage.r.exists(storage.keys.map(m.map_id), storage.keys.live(m.map_id)) == 2
    assert queued(storage, storage.keys.shared_queue) == [1, 0]


def test_a_maps_registration_deletes_the_clients_ended_maps_it_names(storage):
    """The Lua move behind a lazy end that could not reach the broker: the client's next
    map deletes the ended one's keys (backlog, pool, results -> dropped), its signed end
    left to expire."""
    k, st = storage.keys, storage.settings
    old = register_map(storage, 5)
    _fill(storage, old)
    new = build_map(storage.config.key, 1)
    storage.link.scripts["enqueue"](args=scriptargs.enqueue_first(
        ns=k.ns, map_id=new.map_id, seq=1, window=8, fn_hash=new.fn_hash, packed_fn=new.fn, map_ttl=st.map_ttl,
        function_ttl=st.function_ttl, start=0.0, client="", client_ttl_ms=10000, info=["n", "1"],
        finished=[old.map_id], groups=[0, "", 1, new.frames[0]]))
    assert owned_keys(storage, old.map_id, end_kept=True) == []
    assert storage.r.zscore(k.maps, old.map_id) is None
    assert storage.r.exists(k.live(old.map_id)), "the ended map's token (its signed end) was not left to expire"
    assert storage.r.exists(k.map(new.map_id)) and queued(storage, k.shared_queue) == [0]


# -- a map alive -----------------------------------------------------------------------------------
def test_keep_alive_renews_the_maps_keys_and_token_until_the_map_is_gone(storage):
    k, st = storage.keys, storage.settings
    m = start_map(storage, 2)
    storage.r.rpush(k.results(m.map_id), result(storage.config.key, m.map_id, 0))
    for key in (k.map(m.map_id), k.results(m.map_id), k.function(m.fn_hash)):
        storage.r.expire(key, 5)
    storage.r.pexpire(k.live(m.map_id), 1000)
    before = _token(storage, m.map_id).valid_until_ms
    assert storage.maps.keep_alive(m.map_id, m.fn_hash, m.nonce)
    assert storage.r.ttl(k.map(m.map_id)) > 5 and storage.r.ttl(k.results(m.map_id)) > 5
    assert storage.r.ttl(k.function(m.fn_hash)) > 5
    assert storage.r.pttl(k.live(m.map_id)) > 1000 and _token(storage, m.map_id).valid_until_ms >= before
    storage.r.delete(k.live(m.map_id))                        # its end expired (or was never signed)
    assert storage.maps.keep_alive(m.map_id, m.fn_hash, m.nonce)
    assert not storage.r.exists(k.live(m.map_id)), "keep_alive brought back the token of a map that ended"
    storage.r.delete(k.map(m.map_id))
    assert storage.maps.keep_alive(m.map_id, m.fn_hash, m.nonce) is False


@pytest.mark.parametrize("drop", [False, True])
def test_sign_end_puts_the_signed_end_in_the_tokens_place(storage, drop):
    k = storage.keys
    with tuned(storage, fair_window=1) as s:
        m = start_map(s, 5)
    _fill(storage, m)
    storage.maps.sign_end(m.map_id, m.nonce, drop=drop)
    storage.link.fast.drain()                                 # its reply (read with the next command's)
    token = _token(storage, m.map_id)
    assert (token.map_id, token.nonce, token.ended) == (m.map_id, m.nonce, True)
    assert 0 < storage.r.pttl(k.live(m.map_id)) <= storage.settings.token_ttl * 1000
    if drop:
        assert owned_keys(storage, m.map_id, end_kept=True) == []
        assert storage.r.zscore(k.maps, m.map_id) is None
    else:
        assert len(owned_keys(storage, m.map_id, end_kept=True)) == 8, "the map's keys went without drop"


# -- its results -------------------------------------------------------------------------------
def test_fetch_results_pops_the_results_in_order_at_most_count(storage):
    m = register_map(storage, 5)
    frames = [result(storage.config.key, m.map_id, i) for i in range(5)]
    storage.r.rpush(storage.keys.results(m.map_id), *frames)
    assert storage.maps.unread_results(m.map_id) == 5
    assert storage.maps.fetch_results(m.map_id, timeout=0, count=2) == frames[:2]
    assert storage.maps.unread_results(m.map_id) == 3
    assert storage.maps.fetch_results(m.map_id, timeout=0) == frames[2:]
    assert storage.maps.fetch_results(m.map_id, timeout=0) == []
    assert storage.maps.unread_results(m.map_id) == 0


def test_fetch_results_waits_for_the_first_result(storage):
    m = register_map(storage, 1)
    frame = result(storage.config.key, m.map_id, 0)
    worker = threading.Thread(target=_hand_in_once_the_client_waits, args=(storage, m.map_id, frame))
    worker.start()
    try:
        assert storage.maps.fetch_results(m.map_id, timeout=20) == [frame]
    finally:
        worker.join(20)
    assert storage.maps.fetch_results(m.map_id, timeout=0.01) == []


def test_dead_tasks_are_read_once(storage):
    m = register_map(storage, 3)
    storage.r.rpush(storage.keys.dead(m.map_id), m.frames[2], m.frames[0])
    assert storage.maps.dead_tasks(m.map_id) == [m.frames[2], m.frames[0]]
    assert storage.maps.dead_tasks(m.map_id) == []


def test_attempt_histories_hold_one_line_per_run_that_killed_its_worker(storage):
    w = claim(storage)
    m = start_map(storage, 3, to=w.name)
    for why in ("the first crash", "the second crash"):
        held, _, batch = storage.lease.take(w.name, w.inc, 1)
        assert held and [protocol.frame_index(f) for f, _ in batch] == [0]
        assert storage.lease.reconcile(w.name, w.inc, crashed=m.tid(0), why=why) == (1, "queued")
        storage.r.rpush(storage.keys.queue(w.name), storage.r.rpop(storage.keys.shared_queue))   # its next run here
    assert storage.maps.attempt_history(m.map_id, m.tid(0)) == "the first crash\nthe second crash\n"
    assert storage.maps.attempt_history(m.map_id, m.tid(1)) == ""
    assert storage.maps.attempt_histories(m.map_id) == {0: "the first crash\nthe second crash\n"}


@pytest.mark.parametrize("lazy", [False, True], ids=["waited for", "read with the next command"])
def test_the_end_of_a_map_hands_its_lost_runs_to_the_client_as_its_keys_go(storage, lazy):
    """The runs lost with their process come back in the reply of the write that ends the
    map (sweep.lua), read as the keys go: no round trip of their own on the map's return;
    lazily, when the hot lane's next reply is read (settle), in the thread that reads it."""
    w = claim(storage)
    m = start_map(storage, 2, to=w.name)
    held, _, batch = storage.lease.take(w.name, w.inc, 1)
    assert held and storage.lease.reconcile(w.name, w.inc, crashed=m.tid(0), why="it crashed") == (1, "queued")
    got: list = []
    storage.maps.end(m.map_id, lazy=lazy, lost_runs=got.append)
    if lazy:
        assert got == []                                   # (nothing read yet)
        storage.maps.settle()
    assert got == [{0: "it crashed\n"}]
    assert not storage.r.exists(storage.keys.tries(m.map_id), storage.keys.map(m.map_id))
    other = start_map(storage, 1)
    quiet: list = []
    storage.maps.end(other.map_id, lazy=True, lost_runs=quiet.append)
    storage.maps.settle()
    assert quiet == [{}]                                   # a map without lost runs: none


# -- across the queues ----------------------------------------------------------------------------
def test_audit_finds_each_task_where_it_is_and_not_one_a_stale_incarnation_holds(storage):
    k, key = storage.keys, storage.config.key
    w, home = claim(storage), claim(storage)
    m = build_map(key, 9)
    with tuned(storage, fair_window=2) as s:                   # shared 0 1, backlog 2 4..8, 3: in
        s.maps.enqueue(m.map_id, m.fn_hash, m.fn, {"n": 9},    # another worker's own queue
                       {None: m.frames[:3] + m.frames[4:], home.name: m.frames[3:4]}, nonce=m.nonce)
    assert storage.lease.take(w.name, w.inc, 1)[0]            # leases 0; 2 moves in
    storage.lease.take(w.name, w.inc, 1, [(m.map_id, m.tid(0), result(key, m.map_id, 0))])  # 0 answered, 1 leased
    r = storage.r
    for i in (4, 5, 6, 7):
        r.lrem(k.backlog(m.map_id), 1, m.frames[i])
    r.rpush(k.dead(m.map_id), m.frames[4])                     # 4: dead
    r.rpush(k.pool(m.map_id), partial(key, m.map_id, [5, 6]))  # 5, 6: in a partial in the map's pool
    r.hset(k.lease(w.name), m.tid(7), lease_entry("0" * 16, m.frames[7]))   # 7: a stale incarnation's
    assert storage.maps.audit(m.map_id) == {0, 1, 2, 3, 4, 5, 6, 8}


def test_leased_to_names_the_tasks_of_the_map_leased_to_the_workers_live_incarnation(storage):
    w = claim(storage)
    m, other = register_map(storage, 3), register_map(storage, 1)
    lease = storage.keys.lease(w.name)
    storage.r.hset(lease, mapping={m.tid(0): lease_entry(w.inc, m.frames[0]),
                                   m.tid(1): lease_entry("0" * 16, m.frames[1]),
                                   other.tid(0): lease_entry(w.inc, other.frames[0])})
    assert storage.maps.leased_to(w.name, m.map_id) == {0}
    storage.r.delete(storage.keys.incarnation(w.name))
    assert storage.maps.leased_to(w.name, m.map_id) == set(), "a dead worker's lease counted as somewhere"


def test_cancel_removes_the_maps_queued_tasks_from_every_queue_and_leaves_no_key(storage):
    k, w = storage.keys, claim(storage)
    a = build_map(storage.config.key, 6)
    with tuned(storage, fair_window=2) as s:
        s.maps.enqueue(a.map_id, a.fn_hash, a.fn, {"n": 6}, {None: a.frames[:4], w.name: a.frames[4:]},
                       nonce=a.nonce)                          # shared 0 1, backlog 2 3, w's queue 4 5
    b = start_map(storage, 2)
    _fill(storage, a)                                          # (one more in its backlog: 7 queued)
    assert storage.maps.cancel(a.map_id) == 7
    assert sorted(storage.r.lrange(k.shared_queue, 0, -1)) == sorted(b.frames), "another map's tasks went"
    assert storage.r.llen(k.queue(w.name)) == 0
    assert owned_keys(storage, a.map_id, end_kept=True) == []
    assert storage.r.zscore(k.maps, a.map_id) is None and storage.r.exists(k.map(b.map_id))


def test_drain_pool_hands_a_stalled_pool_to_the_client_only_when_it_covers_enough(storage):
    k, key, w = storage.keys, storage.config.key, claim(storage)
    m = start_map(storage, 4, to=w.name)
    storage.lease.take(w.name, w.inc, 2)
    item = partial(key, m.map_id, [0, 1])
    assert storage.lease.merge_up(w.name, w.inc, m.map_id, 8, ids_of(m, [0, 1]), item, covers=2)[1] is HandedUp.PARKED
    assert storage.maps.drain_pool(m.map_id, at_least=3) == 0
    assert storage.r.lrange(k.pool(m.map_id), 0, -1) == [item] and storage.maps.unread_results(m.map_id) == 0
    assert storage.maps.drain_pool(m.map_id, at_least=2) == 2
    assert storage.r.llen(k.pool(m.map_id)) == 0
    assert storage.maps.fetch_results(m.map_id, timeout=0) == [item]
    assert storage.r.hmget(k.map(m.map_id), MAP_ANSWERED, MAP_POOLED) == [b"2", b"0"]


# -- its end ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("lazy", [False, True])
def test_end_leaves_no_key_of_the_map_and_leaves_other_maps_alone(storage, lazy):
    k = storage.keys
    with tuned(storage, fair_window=1) as s:
        m, other = start_map(s, 5), start_map(s, 5)
    _fill(storage, m)
    _fill(storage, other)
    assert len(owned_keys(storage, m.map_id)) == 9
    storage.maps.end(m.map_id, lazy=lazy)
    storage.link.fast.drain()
    assert owned_keys(storage, m.map_id, end_kept=True) == []
    assert storage.r.zscore(k.maps, m.map_id) is None
    assert len(owned_keys(storage, other.map_id)) == 9 and storage.r.zscore(k.maps, other.map_id) is not None


def test_drop_dead_clients_drops_the_maps_whose_beacon_expired_with_their_backlog(storage):
    k = storage.keys
    with tuned(storage, fair_window=1) as s:
        alive, dead = start_map(s, 3, client="alive"), start_map(s, 3, client="dead")
    storage.r.delete(k.client("dead"))                        # its beacon expired
    assert storage.maps.drop_dead_clients(every=60) == [dead.map_id]
    assert owned_keys(storage, dead.map_id) == [] and storage.r.zscore(k.maps, dead.map_id) is None
    assert queued(storage, k.backlog(alive.map_id)) == [2, 1]
    storage.r.delete(k.client("alive"))
    assert storage.maps.drop_dead_clients(every=60) == [], "swept twice within its interval"
    assert storage.r.exists(k.map(alive.map_id))


def test_renew_entry_keeps_a_live_maps_entry_and_forgets_those_nobody_renewed(storage):
    k = storage.keys
    m = register_map(storage, 1)
    now = storage.r.zscore(k.maps, m.map_id)
    storage.r.zadd(k.maps, {"0000000000000old": now - storage.settings.map_ttl - 5})
    assert storage.maps.renew_entry(m.map_id, now + 3) == 1
    assert storage.r.zrange(k.maps, 0, -1, withscores=True) == [(m.map_id.encode(), now + 3)]
    assert storage.maps.renew_entry("0000000000never", now + 4) == 0
    assert storage.r.zscore(k.maps, "0000000000never") is None, "a renewal registered a map"
    assert 0 < storage.r.ttl(k.maps) <= storage.settings.map_ttl + 10


def test_renew_client_keeps_its_beacon_for_a_client_ttl(storage):
    storage.maps.renew_client("c-7")
    assert 0 < storage.r.pttl(storage.keys.client("c-7")) <= storage.settings.client_ttl * 1000


def test_unstart_removes_what_a_refused_start_queued_and_nothing_else(storage):
    k, w = storage.keys, claim(storage)
    a = build_map(storage.config.key, 6)
    with tuned(storage, fair_window=2) as s:
        s.maps.enqueue(a.map_id, a.fn_hash, a.fn, {"n": 6}, {None: a.frames[:4], w.name: a.frames[4:]},
                       nonce=a.nonce)
        b = start_map(s, 2)
    storage.maps.unstart(a.map_id, [(None, f) for f in a.frames[:4]] + [(w.name, f) for f in a.frames[4:]])
    assert owned_keys(storage, a.map_id) == [] and storage.r.zscore(k.maps, a.map_id) is None
    assert sorted(storage.r.lrange(k.shared_queue, 0, -1)) == sorted(b.frames)
    assert storage.r.llen(k.queue(w.name)) == 0
    assert storage.r.exists(k.function(a.fn_hash)), "the function (by content, maybe another map's) went"
