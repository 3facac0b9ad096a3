"""The broker's scripts as one Redis 7 function library (broker/functions.py), on a real
redis-server with real workers: loaded once and called by FCALL; loaded again by the first
call after the broker lost it (restarted without persistence, FUNCTION FLUSH), on the fast
lane too; EVALSHA for a user who may not load functions; and a library replaced by anyone
with the password cannot revive an expired token. Other versions' libraries capped, and
nothing a call reads kept for the next call, with no worker: tests/integration/test_function_library.py."""
from __future__ import annotations

import dataclasses
import urllib.parse

from rhtc import remote_map
from rhtc.broker.storage import Storage
from tests.helpers import double, wait_until
from tests.kits.library import libraries as _libraries


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


def test_a_replaced_library_cannot_make_a_worker_run_a_map_whose_token_expired(broker, workers, tmp_path):
    """Anyone with the Redis password may FUNCTION LOAD REPLACE our library. A worker judges
    a map's token by the broker's TIME, read beside the script, never by a clock the
    script returns: a library that says it is long ago cannot revive an expired token."""
    import time
    from rhtc.client.engine.maprun import MapRun
    from rhtc.client.engine.options import MapOptions
    from tests.kits.replay import client, runs, touch

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
