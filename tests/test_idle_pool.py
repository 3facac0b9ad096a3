"""An idle pool costs the broker little, however many workers it has (issue 20).

Every idle worker asks the take script for work about once a second; when its queues are
empty the script looks for a backed-up queue to steal from. It used to look at every
registered worker's queue (one LLEN each): a thousand idle workers cost a million LLENs
a second. Now it looks only at the queues the enqueue script routed tasks to; an idle
worker with nothing to steal waits on its queues without taking at all, and its heartbeat
is one script run (reaping and the sweep of dead clients' maps ride on it)."""
from __future__ import annotations

import signal
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
