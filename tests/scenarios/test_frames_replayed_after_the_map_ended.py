"""Frames replayed within the token window run nothing. A map's client signs its end when
the map ends (however it ends); a worker refuses the map's frames under that end, and a
live token copied during the map and written back after a worker saw the end is refused
too. The attacker knows the Redis password, not the signing key.

Real redis-server, real worker processes; a side-effect file per run of the function
proves whether a worker ran it. A refusal under the signed end is logged by the worker, not
reported (a cancelled map's tasks in flight meet the same end); a written-back token is
reported (`rhtc status`). The map's liveness tokens last 30 s (the default): every
replay here comes well inside that window.
"""
from __future__ import annotations

import pytest

from rhtc.client.engine.maprun import MapRun
from rhtc.client.engine.options import MapOptions
from tests.helpers import poll_until, wait_until
from tests.kits.replay import client, problems, runs, touch

TOKEN_TTL = 30.0


def _finish(run: MapRun) -> None:
    """Poll the map to its end and close it as remote_map does (its keys go lazily, with
    the client's next map: nothing else is sent to the broker)."""
    while not run.done:
        for r in run.poll(1.0):
            assert r.error is None, r.error
    run.close()


def _copy(s, run: MapRun) -> tuple[list[bytes], bytes]:
    """What an eavesdropper copies while the map runs: its queued frames and its token."""
    frames = s.r.lrange(s.keys.shared_queue, 0, -1)
    token = s.r.dump(s.keys.live(run.map_id))
    assert frames and token
    return frames, token


def _replay(s, frames: list[bytes]) -> None:
    s.r.rpush(s.keys.shared_queue, *frames)
    wait_until(lambda: s.pool.shared_depth() == 0, 30, "the workers to take the replayed frames")


@pytest.mark.timeout(120)
def test_frames_pushed_again_right_after_the_map_ended_do_not_run(broker, workers, tmp_path):
    s = client(broker, token_ttl=TOKEN_TTL)
    (tmp_path / "runs").mkdir()
    try:
        run = MapRun(s, touch, [(str(tmp_path), "a", i) for i in range(6)], MapOptions(stragglers=None))
        run.submit()                                   # no worker yet: everything waits in Redis
        frames, _ = _copy(s, run)
        names = workers.start(2, extra=("-v",))
        _finish(run)
        before = runs(tmp_path, "a")
        assert set(before) == set(range(6)) and sum(before.values()) == 6
        _replay(s, frames)                             # seconds after the end, its token still valid
        refused = f"map {run.map_id} ended (its client signed the end"
        logged = poll_until(lambda: refused in "".join(workers.log(n) for n in names), 20)
        assert runs(tmp_path, "a") == before, "a worker ran the user's function on a frame replayed after its map ended"
        assert logged, "".join(workers.log(n) for n in names)
        assert "nothing was run" in "".join(workers.log(n) for n in names)
    finally:
        s.close()


@pytest.mark.timeout(120)
def test_a_copied_token_written_back_after_the_worker_saw_the_end_runs_nothing(broker, workers, tmp_path):
    s = client(broker, token_ttl=TOKEN_TTL)
    (tmp_path / "runs").mkdir()
    try:
        run = MapRun(s, touch, [(str(tmp_path), "c", i) for i in range(4)], MapOptions(stragglers=None))
        run.submit()
        frames, token = _copy(s, run)
        run.cancel()                                   # the map ends by a cancel (a timeout, Ctrl-C)
        [name] = workers.start(1, extra=("-v",))
        _replay(s, frames)                             # under the signed end: refused, and remembered
        assert poll_until(lambda: f"map {run.map_id} ended" in workers.log(name), 20), workers.log(name)
        s.r.restore(s.keys.live(run.map_id), 60_000, token, replace=True)   # the live token, back
        _replay(s, frames)
        reported = poll_until(lambda: "copy written back after the map ended" in problems(s), 20)
        assert runs(tmp_path, "c") == {}, "a worker ran the user's function of a cancelled map"
        assert reported, problems(s)
        assert "copy written back after the map ended" in workers.log(name)
    finally:
        s.close()
