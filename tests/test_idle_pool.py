"""An idle pool costs the broker little, however many workers it has (issue 20).

Every idle worker asks the take script for work about once a second; when its queues are
empty the script looks for a backed-up queue to steal from. It used to look at every
registered worker's queue (one LLEN each): a thousand idle workers cost a million LLENs
a second. Now it looks only at the queues the enqueue script routed tasks to; an idle
worker with nothing to steal waits on its queues without taking at all, and its heartbeat
is one script run (reaping and the sweep of dead clients' maps ride on it)."""
from __future__ import annotations

import uuid

from rhtc.broker.messages import WorkerStatus


def _register(storage, n: int) -> list[tuple[str, str]]:
    names = []
    for i in range(n):
        name, inc = f"idle-{i:03d}", uuid.uuid4().hex[:12]
        status = WorkerStatus(name=name, host="node-a", pid=1000 + i, incarnation=inc, key_fingerprint="f")
        assert storage.claim(name, inc, status).ok
        names.append((name, inc))
    return names


def _calls(storage, command: str) -> int:
    return int(storage.r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_an_idle_take_does_not_look_at_every_workers_queue(storage):
    pool = _register(storage, 60)
    storage.take(*pool[0], max_tasks=1)                     # loads the script
    storage.r.config_resetstat()
    for name, inc in pool:
        held, _, batch = storage.take(name, inc, max_tasks=1)
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
    storage.take(name, inc, max_tasks=1)
    assert storage.r.smembers(storage.keys.routed) == set()


def _script_calls(storage, seconds: float) -> dict[str, int]:
    """EVALSHA calls by script name over ``seconds`` (read from the slow log, which logs
    every command while its threshold is 0)."""
    import time
    by_sha = {s.sha: name for name, s in storage._scripts.items()}
    storage.r.config_set("slowlog-log-slower-than", 0)
    storage.r.config_set("slowlog-max-len", 100_000)
    storage.r.slowlog_reset()
    time.sleep(seconds)
    entries = storage.r.slowlog_get(100_000)
    storage.r.config_set("slowlog-log-slower-than", 10_000)
    counts: dict[str, int] = {}
    for e in entries:
        cmd = e["command"].split()
        if cmd and cmd[0].upper() in (b"EVALSHA", "EVALSHA"):
            sha = cmd[1].decode() if isinstance(cmd[1], bytes) else cmd[1]
            counts[by_sha.get(sha, sha)] = counts.get(by_sha.get(sha, sha), 0) + 1
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
    assert 2 <= calls.get("claim", 0) <= 6, f"the heartbeat did not run once a second: {calls}"


def test_an_idle_worker_still_steals_when_a_routed_queue_backs_up(storage, workers):
    """With tasks routed to a worker's own queue (the routed set is not empty), an idle
    worker takes after each timed-out pop again and steals from it."""
    import time
    (thief,) = workers.start(1)
    time.sleep(2.5)                                    # it is waiting quietly now
    victim, inc = "stuck-victim", uuid.uuid4().hex[:12]
    status = WorkerStatus(name=victim, host="node-b", pid=1, incarnation=inc, key_fingerprint="f")
    assert storage.claim(victim, inc, status).ok
    frames = [b"not-a-task-%d" % i for i in range(storage.settings.steal_min_queue + 2)]
    storage.r.lpush(storage.keys.queue(victim), *frames)
    storage.r.sadd(storage.keys.routed, victim)
    storage.r.hset(storage.keys.lease(victim), "busy-with", "a long task")    # its owner is busy
    deadline = time.monotonic() + 8
    while storage.r.llen(storage.keys.queue(victim)) == len(frames) and time.monotonic() < deadline:
        storage.claim(victim, inc, status, mode="renew")
        time.sleep(0.2)
    assert storage.r.llen(storage.keys.queue(victim)) < len(frames), (
        f"idle worker {thief} never stole from {victim}'s backed-up queue")


def test_a_heartbeat_says_which_pool_duties_are_due_once_a_second(storage):
    """Reaping and the dead clients' sweep ride on the heartbeat's one round trip: the
    first beat of each second in the pool is told to do them, the others are not."""
    (a, ia), (b, ib) = _register(storage, 2)
    status = WorkerStatus(name=a, host="h", pid=1, incarnation=ia, key_fingerprint="f")
    first = storage.heartbeat(a, ia, status, duties=5.0)
    second = storage.heartbeat(b, ib, dataclasses_replace(status, name=b, incarnation=ib), duties=5.0)
    assert first.ok and first.reap_due and first.sweep_due
    assert second.ok and not second.reap_due and not second.sweep_due
    storage.r.delete(storage.keys.reap_due)
    third = storage.heartbeat(b, ib, dataclasses_replace(status, name=b, incarnation=ib), duties=5.0)
    assert third.reap_due and not third.sweep_due
    assert not storage.heartbeat(a, ia, status).duties          # without duties: never told


def dataclasses_replace(obj, **kw):
    import dataclasses
    return dataclasses.replace(obj, **kw)


def test_a_maps_window_grows_while_idle_workers_wait(storage):
    """A task popped by an idle worker's blocking pop lets two of its map's backlog in when
    the shared queue is empty by then (idle workers are waiting: the window doubles until
    each has a task), one when tasks are still waiting there (fair turns)."""
    from rhtc.client import submit

    def nap(x):
        return x

    (w, inc), = _register(storage, 1)
    h = submit(nap, range(40), broker=storage.config)
    try:
        window = storage.settings.fair_window
        shared, backlog = storage.keys.shared_queue, storage.keys.backlog(h.map_id)
        assert storage.r.llen(shared) == window
        popped = [storage.r.rpop(shared) for _ in range(window)]    # idle workers' blocking pops

        def lease(frame):                                            # ... and their leases
            storage._scripts["lease_one"](args=[storage.keys.ns, w, inc, 1, frame, 1])
        lease(popped[0])
        assert storage.r.llen(shared) == 2, "the window did not grow while the queue ran dry"
        lease(popped[1])
        assert storage.r.llen(shared) == 3, "the window grew although tasks were waiting"
        assert storage.r.llen(backlog) == 40 - window - 3
    finally:
        h.cancel()
