"""The broker's scripts as one Redis 7 function library (broker/functions.py), on a real
redis-server and no worker: other versions' libraries are capped (and nobody else's
removed), and nothing a call reads is kept for the next call (a function library keeps its
top level). Loaded once, loaded again after the broker lost it, EVALSHA for a user who may
not load functions, with real workers: tests/scenarios/test_scripts_as_functions_on_real_workers.py."""
from __future__ import annotations

from rhtc.broker.functions import KEEP_LIBRARIES, Library
from rhtc.broker.wire import protocol
from rhtc.broker.wire.messages import WorkerStatus
from tests.kits.library import libraries as _libraries


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
