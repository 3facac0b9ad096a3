"""A password-only attacker (knows the Redis password, not the signing key) replays what it
copied from a live map after the map ended, or into a map created again under the same id,
and forges or replays worker heartbeats: no replayed frame runs the user's function, a
forged heartbeat strands no task, and each is reported.

Real redis-server, real worker processes; a side-effect file per run of the function
proves whether a worker ran it.
"""
from __future__ import annotations

import dataclasses
import json
import signal
import time

import pytest

from rhtc.client.engine.options import MapOptions
from rhtc.broker.storage import Storage
from rhtc.client.engine import maprun
from rhtc.client.engine.maprun import MapRun
from rhtc.client.ops.status import render_status
from tests.helpers import poll_until, wait_until
from tests.kits.replay import client, problems, runs, touch

TOKEN_TTL = 2.0          # the tests' client renews short-lived tokens, so a replay waits little


@dataclasses.dataclass(frozen=True)
class Keyed:
    """An argument with a routing key, as make_chunks gives (the client routes it)."""

    folder: str
    index: int

    @property
    def routing_key(self) -> str:
        return f"chunk-{self.index}"


def keyed(arg: Keyed):
    return arg.index + 100


def finish(run: MapRun, timeout: float = 60.0) -> dict[int, object]:
    """Poll a map to its end; its results by index (a failure is a test failure)."""
    got: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    while not run.done:
        assert time.monotonic() < deadline, f"map {run.map_id}: {run.unfinished} of {run.n} tasks unfinished"
        for r in run.poll(1.0):
            assert r.error is None, r.error
            got[r.index] = r.value
    for r in run.poll(0):
        assert r.error is None, r.error
        got[r.index] = r.value
    run.close()
    run.storage.maps.flush()
    return got


def record(storage: Storage, run: MapRun) -> tuple[list[tuple[str, bytes]], list[bytes]]:
    """What an eavesdropper with the password copies while the map runs: a DUMP of every key
    that names the map, of its function blob, and the task frames in the queues."""
    names = [k.decode() for k in storage.r.scan_iter(match=f"{storage.keys.ns}:*{run.map_id}*")]
    names.append(storage.keys.function(run.fn_hash))
    dumps = [(name, storage.r.dump(name)) for name in names]
    frames = storage.r.lrange(storage.keys.shared_queue, 0, -1)
    assert frames and all(d for _, d in dumps)
    return dumps, frames


def write_back(storage: Storage, dumps, frames) -> None:
    """The attacker restores every copied key and pushes the copied frames."""
    for name, blob in dumps:
        storage.r.restore(name, 60_000, blob, replace=True)
    storage.r.rpush(storage.keys.shared_queue, *frames)


def wait_after(storage: Storage, seconds: float) -> None:
    """Wait until the broker's clock is ``seconds`` past now (a token signed now has expired)."""
    sec, usec = storage.r.time()
    until = sec + usec / 1e6 + seconds
    while True:
        sec, usec = storage.r.time()
        if sec + usec / 1e6 > until:
            return
        time.sleep(0.1)


# -- replay after the map ended --------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_frames_replayed_after_the_map_ended_run_nothing_and_are_reported(broker, workers, tmp_path):
    s = client(broker, token_ttl=TOKEN_TTL)
    (tmp_path / "runs").mkdir()
    try:
        run = MapRun(s, touch, [(str(tmp_path), "a", i) for i in range(6)], MapOptions(stragglers=None))
        run.submit()                                  # no worker yet: everything is in Redis
        dumps, frames = record(s, run)
        assert len(frames) == 6
        workers.start(2)
        assert finish(run) == {i: i * i for i in range(6)}
        before = runs(tmp_path, "a")
        assert set(before) == set(range(6))
        wait_until(lambda: s.r.exists(s.keys.map(run.map_id)) == 0, 10,   # the end is sent without waiting
                   "the ended map's keys to be deleted")
        wait_after(s, TOKEN_TTL + 0.5)               # the map's last token has expired
        write_back(s, dumps, frames)
        wait_until(lambda: s.pool.shared_depth() == 0, 30, "the workers to take the replayed frames")
        reported = poll_until(lambda: run.map_id in problems(s) and "expired" in problems(s), 20)
        assert runs(tmp_path, "a") == before, "a worker ran the user's function on a replayed frame"
        assert reported, problems(s)
        assert "nothing was run" in problems(s)
    finally:
        s.close()


