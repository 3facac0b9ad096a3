"""Maps end to end through a real redis-server and real worker processes: results in order,
errors with the remote traceback, concurrent maps that never mix, forged, tampered and
oversized input refused, cancel and Ctrl-C that leave no key, SIGTERM and a broker restart
that lose nothing, and the local default cluster when no broker is configured."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rhtc.broker.wire import protocol
from rhtc.broker.storage import Storage
from rhtc.client import RemoteError, imap_unordered, remote_map, submit
from rhtc.client.api import storage_for
from rhtc.client.engine.maprun import MapRun
from tests.conftest import ROOT, map_keys
from tests.helpers import poll_until, register_by_value, square, wait_until

register_by_value(__name__)


def fail_on_three(x):
    if x == 3:
        raise ValueError(f"three is not allowed (got {x})")
    return x


def slow(x):
    time.sleep(x)
    return os.getpid()


def touch(path):
    open(path, "w").write("ran")
    return path


@pytest.mark.quick  # smoke: a map
def test_results_come_back_in_order(broker, workers):
    workers.start(2)
    out = remote_map(square, range(300), broker=broker, progress=False)
    assert out == [i * i for i in range(300)]


def test_lambda_and_closure_travel(broker, workers):
    workers.start(1)
    k = 7
    assert remote_map(lambda x: x + k, [1, 2], broker=broker, progress=False) == [8, 9]


@pytest.mark.quick  # smoke: a user error comes back
def test_error_carries_remote_traceback_worker_and_argument(broker, workers):
    names = workers.start(2)
    with pytest.raises(RemoteError) as info:
        remote_map(fail_on_three, range(6), broker=broker, progress=False)
    err = info.value
    assert err.index == 3 and err.remote_type == "ValueError"
    assert "three is not allowed" in str(err)
    assert "fail_on_three" in err.remote_traceback          # the worker's traceback
    assert err.worker in names and err.argument == "3"
    assert isinstance(err.exception, ValueError)
    # the worker went on: both still serve
    assert remote_map(square, range(10), broker=broker, progress=False) == [i * i for i in range(10)]


def test_errors_return_keeps_the_rest(broker, workers):
    workers.start(1)
    out = remote_map(fail_on_three, range(6), broker=broker, progress=False, errors="return")
    assert out[:3] == [0, 1, 2] and out[4:] == [4, 5]
    assert isinstance(out[3], RemoteError)


def test_unordered_iterator_yields_metadata(broker, workers):
    names = workers.start(2)
    seen = {}
    for r in imap_unordered(square, range(50), broker=broker):
        assert r.index not in seen
        seen[r.index] = r.value
        assert r.meta["worker"] in names and r.meta["stop"] >= r.meta["start"]
        assert r.meta["pid"] > 0 and r.meta["host"]
    assert seen == {i: i * i for i in range(50)}


def test_non_blocking_handle_progress_and_wait(broker, workers):
    workers.start(2)
    h = submit(slow, [0.2] * 6, broker=broker)
    assert h.progress()[1] == 6
    pids = h.wait(timeout=30)
    assert h.done() and h.progress() == (6, 6) and len(set(pids)) == 2


def wait_for_gate(path):
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.path.exists(path)


def test_join_waits_up_to_its_timeout_and_says_whether_the_map_ended(broker, workers, tmp_path):
    """``handle.join(t)`` (RedisExecutor waits with it between progress updates): False while
    tasks are held, True once the last result is in, with every result there."""
    workers.start(2)
    gate = tmp_path / "gate"
    h = submit(wait_for_gate, [str(gate)] * 4, broker=broker)
    assert h.join(0.3) is False and not h.done() and h.progress()[0] < 4
    gate.touch()
    assert h.join(30) is True and h.done() and h.progress() == (4, 4)
    assert h.wait(timeout=5) == [True] * 4


def test_concurrent_maps_never_mix(broker, workers):
    workers.start(2)
    results = {}

    def run(tag):
        results[tag] = remote_map(lambda x, t=tag: (t, x), range(200), broker=broker, progress=False)

    threads = [threading.Thread(target=run, args=(t,)) for t in "abc"]
    for t in threads:
        t.start()
    # and one from another client process at the same time
    script = textwrap.dedent("""
        from rhtc.client import remote_map
        out = remote_map(lambda x: ('p', x), range(200), progress=False)
        assert out == [('p', i) for i in range(200)], out[:5]
        print('ok')
    """)
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **broker.config.env()),
                          cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    for t in threads:
        t.join()
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
    for tag in "abc":
        assert results[tag] == [(tag, i) for i in range(200)]


def test_forged_task_is_never_unpickled(broker, workers, storage, tmp_path):
    names = workers.start(1)
    marker = tmp_path / "pwned"
    forged_key = b"x" * 32
    # a complete, well-formed map whose frames are signed with the wrong key
    config = type(broker.config)(url=broker.config.url, key=forged_key, namespace=broker.config.namespace)
    evil = Storage(config)
    run = MapRun(evil, touch, [str(marker)])
    run.submit()
    poll_until(storage.recent_problems, 10)         # the refusal reported (asserted below, after the marker)
    assert not marker.exists()
    problems = " ".join(p["message"] for p in storage.recent_problems())
    assert "signature" in problems and names[0] in problems
    evil.close()
    # garbage bytes pushed by hand: logged, and the worker goes on
    storage.r.lpush(storage.keys.shared_queue, b"\x00garbage that is not a frame")
    assert remote_map(square, [5], broker=broker, progress=False) == [25]
    assert any("not a task frame" in p["message"] for p in storage.recent_problems())


def test_tampered_argument_is_refused_and_reported(broker, workers, storage, tmp_path):
    workers.start(1)
    marker = tmp_path / "tampered"
    run = MapRun(storage, touch, [str(tmp_path / "honest")])
    frame = bytearray(run.frames[0])
    frame[-5] ^= 0xFF                                      # flip bits in the packed argument
    run.frames[0] = bytes(frame)
    run.submit()
    out = []
    deadline = time.monotonic() + 20
    while not run.done and time.monotonic() < deadline:
        out += run.poll(1.0)
    out += run.poll(0)
    run.close()
    assert len(out) == 1 and out[0].error is not None
    assert "signature" in str(out[0].error) and not marker.exists()


def test_other_protocol_version_gets_a_clear_error(broker, workers, storage):
    workers.start(1)
    run = MapRun(storage, square, [2])
    run.frames[0] = run.frames[0][:2] + bytes([protocol.VERSION + 1]) + run.frames[0][3:]
    run.submit()
    out = []
    while not run.done:
        out += run.poll(1.0)
    out += run.poll(0)
    run.close()
    assert "protocol" in str(out[0].error) and "same redis-htcondor version" in str(out[0].error)


def test_oversized_argument_refused_before_sending(broker, storage):
    before = storage.count_keys()
    with pytest.raises(ValueError, match=r"argument 1 .* over the 2.0 MiB limit .*entry ranges"):
        remote_map(len, [b"small", os.urandom(3 * 1024 * 1024)], broker=broker, progress=False)
    assert storage.count_keys() == before


def test_unpicklable_argument_named_before_sending(broker, storage):
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"cannot pickle argument 1 \(lock"):
        remote_map(str, [1, lock], broker=broker, progress=False)
    assert storage.count_keys() == 0


@pytest.mark.quick  # smoke: a cancel
def test_cancel_removes_queued_tasks_and_keys(broker, workers, storage):
    workers.start(1)
    h = submit(slow, [0.5] * 40, broker=broker)
    time.sleep(0.3)
    dropped = h.cancel()
    assert dropped >= 30
    h._thread.join(5)
    assert not h._thread.is_alive()          # its collector stops with it (and frees its connection)
    assert map_keys(storage) == []
    assert storage.pool.shared_depth() == 0


def test_a_finished_maps_keys_go_as_it_returns_and_its_signed_end_stays_until_it_expires(broker, workers, storage):
    """A notebook idle after its map: the map's keys waited for its client's next map,
    whose registration deleted them on its own critical path. They go in the write that
    signs the map's end now; the end itself stays until its last token could be valid, so
    a worker that takes a copy of one of its frames meanwhile meets it."""
    from rhtc import last_map

    workers.start(1)
    for n in (1, 30):                  # one task (its result waits in the submission's trip), and more
        assert remote_map(abs, [-i for i in range(n)], broker=broker, progress=False) == list(range(n))
        map_id = last_map().map_id
        wait_until(lambda: map_keys(storage) == [], 5,     # (the client sends nothing more: the write is out)
                   f"the keys of map {map_id} of {n} task(s) to go after it returned", interval=0.02)
        assert map_id not in storage.pool.maps_in_flight()
        end = storage.r.get(storage.keys.live(map_id))
        assert end is not None and protocol.unpack_map_token(broker.config.key, end).ended
        assert 0 < storage.r.pttl(storage.keys.live(map_id)) <= storage.settings.token_ttl * 1000


def test_ctrl_c_in_blocking_call_cancels_the_map(broker, workers, storage, tmp_path):
    workers.start(1)
    script = textwrap.dedent("""
        import time, sys
        from rhtc.client import remote_map
        print('start', flush=True)
        remote_map(time.sleep, [0.5] * 40, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ, **broker.config.env()),
                            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "start"
    poll_until(storage.pool.maps_in_flight, 20)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "KeyboardInterrupt" in err
    assert map_keys(storage) == [] and storage.pool.shared_depth() == 0


