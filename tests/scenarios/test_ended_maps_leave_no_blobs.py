"""A map that ends leaves no blob behind, however it ends: the loop of ``imap_unordered``
left early, ``remote_map``'s ``timeout=``, ``cancel()``, Ctrl-C, or an error of the
reduction. The blobs of the stubs still in its results list go with its keys
(``drop_map`` in lua/lib.lua), and a worker's late hand-in finds the map gone and takes
its blob with it (lua/take.lua). (The normal end, a lazy end and a cancel with stubs left
unread, on the broker alone: tests/integration/test_blobs.py.)

Each map returns big results (320 kB of floats: blobs, broker/wire/blobs.py) and is ended
while stubs wait unread (the client's reduction is made slow, or the loop waits for them);
then, once no worker holds a task any more, no blob key is left. Real redis-server, real
workers.
"""
from __future__ import annotations

import _thread
import threading
import time

import pytest

from rhtc.client import imap_unordered, remote_map, submit
from tests.kits.blob import blob_keys, counted_big
from tests.conftest import map_keys
from tests.helpers import register_by_value, wait_until

register_by_value(__name__)

N = 60


def stubs_waiting(storage, n: int = 3) -> bool:
    """Whether the (one) map in flight has ``n`` results waiting unread."""
    maps = storage.r.zrange(storage.keys.maps, 0, -1)
    return bool(maps) and storage.r.llen(storage.keys.results(maps[0].decode())) >= n


class FoldThat:
    """A client-side reduction (``merge=False``) whose first fold waits until stubs wait
    unread in the results list, then ends the map with ``then()`` (raise, Ctrl-C, ...):
    the map ends with blobs unread, whatever the timing of the workers."""

    def __init__(self, storage, then=lambda: None):
        self.storage, self.then, self.folds = storage, then, 0

    def __call__(self, a, b):
        self.folds += 1
        if self.folds == 1:
            wait_until(lambda: stubs_waiting(self.storage), 30, "stubs waiting unread")
            self.then()
        return {"c": a["c"] + b["c"]}


def nothing_left(storage, names: list[str]) -> None:
    """Once no worker holds a task (its late results handed in or dropped), no blob and no
    key of the map is left."""
    def idle():
        statuses = {s.name: s for s in storage.pool.worker_statuses(queue_depths=False)}
        return all(n in statuses and statuses[n].task is None and not storage.r.hlen(storage.keys.lease(n))
                   for n in names)
    wait_until(idle, 60, "the workers to hold no task of the ended map")
    left = blob_keys(storage)
    assert left == [], f"{len(left)} blob key(s) left behind: {left[:3]}"
    assert map_keys(storage) == []


def args(tmp_path, gated: int = 0) -> list:
    """Tasks of 20 ms; the last ``gated`` ones wait for ``tmp_path/go`` (late hand-ins)."""
    return [(str(tmp_path), i, "wait" if i >= N - gated else 0.02) for i in range(N)]


@pytest.mark.timeout(120)
def test_leaving_imap_unordered_early(broker, storage, workers, tmp_path):
    names = workers.start(2)
    for _ in imap_unordered(counted_big, args(tmp_path, gated=2), broker=broker):
        wait_until(lambda: stubs_waiting(storage), 30, "stubs waiting unread")
        break
    (tmp_path / "go").touch()               # the two running tasks end after the map
    nothing_left(storage, names)


@pytest.mark.timeout(120)
def test_remote_map_ended_by_its_timeout(broker, storage, workers, tmp_path):
    names = workers.start(2)
    t0 = time.monotonic()

    def past_the_deadline():
        while time.monotonic() < t0 + 3.0:
            time.sleep(0.05)
    with pytest.raises(TimeoutError):       # two tasks wait for a gate: the map cannot end
        remote_map(counted_big, args(tmp_path, gated=2), broker=broker, reduce=FoldThat(storage, past_the_deadline),
                   merge=False, progress=False, timeout=2.0)
    (tmp_path / "go").touch()
    nothing_left(storage, names)


@pytest.mark.timeout(120)
def test_a_cancelled_map(broker, storage, workers, tmp_path):
    names = workers.start(2)
    folding, cancelled = threading.Event(), threading.Event()

    def hold():
        folding.set()
        cancelled.wait(30)
    h = submit(counted_big, args(tmp_path, gated=2), broker=broker, reduce=FoldThat(storage, hold), merge=False)
    assert folding.wait(30)
    h.cancel()
    cancelled.set()
    (tmp_path / "go").touch()
    nothing_left(storage, names)


@pytest.mark.timeout(120)
def test_ctrl_c(broker, storage, workers, tmp_path):
    names = workers.start(2)

    def ctrl_c():
        _thread.interrupt_main()            # SIGINT's own path: KeyboardInterrupt in this thread
        time.sleep(5)
    with pytest.raises(KeyboardInterrupt):
        remote_map(counted_big, args(tmp_path, gated=2), broker=broker, reduce=FoldThat(storage, ctrl_c),
                   merge=False, progress=False)
    (tmp_path / "go").touch()
    nothing_left(storage, names)


@pytest.mark.timeout(120)
def test_an_error_of_the_reduction(broker, storage, workers, tmp_path):
    names = workers.start(2)

    def fail():
        raise ValueError("the reduction fails")
    with pytest.raises(ValueError, match="the reduction fails"):
        remote_map(counted_big, args(tmp_path, gated=2), broker=broker, reduce=FoldThat(storage, fail),
                   merge=False, progress=False)
    (tmp_path / "go").touch()
    nothing_left(storage, names)
