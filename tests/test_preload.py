"""Issue 29, item 13: an idle worker imports the analysis stack before its first task
(``RHTC_PRELOAD``), in its task process, so that a fresh worker's first chunk does not pay
the imports; with ``RHTC_PRELOAD=none`` it imports nothing. Real redis-server, real workers."""
from __future__ import annotations

import time

import pytest

from rhtc.broker.config import Settings
from rhtc.client import remote_map

STACK = ("uproot", "awkward", "numpy", "hist", "coffea")


def imported_before(_):
    """Runs on the worker: which of the stack its task process had imported when it started."""
    import sys
    return [m for m in STACK if m in sys.modules]


def _wait_for_line(workers, name: str, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = workers.log(name)
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"worker {name} did not log {text!r} in {timeout:.0f} s:\n{workers.log(name)}")


@pytest.mark.timeout(120)
def test_a_fresh_idle_worker_has_imported_the_stack_before_its_first_task(broker, workers):
    [name] = workers.start(1, extra=("-v",))
    log = _wait_for_line(workers, name, "preload: imported")      # idle: it imported them meanwhile
    assert "uproot" in log and "awkward" in log, log
    got = remote_map(imported_before, [0], broker=broker, progress=False, timeout=60)
    assert {"uproot", "awkward", "numpy"} <= set(got[0]), got


@pytest.mark.timeout(120)
def test_with_the_setting_none_a_worker_imports_none_of_it(broker, workers):
    assert {"uproot", "awkward"} <= set(Settings.from_env({}).preload.split(","))  # the default
    assert Settings.from_env({"RHTC_PRELOAD": "none"}).preload == "none"
    [name] = workers.start(1, extra=("-v",), env={"RHTC_PRELOAD": "none"})
    time.sleep(2.0)                                                # idle as long as the other took
    got = remote_map(imported_before, [0], broker=broker, progress=False, timeout=60)
    assert "uproot" not in got[0] and "awkward" not in got[0], got
    assert "preload" not in workers.log(name)
