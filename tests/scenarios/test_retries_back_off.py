"""Retries of a task whose function raised: each after a growing, jittered pause (so a
flaky file server is not hit again at once by every task), held on the client, and
dropped when the map is cancelled. Real redis-server and worker processes (conftest).
"""
from __future__ import annotations

import os
import time

from rhtc.client import RemoteError, remote_map, submit
from rhtc.client.engine.tasks import TaskState
from tests.helpers import wait_until


def fails_twice(log_path):
    """Raises OSError on its first two runs; notes when each run started."""
    with open(log_path, "a") as fh:
        fh.write(f"{time.time()}\n")
    with open(log_path) as fh:
        runs = len(fh.read().split())
    if runs <= 2:
        raise OSError(f"transient failure {runs} of {log_path}")
    return runs


def always_fails(log_path):
    with open(log_path, "a") as fh:
        fh.write(f"{time.time()}\n")
    raise OSError(f"{log_path} is never readable")


def _runs(path) -> list[float]:
    return [float(t) for t in open(path).read().split()] if os.path.exists(path) else []


def test_retries_wait_a_growing_pause(broker, workers, tmp_path):
    workers.start(1)
    log = str(tmp_path / "runs")
    assert remote_map(fails_twice, [log], broker=broker, progress=False, retries=2,
                      retry_on=(OSError,), timeout=60) == [3]
    t = _runs(log)
    assert len(t) == 3
    # RHTC_RETRY_DELAY's default, 1 s, then 2 s, each times 0.8-1.2
    assert t[1] - t[0] >= 0.8, f"the first retry came {t[1] - t[0]:.2f} s after the failure"
    assert t[2] - t[1] >= 1.6, f"the second retry came {t[2] - t[1]:.2f} s after the failure"


def test_a_task_that_keeps_failing_fails_after_its_retries(broker, workers, tmp_path):
    workers.start(1)
    log = str(tmp_path / "runs")
    out = remote_map(always_fails, [log], broker=broker, progress=False, retries=2,
                     errors="return", timeout=60)
    assert isinstance(out[0], RemoteError) and "never readable" in str(out[0])
    assert len(_runs(log)) == 3


def test_cancel_during_the_pause_drops_the_retry(broker, workers, tmp_path):
    workers.start(1)
    log = str(tmp_path / "runs")
    h = submit(always_fails, [log], broker=broker, retries=3)
    wait_until(lambda: h.run.tasks.state(0) is TaskState.BACKOFF, 30, "the failed task to enter its back-off",
               interval=0.02)
    h.cancel()
    time.sleep(3)                                   # past the first pause (at most 1.2 s)
    assert len(_runs(log)) == 1, "a retry ran after the map was cancelled"
    assert h.run.tasks.state(0) is TaskState.CANCELLED