# -- replay into a map created again under the same id ----------------------------------------------
@pytest.mark.timeout(180)
def test_frames_replayed_into_a_map_recreated_under_the_same_id_run_nothing(broker, workers, tmp_path,
                                                                               monkeypatch):
    s = client(broker, token_ttl=TOKEN_TTL)
    (tmp_path / "runs").mkdir()
    try:
        first = MapRun(s, touch, [(str(tmp_path), "a", i) for i in range(4)], MapOptions(stragglers=None))
        first.submit()
        dumps, frames = record(s, first)
        workers.start(1)
        assert finish(first) == {i: i * i for i in range(4)}
        before = runs(tmp_path, "a")
        workers.stop_all()                           # the next map waits in Redis, as a queue does
        wait_after(s, TOKEN_TTL + 0.5)

        real = maprun.secrets

        class SameMapId:                             # the next map gets the first map's id
            def token_hex(self, n=None):
                return first.map_id if n == 8 else real.token_hex(n)

            def __getattr__(self, attr):
                return getattr(real, attr)

        monkeypatch.setattr(maprun, "secrets", SameMapId())
        again = MapRun(s, touch, [(str(tmp_path), "b", i) for i in range(4)], MapOptions(stragglers=None))
        monkeypatch.undo()
        assert again.map_id == first.map_id
        again.submit()
        write_back(s, dumps, frames)                 # the old map's hash, token, function and frames
        workers.start(2)
        assert finish(again) == {i: i * i for i in range(4)}      # the genuine map still completes
        wait_until(lambda: s.pool.shared_depth() == 0, 30, "the replayed frames to be taken")
        reported = poll_until(lambda: first.map_id in problems(s), 20)
        assert runs(tmp_path, "a") == before, "a worker ran the user's function on a replayed frame"
        assert set(runs(tmp_path, "b")) == set(range(4))
        assert reported and ("expired" in problems(s) or "nonce" in problems(s)), problems(s)
    finally:
        s.close()


# -- forged heartbeats ---------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_a_forged_heartbeat_with_a_copied_fingerprint_strands_nothing_and_is_named(broker, workers,
                                                                                   storage, tmp_path):
    real = workers.start(2)
    k = storage.keys
    genuine = storage.r.get(k.heartbeat(real[0]))
    fingerprint = json.loads(genuine)["key_fingerprint"]
    unsigned = json.dumps({"name": "ghost", "host": "h", "pid": 1, "incarnation": "g" * 16,
                           "key_fingerprint": fingerprint})
    fakes = {"evil-copy": genuine,                                       # a verbatim copy
             "evil-edit": genuine.replace(real[0].encode(), b"evil-edit"),   # renamed inside
             "ghost": unsigned}                                          # never signed
    for name, beat in fakes.items():
        storage.r.set(k.incarnation(name), b"e" * 16, px=120_000)
        storage.r.set(k.heartbeat(name), beat, px=120_000)
        storage.r.sadd(k.workers, name)
    s = client(broker)
    try:
        run = MapRun(s, keyed, [Keyed(str(tmp_path), i) for i in range(12)], MapOptions(stragglers=None))
        run.submit()
        assert finish(run, timeout=90) == {i: i + 100 for i in range(12)}
    finally:
        s.close()
    assert all(storage.r.llen(k.queue(name)) == 0 for name in fakes)     # nothing was routed there
    screen = render_status(storage)
    forged_part = screen.split("forged workers")[1]
    assert f"evil-copy: its heartbeat is a copy of {real[0]}'s" in forged_part, screen
    assert "evil-edit: its heartbeat claims this key's fingerprint but is not signed" in forged_part, screen
    assert "ghost: its heartbeat claims this key's fingerprint but is unsigned" in forged_part, screen
    assert not any(real_name + ":" in forged_part for real_name in real)
    assert all(f"worker {name} is forged" in problems(storage) for name in fakes)


@pytest.mark.timeout(180)
def test_tasks_in_the_queue_of_a_replayed_heartbeat_are_taken_back(broker, workers, storage):
    """A genuine signed heartbeat of a worker that died, written back (with its incarnation)
    by the attacker: the queue looks served; the client takes its tasks back."""
    dead, alive = workers.start(2)
    k = storage.keys
    inc, beat = storage.r.get(k.incarnation(dead)), storage.r.get(k.heartbeat(dead))
    workers.signal(dead, signal.SIGKILL)
    workers.procs[dead].wait(10)
    storage.r.set(k.incarnation(dead), inc, px=120_000)       # kept "alive" by the attacker
    storage.r.set(k.heartbeat(dead), beat, px=120_000)
    s = client(broker, unclaimed_seconds=2.0)
    try:
        run = MapRun(s, keyed, [Keyed("-", i) for i in range(6)], MapOptions(stragglers=None))
        run.submit()
        assert storage.r.llen(k.queue(dead)) > 0              # the client routed tasks there
        assert finish(run, timeout=90) == {i: i + 100 for i in range(6)}
    finally:
        s.close()
    assert f"worker {dead} looks live but took none" in problems(storage)
    assert storage.r.llen(k.queue(dead)) == 0


@pytest.mark.timeout(180)
def test_a_client_that_stopped_renewing_its_map_gets_every_result_once_it_polls(broker, workers, tmp_path):
    """The other side of the token's expiry: a live client that did not renew its map for
    longer than the token lasts (stopped in a debugger) loses nothing; the tasks the workers
    refused meanwhile are sent again under a fresh token, and none ran under the stale one."""
    s = client(broker, token_ttl=TOKEN_TTL)
    (tmp_path / "runs").mkdir()
    try:
        run = MapRun(s, touch, [(str(tmp_path), "c", i) for i in range(5)], MapOptions(stragglers=None))
        run.submit()
        wait_after(s, TOKEN_TTL + 0.5)               # no tick: the token expired in Redis
        workers.start(1)
        wait_until(lambda: s.pool.shared_depth() == 0, 30, "the worker to look at the stale tasks")
        assert poll_until(lambda: "expired" in problems(s), 20), problems(s)
        assert not runs(tmp_path, "c")               # nothing ran under the expired token
        assert finish(run) == {i: i * i for i in range(5)}
        assert runs(tmp_path, "c") == {i: 1 for i in range(5)}
    finally:
        s.close()
