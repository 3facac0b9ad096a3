"""An idle worker imports the analysis stack before its first task (``RHTC_PRELOAD``), in
its task process, so that a fresh worker's first chunk does not pay the imports; with
``RHTC_PRELOAD=none`` it imports nothing; a preload held in its import delays only the task
that imports what it preloads. Real redis-server, real workers. (The gate between a task and
a preload in flight, in one process: tests/unit/worker/test_importgate.py.)"""
from __future__ import annotations

import time

import pytest

from rhtc.broker.wire.config import Settings
from rhtc.client import remote_map
from tests.helpers import wait_until

STACK = ("uproot", "awkward", "numpy", "hist", "coffea")


def imported_before(_):
    """Runs on the worker: which of the stack its task process had imported when it started."""
    import sys
    return [m for m in STACK if m in sys.modules]


def _wait_for_line(workers, name: str, text: str, timeout: float = 60.0) -> str:
    """The log of worker ``name``, once it holds ``text``."""
    return wait_until(lambda: (lambda log: text in log and log)(workers.log(name)), timeout,
                      lambda: f"worker {name} to log {text!r}:\n{workers.log(name)}", interval=0.1)


@pytest.mark.timeout(120)
def test_a_fresh_idle_worker_has_imported_the_stack_before_its_first_task(broker, workers):
    [name] = workers.start(1, extra=("-v",), env={"RHTC_PRELOAD": ""})    # the default (the fixture's is none)
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


SLOW_MODULE = "rhtc_test_slow_preload"


def trivial(x):
    """Runs on the worker: imports nothing."""
    return x + 1


def uses_the_slow_module(_):
    """Runs on the worker: imports the module being preloaded (fully initialized: VALUE is last)."""
    import rhtc_test_slow_preload
    return rhtc_test_slow_preload.VALUE


@pytest.mark.timeout(180)
def test_a_held_preload_delays_only_the_task_that_imports_it(broker, workers, tmp_path):
    """A preload whose import is held (until the test releases it) does not delay tasks that
    do not import it; one that does waits for it and gets it whole; the wait is logged."""
    import os
    import threading
    code = tmp_path / "code"
    code.mkdir()
    entered, release = tmp_path / "entered", tmp_path / "release"
    (code / f"{SLOW_MODULE}.py").write_text(
        "import os, time\n"
        f"open({str(entered)!r}, 'w').close()\n"
        f"while not os.path.exists({str(release)!r}):\n"
        "    time.sleep(0.02)\n"
        "VALUE = 42\n")
    path = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)
    try:
        [name] = workers.start(1, extra=("-v",), env={"RHTC_PRELOAD": SLOW_MODULE, "PYTHONPATH": path})
        wait_until(entered.exists, 60, lambda: f"the preload to start:\n{workers.log(name)}")   # in flight
        assert remote_map(trivial, [1, 2], broker=broker, progress=False, timeout=60) == [2, 3]
        assert not release.exists()                                  # (still held meanwhile)
        got = []
        importing = threading.Thread(target=lambda: got.append(
            remote_map(uses_the_slow_module, [0], broker=broker, progress=False, timeout=120)), daemon=True)
        importing.start()
        _wait_for_line(workers, name, f"while {SLOW_MODULE} is being preloaded: it waits")
        _wait_for_line(workers, name, f"preload: still importing {SLOW_MODULE} after")
        release.touch()
        importing.join(120)
        assert got == [[42]], workers.log(name)
        _wait_for_line(workers, name, f"preload: imported {SLOW_MODULE} in")
    finally:
        release.touch()                                              # nothing stays held
