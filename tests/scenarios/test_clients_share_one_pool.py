"""Two analysts, one pool: maps of different clients take turns on the workers,
and the queued tasks of a client that died are dropped within seconds, keys and all.

The big client is a real process (so that it can be SIGKILLed); its tasks write one file
each, so the tests count what really ran. Nothing asserts a duration.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rhtc.broker.wire.config import Settings
from rhtc.processes import stop_processes
from rhtc.broker.storage import Storage
from rhtc.client import remote_map
from rhtc.client.engine.maprun import MapRun
from rhtc.client.ops.status import render_status
from tests.conftest import ROOT
from tests.helpers import wait_until

BIG = 300                    # the other analyst's map: 300 tasks of 0.2 s on 2 workers

BIG_CLIENT = textwrap.dedent("""
    import os, sys, time
    from rhtc.client import submit

    class Piece:                       # routed: each task goes to one worker's own queue
        def __init__(self, folder, i):
            self.folder, self.i, self.routing_key = folder, i, f"piece-{i}"

    def task(arg):
        folder, i = (arg.folder, arg.i) if isinstance(arg, Piece) else arg
        open(os.path.join(folder, str(i)), "w").close()
        time.sleep(0.2)
        return i

    folder, n, routed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    h = submit(task, [Piece(folder, i) if routed else (folder, i) for i in range(n)])
    print(h.map_id, flush=True)
    h.wait(timeout=600)
    print("done", flush=True)
""")


def touch(arg):
    folder, i = arg
    open(os.path.join(folder, str(i)), "w").close()
    return i


def nap(x):
    time.sleep(0.05)
    return x * 2


def _ran(folder) -> int:
    return len(os.listdir(folder))


@pytest.fixture
def big_client(broker, tmp_path):
    """Start the other analyst's process with a map of ``BIG`` tasks; returns (process, map
    id, folder of its side effects). Stopped by pid at the end."""
    procs = []

    def start(routed: bool = False):
        folder = tmp_path / "big"
        folder.mkdir()
        env = dict(os.environ, **broker.config.env(), RHTC_CLIENT_TTL="2")
        with open(tmp_path / "big.err", "wb") as err:
            p = subprocess.Popen([sys.executable, "-c", BIG_CLIENT, str(folder), str(BIG), str(int(routed))],
                                 env=env,
                                 cwd=str(ROOT), stdout=subprocess.PIPE, stderr=err)
        procs.append(p)
        map_id = p.stdout.readline().decode().strip()
        assert len(map_id) == 16, f"the big client did not start its map:\n{(tmp_path / 'big.err').read_text()}"
        wait_until(lambda: _ran(folder) >= 2, 60, "the big map's first tasks to run")
        return p, map_id, folder

    yield start
    stop_processes(procs)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("routed", [False, True], ids=["shared", "routed"])
def test_a_small_map_takes_turns_with_another_clients_big_map(broker, storage, workers, big_client, tmp_path,
                                                             routed):
    """The big map's tasks wait in the shared queue (its backlog), or, routed, in the two
    workers' own queues; either way the 2-task map gets its turn."""
    workers.start(2)
    proc, big_id, big_folder = big_client(routed)
    if routed:
        assert sum(w["queued"] for w in storage.pool.live_workers()) > BIG // 2   # really routed
    small = tmp_path / "small"
    small.mkdir()
    assert remote_map(touch, [(str(small), 0), (str(small), 1)], broker=broker, progress=False,
                      timeout=240) == [0, 1]
    ran = _ran(big_folder)
    # the 2-task map did not wait behind the other map's queue: most of it is still queued
    assert ran < BIG // 2, f"the small map finished only after {ran} of the big map's {BIG} tasks ran"
    assert proc.poll() is None                          # the big map goes on undisturbed
    status = render_status(storage)                     # every client's map, its client and depth
    line = next((x for x in status.splitlines() if x.strip().startswith(big_id)), "")
    assert "client" in line and "queued" in line and "alive" in line, status
    big = next(m for m in storage.pool.maps_in_flight() if m["map_id"] == big_id)
    assert big["client_alive"] is True, big
    if not routed:
        assert big["queued"] > BIG // 2, big


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_clients_queued_tasks_are_dropped_with_its_keys(broker, storage, workers, big_client):
    workers.start(2)
    proc, big_id, big_folder = big_client()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = _ran(big_folder)

    def gone():
        return not [k for k in storage.r.scan_iter(match=f"{storage.keys.ns}:*") if big_id.encode() in k]
    wait_until(gone, 60, f"the keys of map {big_id} of the killed client to go")
    at_gone = _ran(big_folder)
    wait_until(lambda: storage.pool.shared_depth() == 0
               and all(w["task"] is None for w in storage.pool.live_workers()), 60, "the workers to go idle")
    time.sleep(1.0)
    final = _ran(big_folder)
    # what ran after the keys went is at most what the two workers held then
    assert final - at_gone <= 2, (at_kill, at_gone, final)
    # nearly all of the map's queued tasks were never run (its client's beacon expires
    # 2 s after the kill; 2 workers run about 10 of these tasks a second)
    assert final < BIG // 2, (at_kill, at_gone, final)
    assert big_id not in render_status(storage)
    # the pool serves the next map at once
    assert remote_map(nap, [1, 2, 3], broker=broker, progress=False, timeout=60) == [2, 4, 6]


@pytest.mark.timeout(120)
def test_a_client_busy_between_polls_keeps_its_map_alive(broker, workers):
    workers.start(1)
    st = Storage(broker.config, Settings(client_ttl=2.0))
    other = Storage(broker.config)
    run = MapRun(st, nap, list(range(10)))
    try:
        run.submit()
        t = time.monotonic()
        beats = set()
        while time.monotonic() - t < 6.0:               # busy in Python, three beacon lives, no poll
            sum(i * i for i in range(10_000))
            info = next((m for m in other.pool.maps_in_flight() if m["map_id"] == run.map_id), None)
            beats.add(None if info is None else info["client_alive"])
        assert beats == {True}, "the map's client was declared dead while it was only busy"
        got = {}
        while not run.done:
            for r in run.poll(timeout=1.0):
                got[r.index] = r.value
        assert got == {i: 2 * i for i in range(10)}
    finally:
        run.close()
        st.close()
        other.close()


@pytest.mark.timeout(120)
def test_a_map_whose_whole_window_was_lost_still_finishes(broker, storage, workers):
    """Workers that died right after popping every task of a map's window from the shared
    queue (before leasing them): the audit resubmits those, straight into the shared
    queue, and the backlog behind them flows again."""
    from rhtc.client import submit
    n, window = 30, storage.settings.fair_window
    h = submit(nap, range(n), broker=broker)
    lost = [storage.r.rpop(storage.keys.shared_queue) for _ in range(window)]
    assert all(lost) and storage.pool.shared_depth() == 0
    assert storage.r.llen(storage.keys.backlog(h.map_id)) == n - window
    workers.start(1)
    assert h.wait(timeout=90) == [2 * i for i in range(n)]
    assert h.run.resubmissions == window
