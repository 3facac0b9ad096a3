"""Over an analyst's day the connections to the broker break and the broker refuses writes
for a while; neither may cost a result, fail a map, count an attempt against a task or
replace a healthy worker.

* Connections heal: every connection of the client and of the workers is dropped
  (``CLIENT KILL``) or the broker restarts between two maps; the next map runs, on the
  same worker processes. An enqueue whose replies were lost is sent again without
  queueing its tasks twice.
* A broker that says no is not a dead worker: Redis refuses writes for ~7 s (maxmemory
  reached; READONLY; a Redis with an append-only file restarted and back 7 s later, its
  names' expiry run out) while four healthy workers run a long task: nobody is reaped,
  no attempt is counted, every task runs once.

Real redis-server, real worker processes; every process started here is stopped by pid.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import redis

from rhtc.client.engine.options import MapOptions
from rhtc.broker.wire.config import settings
from rhtc.broker.embedded import EmbeddedBroker
from rhtc.broker.storage import Storage
from rhtc.client import remote_map, submit
from rhtc.client.api import MapHandle, storage_for
from rhtc.client.engine.maprun import MapRun
from tests.kits.chaos import Refusal, assert_every_key_owned
from tests.conftest import Workers
from tests.helpers import wait_until

FAST_LEASE = {"RHTC_LEASE": "2"}


def pid_of_task(x):
    return x, os.getpid()


def nap_counted(args):
    """Sleep, after appending one line to ``path`` per run (how many times it ran)."""
    seconds, path, index = args
    with open(path, "a") as fh:
        fh.write(f"{index}\n")
    time.sleep(seconds)
    return index, os.getpid()


# -- helpers ---------------------------------------------------------------------------
def serving(storage: Storage) -> dict[str, tuple[str, int]]:
    """Each live worker's (incarnation, task-process pid)."""
    return {s.name: (s.incarnation, s.task_pid) for s in storage.pool.worker_statuses(queue_depths=False)}


