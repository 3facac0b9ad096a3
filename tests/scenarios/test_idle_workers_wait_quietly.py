"""An idle pool costs the broker little, however many workers it has: real idle workers.

An idle worker whose blocking pop timed out goes back to waiting without running the take
script (a script run per worker-second was a quarter of a core at 1,000 idle workers), as
long as no worker's own queue holds routed tasks; with tasks routed to a backed-up queue it
takes again and steals from it; its blocking pop lasts IDLE_WAIT (one pop per worker every
5 s, not every second, at a thousand idle workers), yet a stop ends it at once. Real
redis-server, real worker processes, stopped by pid. (The broker's side, with registered
names only: tests/integration/test_idle_pool.py.)"""
from __future__ import annotations

import signal
import uuid

from rhtc.broker.wire.messages import WorkerStatus


def _script_calls(storage, seconds: float) -> dict[str, int]:
    """Script runs (FCALL, or EVALSHA where the broker has no functions) by script name
    over ``seconds`` (read from the slow log, which logs every command while its
    threshold is 0)."""
    import time
    by_id = {ident: name for name, c in storage.link.scripts.items() for ident in (c.sha, c.function)}
    storage.r.config_set("slowlog-log-slower-than", 0)
    storage.r.config_set("slowlog-max-len", 100_000)
    storage.r.slowlog_reset()
    time.sleep(seconds)
    entries = storage.r.slowlog_get(100_000)
    storage.r.config_set("slowlog-log-slower-than", 10_000)
    counts: dict[str, int] = {}
    for e in entries:
        cmd = e["command"].split()
        if cmd and (cmd[0].decode() if isinstance(cmd[0], bytes) else cmd[0]).upper() in ("EVALSHA", "FCALL"):
            ident = cmd[1].decode() if isinstance(cmd[1], bytes) else cmd[1]
            counts[by_id.get(ident, ident)] = counts.get(by_id.get(ident, ident), 0) + 1
    return counts


def test_an_idle_worker_with_nothing_to_steal_only_waits(storage, workers):
    """An idle worker whose blocking pop timed out goes back to waiting without a take
    (a script run per worker-second: a quarter of a core at 1,000 idle workers), as long
    as no worker's own queue holds routed tasks; its heartbeat is one script run a second."""
    workers.start(1)
    import time
    time.sleep(2.5)                                    # past its first takes
    calls = _script_calls(storage, 4.0)
    assert calls.get("take", 0) <= 1, f"an idle worker ran the take script {calls.get('take')} times in 4 s: {calls}"
    assert 2 <= calls.get("beat", 0) <= 6, f"the heartbeat did not run once a second: {calls}"
    assert not calls.get("claim"), f"an idle worker claimed its name again: {calls}"


def test_an_idle_worker_still_steals_when_a_routed_queue_backs_up(storage, workers):
    """With tasks routed to a worker's own queue (the routed set is not empty), an idle
    worker takes after each timed-out pop again and steals from it."""
    import time
    (thief,) = workers.start(1)
    time.sleep(2.5)                                    # it is waiting quietly now
    victim, inc = "stuck-victim", uuid.uuid4().hex[:12]
    status = WorkerStatus(name=victim, host="node-b", pid=1, incarnation=inc, key_fingerprint="f")
    assert storage.lease.claim(victim, inc, status).ok
    frames = [b"not-a-task-%d" % i for i in range(storage.settings.steal_min_queue + 2)]
    storage.r.lpush(storage.keys.queue(victim), *frames)
    storage.r.sadd(storage.keys.routed, victim)
    storage.r.hset(storage.keys.lease(victim), "busy-with", "a long task")    # its owner is busy
    deadline = time.monotonic() + 8
    while storage.r.llen(storage.keys.queue(victim)) == len(frames) and time.monotonic() < deadline:
        storage.lease.heartbeat(victim, inc, status)
        time.sleep(0.2)
    assert storage.r.llen(storage.keys.queue(victim)) < len(frames), (
        f"idle worker {thief} never stole from {victim}'s backed-up queue")


def test_a_stop_ends_an_idle_workers_wait_at_once(workers):
    """An idle worker blocks in its pop for IDLE_WAIT (5 s: one pop per worker every 5 s,
    not every second, at a thousand idle workers); SIGTERM ends the wait at once (the task
    process unblocks its own connection; a drain's SIGUSR1 does the same), not at the
    pop's timeout."""
    import subprocess
    import time
    from rhtc.worker.main import IDLE_WAIT
    [name] = workers.start(1)
    time.sleep(1.0)                                    # idle, in its blocking pop
    workers.signal(name, signal.SIGTERM)
    try:
        workers.procs[name].wait(IDLE_WAIT / 2)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the idle worker {name} waited for its pop's timeout ({IDLE_WAIT} s) "
                             "before stopping") from None