def test_sigterm_mid_task_loses_nothing(broker, workers):
    names = workers.start(2)
    h = submit(slow, [1.0] * 6, broker=broker)
    time.sleep(0.5)                                       # both workers are inside a task
    workers.signal(names[0], signal.SIGTERM)
    assert workers.procs[names[0]].wait(10) == 0          # exits 0 promptly
    pids = h.wait(timeout=60)
    assert len(pids) == 6 and all(isinstance(p, int) for p in pids)
    assert workers.procs[names[0]].pid not in pids or pids.count(workers.procs[names[0]].pid) < 6


def test_worker_survives_broker_restart(broker, workers):
    workers.start(1)
    assert remote_map(square, [3], broker=broker, progress=False) == [9]
    broker.restart()
    time.sleep(0.5)
    storage_for(broker).r.connection_pool.disconnect()
    assert remote_map(square, [4, 5], broker=broker, progress=False, timeout=60) == [16, 25]


@pytest.mark.heavy  # starts the local default cluster
def test_no_broker_configured_starts_local_default(tmp_path):
    script = textwrap.dedent("""
        from rhtc.client import remote_map, live_workers
        from rhtc.client.local import default_cluster
        print(remote_map(abs, [-1, -2, -3], progress=False))
        print(len(live_workers()), default_cluster().n_workers)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RHTC_")}
    env.update(HOME=str(tmp_path), RHTC_CONFIG=str(tmp_path / "nope.json"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[0] == "[1, 2, 3]"
    live, n = map(int, lines[1].split())
    assert live == n == (os.cpu_count() or 1)
