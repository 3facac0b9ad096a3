"""The worker's liveness, identity and lease, against a real redis-server and real
`python -m rhtc.worker` processes (supervisor + task process): one test per behaviour.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from rhtc import RemoteError, remote_map, submit
from rhtc.broker.wire import protocol
from rhtc.broker.wire import messages
from rhtc.broker.wire.config import validate_worker_name
from rhtc.broker.storage import Storage
from tests.conftest import ROOT
from tests.helpers import pid_after, square, wait_until

FAST = {"RHTC_LEASE": "2"}


def hold_gil(seconds):
    ctypes.PyDLL(None).sleep(seconds)        # libc sleep() without releasing the GIL
    return "held"


def crash_once(args):
    marker, code = args
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(code)
    return os.getpid()


def segfault(_):
    ctypes.string_at(0)


def _status(storage: Storage, name: str) -> messages.WorkerStatus | None:
    return next((w for w in storage.pool.worker_statuses(queue_depths=False) if w.name == name), None)


def _task_pid(storage: Storage, name: str) -> int:
    return wait_until(lambda: (_status(storage, name) or messages.WorkerStatus("", "", 0, "", "")).task_pid,
                      10, f"{name}'s task process")


# -- one live process per name; a new incarnation takes over at once -------------------------
def test_second_live_process_with_the_same_name_is_refused(broker, workers, storage):
    (name,) = workers.start(names=["dup-1"], env=FAST)
    holder = _status(storage, name)
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "rhtc.worker", "--name", name],
                       env=dict(os.environ, **broker.config.env(), **FAST), cwd=str(ROOT),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3, p.stderr
    assert time.monotonic() - t < 2.0 + 3.0           # well under a lease (plus interpreter start)
    assert "already held by" in p.stderr and holder.host in p.stderr and str(holder.pid) in p.stderr
    assert workers.procs[name].poll() is None
    assert _status(storage, name).incarnation == holder.incarnation
    assert remote_map(square, [1, 2, 3], broker=broker, progress=False, timeout=30) == [1, 4, 9]


def test_restart_under_the_same_name_requeues_the_predecessors_tasks_at_once(broker, workers, storage):
    (name,) = workers.start(names=["same-1"], env={"RHTC_LEASE": "30"})   # its claim would outlive the test
    task_pid = _task_pid(storage, name)
    old = _status(storage, name)
    h = submit(pid_after, [3.0] + [0.0] * 5, broker=broker)
    wait_until(lambda: (_status(storage, name).task or (None,))[0] == h.map_id, 10, "the first task to start")
    workers.procs[name].send_signal(signal.SIGKILL)      # the supervisor dies, its claim does not
    wait_until(lambda: not psutil.pid_exists(task_pid) or psutil.Process(task_pid).status() == "zombie",
               5, "its task process to die with it")
    t = time.monotonic()
    workers.start(names=[name], env={"RHTC_LEASE": "30"})
    wait_until(lambda: _status(storage, name).incarnation != old.incarnation, 10, "the new incarnation")
    assert time.monotonic() - t < 8                        # a few heartbeats, not the 30 s lease
    assert storage.r.hlen(storage.keys.lease(name)) <= 1   # the old lease went back (the new may take one)
    pids = h.wait(timeout=30)
    assert len(pids) == 6 and time.monotonic() - t < 20   # not a 30 s lease
    # (read from the map's record: the broker's histories come in the reply of the map's end)
    lost = [a for a in h.record().attempts if a.outcome == "lost"]
    assert [a.index for a in lost] == [0] and "restarted" in lost[0].error, lost


# -- nothing stays leased that nobody runs ------------------------------------------------------
def test_lease_entry_nobody_runs_is_requeued(broker, workers, storage):
    h = submit(square, [7], broker=broker)               # nobody serves yet
    frame = wait_until(lambda: storage.r.rpop(storage.keys.shared_queue), 5, "the task frame")
    (name,) = workers.start(env=FAST)
    inc = storage.r.get(storage.keys.incarnation(name))
    # the take ran in Redis but its reply was lost: leased to a live worker that never saw it
    taken = str(int(time.time() * 1000)).zfill(13).encode()
    storage.r.hset(storage.keys.lease(name), protocol.task_id(frame), inc + taken + frame)
    t = time.monotonic()
    assert h.wait(timeout=15) == [49]
    assert time.monotonic() - t < 2 * 2 + 5              # the bound: two leases (plus the run, on a busy machine)
    assert "not running here" in workers.log(name)       # the worker's reconcile found it, not the client's audit
    assert storage.r.hlen(storage.keys.lease(name)) == 0


# -- a task that holds the GIL for three leases -------------------------------------------------
def test_task_holding_the_gil_for_three_leases_is_not_declared_dead(broker, workers, storage):
    (name,) = workers.start(env=FAST)
    inc = _status(storage, name).incarnation
    lapses = []
    stop = threading.Event()

    def watch():
        s = Storage(broker.config)
        while not stop.wait(0.2):
            w = _status(s, name)
            if w is None or w.incarnation != inc:
                lapses.append(time.time())
        s.close()
    t = threading.Thread(target=watch)
    t.start()
    try:
        h = submit(hold_gil, [7], broker=broker)
        assert h.wait(timeout=30) == ["held"]
    finally:
        stop.set()
        t.join()
    assert lapses == []
    assert [a for a in h.record().attempts if a.outcome == "lost"] == []   # (the map's record)


# -- the task process dies; the worker lives on --------------------------------------------------
def test_task_process_crash_is_requeued_and_a_fresh_process_serves(broker, workers, storage, tmp_path):
    (name,) = workers.start(env=FAST)
    supervisor = workers.procs[name].pid
    first = _task_pid(storage, name)
    t = time.monotonic()
    (pid,) = remote_map(crash_once, [(str(tmp_path / "crashed"), 9)], broker=broker, progress=False, timeout=30)
    assert time.monotonic() - t < 5                       # noticed within about a second, not a lease
    assert pid != first and psutil.pid_exists(supervisor) and workers.procs[name].poll() is None
    assert _status(storage, name).pid == supervisor and _status(storage, name).crashes == 1
    assert "exit code 9" in workers.log(name)


def test_task_that_segfaults_every_time_fails_naming_the_signal(broker, workers, storage):
    (name,) = workers.start(env=FAST)
    out = remote_map(segfault, [0], broker=broker, progress=False, errors="return", timeout=60)
    assert isinstance(out[0], RemoteError)
    assert "SIGSEGV" in f"{out[0]} {getattr(out[0], 'history', '')}"
    assert workers.procs[name].poll() is None
    assert remote_map(square, [3], broker=broker, progress=False, timeout=30) == [9]


# -- broker errors never kill a worker --------------------------------------------------------------
def test_busy_and_readonly_broker_make_the_worker_wait(broker, workers, storage):
    (name,) = workers.start(env=FAST, extra=("-v",))
    storage.r.config_set("busy-reply-threshold", 100)
    busy = threading.Thread(target=lambda: Storage(broker.config).r.eval(
        "local t = redis.call('TIME'); local stop = t[1] + 3 "
        "while tonumber(redis.call('TIME')[1]) < stop do end return 1", 0))
    busy.start()
    busy.join()
    storage.r.replicaof("127.0.0.1", 1)                 # READONLY for a moment
    time.sleep(1.5)
    storage.r.replicaof("NO", "ONE")
    assert workers.procs[name].poll() is None
    assert "waiting for" in workers.log(name)
    assert remote_map(square, [2, 3], broker=broker, progress=False, timeout=30) == [4, 9]


# -- no script call does work proportional to the queue length ---------------------------------------
def test_scripts_work_in_bounded_steps(broker, storage):
    """Every script call looks at a bounded number of items: a 300,000-task map is queued,
    audited, reaped around and cancelled in calls of a few thousand items each, so the
    mean script call stays far under 50 ms (it was one call of ~0.5 s each). The mean,
    not the slowest call: on a machine shared by many jobs Redis itself gets descheduled."""
    storage.r.config_resetstat()
    key, n, step = broker.config.key, 300_000, storage.settings.scan_step
    nonce, fn = protocol.new_nonce(), protocol.sign(broker.config.key, protocol.dumps(square))
    fn_hash = protocol.function_hash(fn)
    arg = protocol.dumps(1)
    frames = [protocol.sign(key, protocol.pack_task_body("a" * 16, i, nonce, fn_hash, arg)) for i in range(n)]
    storage.maps.enqueue("a" * 16, fn_hash, fn, {"n": n}, {None: frames}, nonce=nonce)
    # fair turns: a few tasks in the shared queue, the rest in the map's backlog
    assert storage.pool.shared_depth() + storage.r.llen(storage.keys.backlog("a" * 16)) == n
    assert storage.maps.audit("a" * 16) == set(range(n))
    assert storage.lease.reap() == [] and storage.maps.cancel("a" * 16) == n
    cmd = {"functions": "cmdstat_fcall", "evalsha": "cmdstat_evalsha"}[storage.link.scripts.mode]
    stats = storage.r.info("commandstats")[cmd]             # the scripts: functions, or EVALSHA
    assert stats["calls"] >= 2 * n // step                 # enqueue and audit went in steps (cancel
    #                                                        unlinks the backlog: freed in the background)
    assert stats["usec_per_call"] < 50_000


# -- names, and keys with an owner ----------------------------------------------------------------
def test_bad_names_are_refused_and_a_worker_named_DEL_works(broker, workers, storage):
    for bad in ("", "x" * 129, "a b", "-lead", "semi;colon"):
        with pytest.raises(ValueError):
            validate_worker_name(bad)
    p = subprocess.run([sys.executable, "-m", "rhtc.worker", "--name", "bad name"],
                       env=dict(os.environ, **broker.config.env()), cwd=str(ROOT),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "bad name" in p.stderr
    workers.start(names=["DEL"])
    key, nonce = broker.config.key, protocol.new_nonce()
    fn = protocol.sign(key, protocol.dumps(square))
    fn_hash = protocol.function_hash(fn)
    frames = [protocol.pack_task(key, "b" * 16, i, nonce, fn_hash, i) for i in range(4)]
    storage.maps.enqueue("b" * 16, fn_hash, fn, {"n": 4}, {"DEL": frames}, nonce=nonce)
    got = {}
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        for raw in storage.maps.fetch_results("b" * 16, timeout=1):
            _, index, status, payload = protocol.unpack_result(key, raw)
            meta, packed = messages.decode_result(payload)
            got[index] = (protocol.loads(packed), meta.worker)
    assert got == {i: (i * i, "DEL") for i in range(4)}


def test_tasks_routed_to_a_worker_that_is_gone_go_to_the_shared_queue(broker, storage):
    key, nonce = broker.config.key, protocol.new_nonce()
    fn = protocol.sign(key, protocol.dumps(square))
    frames = [protocol.pack_task(key, "c" * 16, i, nonce, protocol.function_hash(fn), i) for i in range(3)]
    storage.maps.enqueue("c" * 16, protocol.function_hash(fn), fn, {"n": 3}, {"reaped-worker": frames},
                        nonce=nonce)
    assert not storage.r.exists(storage.keys.queue("reaped-worker"))
    assert storage.pool.shared_depth() == 3


def test_keys_left_after_workers_stop_have_an_owner_or_an_expiry(broker, workers, storage, tmp_path):
    workers.start(2, env=FAST)
    remote_map(crash_once, [(str(tmp_path / "m"), 9), (str(tmp_path / "m"), 9)], broker=broker,
               progress=False, timeout=30)
    workers.stop_all()
    k = storage.keys
    owned = {k.shared_queue, k.workers, k.maps}
    for raw in storage.r.scan_iter(match=f"{k.ns}:*"):
        name = raw.decode()
        assert name in owned or storage.r.pttl(name) != -1, f"{name} has neither an owner nor an expiry"
    # a worker killed before it could retire leaves its name in the set until a reaper
    # (any worker or client) passes after its lease: 2 s here
    time.sleep(2.5)
    storage.lease.reap(every=0)
    assert storage.r.smembers(k.workers) == set()


# -- signed means bound -----------------------------------------------------------------------------
def test_swapped_function_blob_and_replayed_frame_are_refused(broker, workers, storage):
    workers.start(env=FAST)
    key = broker.config.key
    good, other = (protocol.sign(key, protocol.dumps(f)) for f in (square, pid_after))
    nonce = protocol.new_nonce()
    frame = protocol.pack_task(key, "d" * 16, 0, nonce, protocol.function_hash(good), 5)
    # someone with the Redis password stores another signed function under this one's hash
    storage.maps.enqueue("d" * 16, protocol.function_hash(good), other, {"n": 1}, {None: [frame]}, nonce=nonce)
    (raw,) = wait_until(lambda: storage.maps.fetch_results("d" * 16, timeout=1), 15, "the refusal")
    _, _, status, payload = protocol.unpack_result(key, raw)
    fault = messages.Fault.decode(payload)
    assert status == protocol.SYSTEM_ERROR and fault.kind == messages.FaultKind.FUNCTION_MISMATCH
    assert "does not match" in fault.message and protocol.function_hash(good) in fault.message
    # the map is created again (same id, new nonce) and an old frame is replayed into it
    storage.maps.end("d" * 16)
    storage.maps.enqueue("d" * 16, protocol.function_hash(good), good, {"n": 1}, {None: [frame]},
                        nonce=protocol.new_nonce())
    (raw,) = wait_until(lambda: storage.maps.fetch_results("d" * 16, timeout=1), 15, "the refusal")
    _, _, status, payload = protocol.unpack_result(key, raw)
    fault = messages.Fault.decode(payload)
    assert status == protocol.SYSTEM_ERROR and fault.kind == messages.FaultKind.REPLAYED
    assert "nonce" in fault.message


# -- what a worker publishes (the worker's side) ----------------------------------------------------
def test_heartbeat_publishes_incarnation_key_fingerprint_and_versions(broker, workers, storage):
    (name,) = workers.start()
    _task_pid(storage, name)
    w = _status(storage, name)
    assert w.key_fingerprint == protocol.key_fingerprint(broker.config.key)
    assert broker.config.key.hex() not in storage.r.get(storage.keys.heartbeat(name)).decode()
    assert len(w.incarnation) == 16 and w.pid == workers.procs[name].pid and w.task_pid not in (None, w.pid)
    assert w.versions["python"].count(".") == 2 and "cloudpickle" in w.versions


# -- a broker that refuses the password, or is not there --------------------------------------
def _worker_env(url: str, broker) -> dict:
    from rhtc.broker.wire.config import ENV_URL
    env = dict(os.environ, **broker.config.env())
    env[ENV_URL] = url
    env.pop("RHTC_CONFIG", None)
    return env


def test_a_wrong_password_stops_the_worker_naming_the_broker(broker):
    from urllib.parse import urlsplit, urlunsplit
    parts = urlsplit(broker.config.url)
    wrong = urlunsplit(parts._replace(netloc=f":not-the-password@{parts.hostname}:{parts.port}"))
    proc = subprocess.run([sys.executable, "-m", "rhtc.worker", "--name", "wrong-pw"], cwd=str(ROOT),
                          env=_worker_env(wrong, broker), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "refused the password" in proc.stderr and "wrong-pw" in proc.stderr
    assert "not-the-password" not in proc.stderr + proc.stdout


def test_sigterm_stops_a_worker_still_waiting_for_its_broker(broker):
    import socket
    with socket.socket() as s:                      # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = broker.config.url.replace(f":{broker.port}", f":{port}")
    proc = subprocess.Popen([sys.executable, "-m", "rhtc.worker", "--name", "no-broker"], cwd=str(ROOT),
                            env=_worker_env(url, broker), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        time.sleep(3)                               # it is backing off, waiting for the broker
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
