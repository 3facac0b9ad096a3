"""The broker's scripts as one Redis 7 function library (broker/functions.py), on a real
redis-server: loaded once and called by FCALL; loaded again by the first call after the
broker lost it (restarted without persistence, FUNCTION FLUSH), on the fast lane too;
EVALSHA for a user who may not load functions; other versions' libraries capped; and
nothing a call reads is kept for the next call (a function library keeps its top level)."""
from __future__ import annotations

import dataclasses
import urllib.parse

from rhtc import remote_map
from rhtc.broker.wire import protocol
from rhtc.broker.functions import KEEP_LIBRARIES, Library
from rhtc.broker.wire.messages import WorkerStatus
from rhtc.broker.storage import Storage
from tests.helpers import double, wait_until


def _libraries(storage) -> list[str]:
    return sorted(e[b"library_name"].decode() for e in
                  storage.r.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "rhtc_*"))


def _calls(storage, command: str) -> int:
    return int(storage.r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_the_scripts_run_as_functions_loaded_once(broker, workers, storage):
    workers.start(2)
    for _ in range(5):
        assert remote_map(double, range(20), broker=broker, progress=False) == [2 * x for x in range(20)]
    assert _libraries(storage) == [storage.link.scripts.name]
    assert _calls(storage, "evalsha") == 0
    # one load (at most) per process's broker client: the client, each worker's supervisor
    # and task process; never one per call
    assert _calls(storage, "function|load") <= 1 + 2 * 2 < 5 * 3 <= _calls(storage, "fcall")


def test_a_broker_that_lost_the_library_gets_it_back_on_the_next_call(broker, workers, storage):
    workers.start(1)
    assert remote_map(double, range(5), broker=broker, progress=False) == [0, 2, 4, 6, 8]
    storage.r.execute_command("FUNCTION", "FLUSH")       # as a restart without persistence
    assert _libraries(storage) == []
    # the client's enqueue (sent without waiting), the worker's lease and hand-in, the heartbeat
    assert remote_map(double, range(5), broker=broker, progress=False) == [0, 2, 4, 6, 8]
    assert _libraries(storage) == [storage.link.scripts.name]
    other = Storage(broker.config)                        # a plain call (not the fast lane) after a flush
    try:
        storage.r.execute_command("FUNCTION", "FLUSH")
        assert other.maps.audit("0" * 16) == set()
    finally:
        other.close()


def test_a_user_who_may_not_load_functions_runs_the_scripts_by_evalsha(broker, workers):
    admin = Storage(broker.config)
    try:
        admin.r.execute_command("ACL", "SETUSER", "analyst", "on", ">analyst-pw", "~*", "&*", "+@all",
                                "-function", "-fcall")
        url = urllib.parse.urlsplit(broker.config.url)
        config = dataclasses.replace(
            broker.config, url=f"redis://analyst:analyst-pw@{url.hostname}:{url.port}{url.path}")
        s = Storage(config)
        try:
            got = s.maps.audit("0" * 16)                   # the first call decides
            assert got == set() and s.link.scripts.mode == "evalsha"
            assert _libraries(admin) == []
            workers.start(1)                              # a worker with functions, a client without
            assert remote_map(double, range(6), broker=config, progress=False) == [2 * x for x in range(6)]
        finally:
            s.close()
    finally:
        admin.close()


def test_other_versions_libraries_are_capped(storage):
    body = "#!lua name={}\nredis.register_function('{}', function(k, a) return 1 end)\n"
    for i in range(KEEP_LIBRARIES):
        storage.r.execute_command("FUNCTION", "LOAD", body.format(f"rhtc_old{i}", f"old{i}"))
    storage.r.execute_command("FUNCTION", "LOAD", body.format("someone_else", "theirs"))
    lib = Library(storage.r)
    lib.ensure()
    assert _libraries(storage) == [lib.name], "the other rhtc versions' libraries stayed past the cap"
    names = [e[b"library_name"] for e in storage.r.execute_command("FUNCTION", "LIST")]
    assert b"someone_else" in names, "a library that is not rhtc's was removed"


def test_nothing_a_call_read_is_served_to_the_next_call(storage):
    """take.lua reads each map's liveness token once per call; in a function library the
    memo would outlive the call and hand a later take a token the map no longer has."""
    w, inc = "w1", "a" * 16
    assert storage.lease.claim(w, inc, WorkerStatus(name=w, host="node-a", pid=1, incarnation=inc, key_fingerprint="f")).ok
    key, nonce, map_id = storage.config.key, protocol.new_nonce(), "ab" * 8
    live = protocol.pack_map_token(key, map_id, nonce, 2_000_000_000_000)
    ended = protocol.pack_map_token(key, map_id, nonce, 2_000_000_000_000, ended=True)
    frame = protocol.pack_task(key, map_id, 0, nonce, "f" * protocol.FN_HASH_LEN, b"x")
    storage.r.set(storage.keys.live(map_id), live)
    storage.r.hset(storage.keys.map(map_id), "n", 2)
    storage.r.lpush(storage.keys.shared_queue, frame)
    held, _, batch = storage.lease.take(w, inc, 1)
    assert held and batch[0][1] == live
    storage.r.set(storage.keys.live(map_id), ended)       # the client signed the map's end
    storage.r.lpush(storage.keys.shared_queue, frame)
    held, _, batch = storage.lease.take(w, inc, 1)
    assert held and batch and batch[0][1] == ended, "a later call was served the token an earlier call read"


def test_a_replaced_library_cannot_make_a_worker_run_a_map_whose_token_expired(broker, workers, tmp_path):
    """Anyone with the Redis password may FUNCTION LOAD REPLACE our library. A worker judges
    a map's token by the broker's TIME, read beside the script, never by a clock the
    script returns: a library that says it is long ago cannot revive an expired token."""
    import time
    from rhtc.client.engine.maprun import MapRun
    from rhtc.client.engine.options import MapOptions
    from tests.test_day_forgery import client, runs, touch

    s = client(broker, token_ttl=2.0)
    (tmp_path / "runs").mkdir()
    try:
        run = MapRun(s, touch, [(str(tmp_path), "x", i) for i in range(3)], MapOptions(stragglers=None))
        run.submit()                                   # no worker yet: the frames wait in Redis
        frames = s.r.lrange(s.keys.shared_queue, 0, -1)
        token = s.r.dump(s.keys.live(run.map_id))
        run.cancel()
        time.sleep(2.5)                                # the copied token has expired
        lib = s.link.scripts
        lib.ensure()
        lying = lib.code.replace("local function now_ms()\n", "local function now_ms()\n  do return 1000 end\n", 1)
        assert lying != lib.code
        s.r.execute_command("FUNCTION", "LOAD", "REPLACE", lying)      # the broker now says it is 1970
        s.r.restore(s.keys.live(run.map_id), 60_000, token, replace=True)
        s.r.rpush(s.keys.shared_queue, *frames)
        workers.start(1)
        wait_until(lambda: s.pool.shared_depth() == 0, 30, "the worker to take the replayed frames")
        time.sleep(1.0)
        assert runs(tmp_path, "x") == {}, "a worker ran a map whose liveness token had expired"
    finally:
        s.close()
