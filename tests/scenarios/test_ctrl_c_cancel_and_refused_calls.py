"""The analyst's session: Ctrl-C at any instant, bad input refused at the call, the
cluster made in a ``with`` block is the one used, and ``rhtc cancel MAP``.

Real parts only: a redis-server on a free port, ``python -m rhtc.worker`` processes, a
real SIGINT delivered to a real client process. Every process is stopped by pid. The calls
refused without a broker (``make_chunks``, ``LocalCluster(n_workers=...)``):
tests/unit/client/test_chunking.py and tests/unit/client/test_local.py.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from rhtc.client import imap_unordered, remote_map, submit
from tests.conftest import ROOT, map_keys
from tests.helpers import square, wait_until

RHTC = [sys.executable, "-m", "rhtc.client.ops.cli"]
pytestmark = pytest.mark.timeout(90)     # a refused call that was not refused would wait forever


def _run_client(script: str, broker, *args, timeout: float = 120.0) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                            env=dict(os.environ, **(broker.config.env() if broker else {})), cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _wait_idle(storage, timeout: float = 60.0) -> None:
    """Until no live worker is running a task (twice in a row)."""
    calm = []

    def idle():
        busy = any(s.task is not None for s in storage.pool.worker_statuses(queue_depths=False))
        calm.append(not busy)
        return calm[-2:] == [True, True]
    wait_until(idle, timeout, "the workers to finish their tasks", interval=0.3)


# -- Ctrl-C at any instant -------------------------------------------------------------------------
CTRL_C_CLIENT = """
    import json, os, signal, sys, threading, time
    from rhtc.client import remote_map

    out_dir, delays = sys.argv[1], [float(d) for d in sys.argv[2].split(",")]

    def mark(arg):
        delay, i = arg
        time.sleep(0.4)
        open(os.path.join(out_dir, f"{delay}-{i}"), "w").close()
        return i

    remote_map(abs, [-1], progress=False)          # connections and workers warm
    for delay in delays:
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        outcome = "finished"
        try:
            timer.start()
            remote_map(mark, [(delay, i) for i in range(4)], progress=False)
            timer.join()
        except KeyboardInterrupt:
            outcome = "interrupted"
        timer.join()
        nxt = remote_map(abs, [-1, -2, -3], progress=False, timeout=60)
        print(json.dumps({"delay": delay, "outcome": outcome, "next": nxt}), flush=True)
        time.sleep(0.6)          # the cancelled map's running tasks end before the next starts
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_at_any_instant_cancels_the_map(broker, workers, storage, tmp_path):
    """A real SIGINT at 0, 5, 10, 20, 30, 50, 75, 100 ms into a small remote_map: the map is
    cancelled (its queued tasks never run, no key of it stays) and the next map of the same
    process works (no stale reply on the submission connection)."""
    workers.start(2)
    delays = [0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1]
    done = _run_client(CTRL_C_CLIENT, broker, tmp_path, ",".join(map(str, delays)), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert [x["delay"] for x in lines] == delays, done.stderr[-3000:]
    for x in lines:
        assert x["outcome"] == "interrupted" and x["next"] == [1, 2, 3], x
    _wait_idle(storage)
    ran = {d: sum(1 for f in os.listdir(tmp_path) if f.startswith(f"{float(d)}-")) for d in delays}
    # only tasks a worker had already taken may run; the queued rest is dropped
    assert all(n <= 2 for n in ran.values()), ran
    assert map_keys(storage) == [] and storage.pool.shared_depth() == 0


def test_fast_lane_cut_between_two_replies_leaves_no_stale_reply(broker):
    """An interrupt while the fast lane still owes replies: the next command gets its own
    reply, not an old one, and does not fail."""
    import threading

    from rhtc.broker.fastlane import FastLane
    from rhtc.broker.storage import connect
    lane = FastLane(connect(broker.config))
    assert lane.call("PING") in (b"PONG", True, "PONG")
    lane.send("BLPOP", "rhtc-test-nothing", 2)
    lane.send("ECHO", "old")
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lane.collect()
    finally:
        timer.join()
    assert lane.call("ECHO", "new") == b"new"
    lane.reset()
    lane.r.close()


# -- rhtc cancel MAP -------------------------------------------------------------------------------
CANCELLED_CLIENT = """
    import sys, time
    from rhtc.client import remote_map
    from rhtc.client.errors import MapCancelled
    try:
        remote_map(time.sleep, [1.0] * 30, progress=False, label="to-cancel")
        print("finished", flush=True)
    except MapCancelled as err:
        print("cancelled:", err, flush=True)
"""


@pytest.mark.timeout(180)
def test_rhtc_cancel_from_another_shell_ends_the_owning_client(broker, workers, storage):
    """`rhtc cancel MAP` (a unique start of the id is enough): the client that runs the map
    ends with MapCancelled at once instead of running its 30 tasks; no key stays."""
    workers.start(1)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CANCELLED_CLIENT)],
                            env=dict(os.environ, **broker.config.env()), cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: storage.pool.maps_in_flight(), 60, "the map to be in flight")
        map_id = storage.pool.maps_in_flight()[0]["map_id"]
        done = subprocess.run([*RHTC, "cancel", map_id[:8]], env=dict(os.environ, **broker.config.env()),
                              cwd=str(ROOT), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"cancelled map {map_id}" in done.stdout, done.stdout
        out, err = proc.communicate(timeout=20)     # 30 one-second tasks on one worker: not run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert out.startswith("cancelled:") and map_id in out and "rhtc cancel" in out, (out, err[-2000:])
    _wait_idle(storage)
    assert map_keys(storage) == [] and storage.pool.shared_depth() == 0


def test_rhtc_cancel_names_a_map_that_is_not_there(broker):
    done = subprocess.run([*RHTC, "cancel", "0123456789abcdef"], env=dict(os.environ, **broker.config.env()),
                          cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "no map '0123456789abcdef' in flight" in done.stderr and "rhtc status" in done.stderr


# -- the cluster you made is the one you use -------------------------------------------------------
WITH_CLUSTER_CLIENT = """
    import json, os
    from rhtc.client import LocalCluster, imap_unordered, remote_map, submit
    from rhtc.client import local

    def where(x):
        return os.environ.get("RHTC_BROKER", "")

    def redis_servers():
        me, found = str(os.getpid()), 0
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read()
            except (OSError, IndexError):
                continue
            found += fields[1] == me and b"redis-server" in cmd
        return found

    outer_url = os.environ.get("RHTC_BROKER")
    with LocalCluster(n_workers=2, name_prefix="blk") as c:
        names = {p.worker_name for p in c.procs}
        got = {
            "remote_map": [r for r in remote_map(where, range(4), progress=False)],
            "submit": submit(where, range(3)).wait(timeout=60),
            "imap": [r.value for r in imap_unordered(where, range(3))],
            "workers": sorted({r.meta["worker"] for r in imap_unordered(where, range(6))}),
        }
        got["in_block"] = [x == c.config.url for k in ("remote_map", "submit", "imap") for x in got[k]]
        got["names"] = sorted(names)
        got["servers_in_block"] = redis_servers()
        got["default_started"] = local._default is not None
    got["after"] = outer_url is None or remote_map(where, [0], progress=False)[0] == outer_url
    print(json.dumps(got), flush=True)
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("configured", [False, True], ids=["nothing-configured", "RHTC_BROKER-set"])
def test_with_local_cluster_is_the_default_inside_the_block(broker, workers, configured):
    """Inside `with LocalCluster(n_workers=2):` remote_map, submit and imap_unordered
    without broker= run on the block's workers; no second redis-server (no session default
    cluster) is started; after the block the previous default ($RHTC_BROKER) comes back."""
    if configured:
        workers.start(1)                 # the configured broker's own worker, for after the block
    done = _run_client(WITH_CLUSTER_CLIENT, broker if configured else None, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(got["in_block"]), got
    assert set(got["workers"]) <= set(got["names"]), got
    assert got["servers_in_block"] == 1 and not got["default_started"], got
    assert got["after"], got


# -- bad input refused at the call -----------------------------------------------------------------
def _no_map_queued(storage):
    assert map_keys(storage) == [] and storage.pool.shared_depth() == 0 and storage.pool.maps_in_flight() == []


@pytest.mark.parametrize("call, match", [
    (lambda b: remote_map(square, "abc", broker=b), r"args is the string 'abc'.*list\('abc'\)"),
    (lambda b: remote_map(square, "/data/nano.root", broker=b), r"args is the path .*make_chunks"),
    (lambda b: remote_map(square, 5, broker=b), r"args must be an iterable.*not int 5.*\[5\]"),
    (lambda b: remote_map(square, [1], broker=b, reduce="sum"), r"reduce must be True.*not 'sum'"),
    (lambda b: remote_map(square, [1], broker=b, retries=-1), r"retries must be a whole number >= 0.*-1"),
    (lambda b: remote_map(square, [1], broker=b, retries=1.5), r"retries must be a whole number"),
    (lambda b: remote_map(square, [1], broker=b, retry_on=(ValueError, 3)), r"retry_on holds 3"),
    (lambda b: remote_map(square, [1], broker=b, retry_on=42), r"retry_on must be exception types"),
    (lambda b: remote_map(5, [1], broker=b), r"fn must be a callable.*not int"),
    (lambda b: remote_map(square, [1], broker=b, errors="ignore"), r"errors must be 'raise'.*'ignore'"),
    (lambda b: remote_map(square, [1], broker=b, timeout=0), r"timeout must be a number of seconds > 0"),
    (lambda b: remote_map(square, [1], broker=b, stragglers=1), r"stragglers must be a factor > 1"),
    (lambda b: remote_map(square, [1], broker=b, routing="yes"), r"routing must be True or False"),
    (lambda b: submit(square, "abc", broker=b), r"args is the string"),
    (lambda b: submit(square, [1], broker=b, errors="ignore"), r"errors must be"),
    (lambda b: imap_unordered(square, 5, broker=b), r"args must be an iterable"),
    (lambda b: imap_unordered(square, [1], broker=b, retries=-1), r"retries must be"),
], ids=["str", "path", "int", "reduce-sum", "retries-neg", "retries-float", "retry_on-elem",
        "retry_on-int", "fn", "errors", "timeout", "stragglers", "routing", "submit-str",
        "submit-errors", "imap-int", "imap-retries"])
def test_bad_map_arguments_refused_before_anything_is_queued(broker, storage, call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call(broker)                     # imap_unordered too: at the call, not at the first next()
    _no_map_queued(storage)


def test_retry_on_one_class_is_taken_as_a_tuple(broker, workers, storage, tmp_path):
    """retry_on=ValueError (a class, not a tuple) retries, instead of failing when the first
    error arrives."""
    workers.start(1)
    marker = tmp_path / "first"
    assert remote_map(_fails_once, [str(marker)], broker=broker, progress=False, retries=1,
                      retry_on=ValueError, timeout=120) == ["ok"]
    assert remote_map(_fails_once, [str(tmp_path / "again")], broker=broker, progress=False,
                      retries=1, retry_on="ValueError", timeout=120) == ["ok"]


def _fails_once(path):
    if not os.path.exists(path):
        open(path, "w").close()
        raise ValueError("the first run fails")
    return "ok"