def runs_per_task(path: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for line in path.read_text().split():
        counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


def run_two_maps_around(fault, broker, storage, workers) -> None:
    """A map, ``fault()``, the next map: both right, both on the same worker processes."""
    names = workers.start(2)
    first = remote_map(pid_of_task, range(20), broker=broker, progress=False, timeout=60)
    assert [x for x, _ in first] == list(range(20))
    before = serving(storage)
    assert set(before) == set(names)
    fault()
    second = remote_map(pid_of_task, range(20), broker=broker, progress=False, timeout=60)
    assert [x for x, _ in second] == list(range(20))
    task_pids = {pid for _, pid in first + second}
    assert task_pids <= {pid for _, pid in before.values()}, "a task ran outside the first task processes"
    wait_until(lambda: set(serving(storage)) == set(names), 20, "both workers to be live")
    assert serving(storage) == before, "a worker was restarted, or took its name over again"
    assert all(workers.procs[n].poll() is None for n in names)


# -- connections heal ------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_client_kill_of_every_connection_between_two_maps(broker, storage, workers):
    killed = []
    run_two_maps_around(lambda: killed.append(broker.kill_connections()), broker, storage, workers)
    assert killed[0] >= 5           # the client's, both supervisors' and both task processes'


@pytest.mark.timeout(120)
def test_broker_restarted_between_two_maps(broker, storage, workers):
    run_two_maps_around(broker.restart, broker, storage, workers)
    assert_every_key_owned(storage)


@pytest.mark.timeout(120)
def test_a_map_submitted_while_the_broker_is_down_runs_when_it_is_back(broker, storage, workers):
    """The broker is down when the next cell runs and is back 3 s later: the map waits
    for it instead of failing."""
    workers.start(1)
    assert remote_map(pid_of_task, [1], broker=broker, progress=False, timeout=60)[0][0] == 1
    broker.proc.kill()
    broker.proc.wait()
    out: list = []
    # the map in a thread, the restart in this one (redis-server dies with the thread
    # that started it: PR_SET_PDEATHSIG)
    cell = threading.Thread(target=lambda: out.append(
        remote_map(pid_of_task, range(3), broker=broker, progress=False, timeout=90)))
    cell.start()
    try:
        broker.restart(downtime=3.0)
    finally:
        cell.join(100)
    (got,) = out
    assert [x for x, _ in got] == [0, 1, 2]


@pytest.mark.timeout(120)
def test_an_enqueue_whose_replies_were_lost_is_not_queued_twice(broker, storage, workers, tmp_path):
    """The enqueue calls run in Redis, then the connection dies before their replies are
    read (the client waits for a first result behind them): the client sends them again
    on a fresh connection, and the broker queues each task once."""
    ran = tmp_path / "runs"
    ran.touch()
    n = 6
    client = storage_for(broker)
    run = MapRun(client, nap_counted, [(0.0, str(ran), i) for i in range(n)], MapOptions(stragglers=None))
    killed = []

    def kill_the_waiting_submission():
        def lane():
            return [int(c["id"]) for c in storage.r.client_list() if c.get("cmd") == "blpop"]
        wait_until(lambda: storage.r.llen(storage.keys.shared_queue) == n and lane(), 20,
                   "the tasks to be queued and the client to wait for its first result")
        for cid in lane():
            storage.r.client_kill_filter(_id=cid)
            killed.append(cid)

    t = threading.Thread(target=kill_the_waiting_submission)
    t.start()
    try:
        run.submit(wait_first=3.0)           # no worker yet: it waits the whole 3 s, twice
    finally:
        t.join()
    assert killed, "the submission's connection was not killed"
    assert storage.r.llen(storage.keys.shared_queue) == n, "tasks were queued twice"
    workers.start(1)
    got = MapHandle(run).wait(timeout=60)
    assert [i for i, _ in got] == list(range(n))
    assert runs_per_task(ran) == {i: 1 for i in range(n)}


# -- a broker that says no is not a dead worker ---------------------------------------------
def long_tasks_through(refusal, broker, storage, workers, tmp_path, seconds: float = 14.0) -> None:
    """Four workers each run one long task; ``refusal()`` makes the broker say no for
    ~7 s meanwhile. Nobody is reaped, no attempt is counted, each task runs once."""
    ran = tmp_path / "runs"
    ran.touch()
    names = workers.start(4, env=FAST_LEASE)         # names expire after 2 s of silence
    h = submit(nap_counted, [(seconds, str(ran), i) for i in range(4)], broker=broker, stragglers=None)
    wait_until(lambda: len(runs_per_task(ran)) == 4, 30, "the four tasks to start")
    before = wait_until(lambda: (lambda now: len(now) == 4 and all(p for _, p in now.values()) and now)(
        serving(storage)), 10, "the four workers to publish their task processes")
    refusal()
    wait_until(lambda: set(serving(storage)) == set(names), 20, "the workers to renew their names")
    attempts = storage.r.hgetall(storage.keys.attempts(h.map_id))
    tries = storage.r.hgetall(storage.keys.tries(h.map_id))
    got = h.wait(timeout=120)
    assert not attempts and not tries, f"attempts counted against healthy workers' tasks: {tries}"
    assert [i for i, _ in got] == [0, 1, 2, 3]
    assert runs_per_task(ran) == {i: 1 for i in range(4)}, "a task ran again"
    assert serving(storage) == before, "a healthy worker was replaced"
    assert {pid for _, pid in got} == {pid for _, pid in before.values()}
    assert all(workers.procs[n].poll() is None for n in names)
    assert not [p for p in storage.recent_problems(50) if "stopped heartbeating" in p["message"]]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_broker_out_of_memory_for_7_s_reaps_no_healthy_worker(broker, storage, workers, tmp_path):
    def oom_window():
        broker.refuse_writes()
        try:
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                storage.r.set("rhtc-probe", 1)          # every write refused: OOM
            time.sleep(7.0)
        finally:
            broker.refuse_writes(False)
    long_tasks_through(oom_window, broker, storage, workers, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_broker_read_only_for_7_s_reaps_no_healthy_worker(broker, storage, workers, tmp_path):
    """The same with READONLY (the broker made a replica of a master that does not exist,
    as in a failover): every write refused for 7 s."""
    def read_only_window():
        refusal = Refusal(broker, tmp_path)
        refusal.begin("READONLY")
        try:
            assert "ReadOnlyError" in refusal.probe()
            time.sleep(7.0)
        finally:
            refusal.end("READONLY")
    long_tasks_through(read_only_window, broker, storage, workers, tmp_path)


@pytest.fixture
def aof_broker():
    b = EmbeddedBroker(appendonly=True).start()
    yield b
    b.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_broker_with_aof_down_for_7_s_reaps_no_healthy_worker(aof_broker, tmp_path):
    storage = Storage(aof_broker.config)
    pool = Workers(aof_broker.config, tmp_path)
    try:
        long_tasks_through(lambda: aof_broker.restart(downtime=7.0, keep_data=True),
                           aof_broker, storage, pool, tmp_path)
    finally:
        pool.stop_all()
        storage.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_broker_down_longer_than_a_clients_beacon_does_not_drop_its_map(aof_broker, tmp_path):
    """The same outage with a client whose beacon lives 2 s: it expired while the broker was
    down and nobody could renew it, yet the live client's map is not taken for a dead
    client's (dropped, its running tasks' results thrown away and run again)."""
    old = os.environ.get("RHTC_CLIENT_TTL")
    os.environ["RHTC_CLIENT_TTL"] = "2"
    settings.cache_clear()
    storage = Storage(aof_broker.config)
    pool = Workers(aof_broker.config, tmp_path)
    try:
        assert storage.settings.client_ttl == 2.0
        long_tasks_through(lambda: aof_broker.restart(downtime=7.0, keep_data=True),
                           aof_broker, storage, pool, tmp_path)
    finally:
        pool.stop_all()
        storage.close()
        if old is None:
            os.environ.pop("RHTC_CLIENT_TTL", None)
        else:
            os.environ["RHTC_CLIENT_TTL"] = old
        settings.cache_clear()
