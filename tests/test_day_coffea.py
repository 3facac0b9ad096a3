"""Issue 22, cases 1, 2, 6 and 7: no hang on a bad fold, coffea's options as in coffea's own
executors, the imports users type, every attempt on the run record and the timeline.

Real parts: a real redis-server and real worker processes (conftest), coffea's
IterativeExecutor as the reference, the real CMS NanoAOD samples.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import warnings

import pytest

from rhtc.broker.config import settings as process_settings
from rhtc.broker.storage import Storage
from tests.conftest import NANOAOD, ROOT, map_keys, needs_nanoaod


def _until(predicate, limit: float = 90.0) -> bool:
    """Poll ``predicate`` until it holds (True) or ``limit`` seconds pass (False): a bound
    against a hang, not a speed assertion."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _slow_square(x):
    import time as _t
    _t.sleep(0.2)
    return x * x


def _refuse_fold(a, b):
    raise ValueError("cannot fold these two")


# -- case 1: an error while folding or collecting ends the map and is raised -------------------

def test_remote_map_reduce_error_names_the_task_and_removes_the_keys(broker, storage, workers):
    from rhtc import remote_map
    workers.start(1)
    with pytest.raises(ValueError, match="cannot fold") as info:
        remote_map(_slow_square, range(6), broker=broker.config, reduce=_refuse_fold, progress=False)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "while folding the result of task" in notes and "argument:" in notes
    assert _until(lambda: map_keys(storage) == [], 30), map_keys(storage)


def test_submit_reduce_error_ends_the_map_at_once(broker, storage, workers):
    from rhtc import submit
    workers.start(1)
    handle = submit(_slow_square, range(30), broker=broker.config, reduce=_refuse_fold)
    assert _until(handle.done), "the map never reported done after its fold failed"
    assert handle.received < 30              # ended at the error, not after every task
    with pytest.raises(ValueError, match="cannot fold") as info:
        handle.wait(5)
    assert "while folding the result of task" in "\n".join(info.value.__notes__)
    assert _until(lambda: map_keys(storage) == [], 30), map_keys(storage)


def test_broker_lost_while_collecting_in_the_background_ends_the_map(broker, workers):
    from rhtc.client.api import MapHandle
    from rhtc.client.errors import BrokerLost
    from rhtc.client.maprun import MapRun
    workers.start(1)
    impatient = dataclasses.replace(process_settings(), broker_patience=2.0)
    run = MapRun(Storage(broker.config, settings=impatient), _slow_square, list(range(200)))
    run.submit()
    handle = MapHandle(run).start_background()
    assert _until(lambda: handle.received > 0, 60)
    workers.stop_all()
    broker.stop()
    assert _until(handle.done), "the map never reported done after its broker went away"
    with pytest.raises(BrokerLost):
        handle.wait(5)


# -- case 6: the imports users type ------------------------------------------------------------

def test_imports_users_type_work_and_import_rhtc_stays_without_coffea():
    code = ("import sys, rhtc\n"
            "from rhtc import ChunkFileError, BranchNotFound, WorkItemFailed, RemoteError, BrokerLost, "
            "BrokerFull, MapCancelled, KeyMismatch, BrokerNotConfigured\n"
            "assert issubclass(ChunkFileError, OSError)\n"
            "assert 'coffea' not in sys.modules, 'import rhtc (and its errors) imported coffea'\n"
            "from rhtc.coffea import RedisExecutor, worker_cache, WorkItemFailed as W2\n"
            "import rhtc.coffea\n"
            "assert W2 is WorkItemFailed and rhtc.coffea.RedisExecutor is RedisExecutor\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("option", ["--workers", "--dask-workers"])
def test_bench_dimuon_refuses_zero_workers(tmp_path, option):
    from click.testing import CliRunner
    from rhtc.bench.dimuon import dimuon_command
    result = CliRunner().invoke(dimuon_command, [option, "0", "--files", "1", "--events", "100", "--no-dask",
                                                 "--repeats", "1", "--data-dir", str(tmp_path / "data"),
                                                 "--json", str(tmp_path / "b.json"), "--no-progress"])
    assert result.exit_code == 2, result.output + repr(result.exception)
    assert option in result.output and "0" in result.output
    assert not isinstance(result.exception, ZeroDivisionError)
