"""An error while folding or collecting the results ends the map, and is raised, instead of
a map that hangs: a ``reduce`` that cannot fold two results raises, naming the task whose
result it was folding, and leaves no key of the map in Redis (with ``remote_map``, and with
``submit``, whose map ends at the error, not after every task); a broker lost while a
handle collects in the background ends its map with ``BrokerLost``. A reduction that
leaves failed tasks out (``errors="return"``) warns, naming them.

Real parts: a real redis-server and real worker processes (conftest)."""
from __future__ import annotations

import dataclasses
import operator

import pytest

import rhtc
from rhtc.client import remote_map
from rhtc.broker.storage import Storage
from rhtc.broker.wire.config import settings as process_settings
from tests.conftest import map_keys
from tests.helpers import poll_until


def _slow_square(x):
    import time as _t
    _t.sleep(0.2)
    return x * x


def _refuse_fold(a, b):
    raise ValueError("cannot fold these two")


# -- an error while folding or collecting ends the map and is raised -------------------------------

def test_remote_map_reduce_error_names_the_task_and_removes_the_keys(broker, storage, workers):
    from rhtc import remote_map
    workers.start(1)
    with pytest.raises(ValueError, match="cannot fold") as info:
        remote_map(_slow_square, range(6), broker=broker.config, reduce=_refuse_fold, progress=False)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "while folding the result of task" in notes and "argument:" in notes
    assert poll_until(lambda: map_keys(storage) == [], 30), map_keys(storage)


def test_submit_reduce_error_ends_the_map_at_once(broker, storage, workers):
    from rhtc import submit
    workers.start(1)
    handle = submit(_slow_square, range(30), broker=broker.config, reduce=_refuse_fold)
    assert poll_until(handle.done, 90), "the map never reported done after its fold failed"
    assert handle.received < 30              # ended at the error, not after every task
    with pytest.raises(ValueError, match="cannot fold") as info:
        handle.wait(5)
    assert "while folding the result of task" in "\n".join(info.value.__notes__)
    assert poll_until(lambda: map_keys(storage) == [], 30), map_keys(storage)


def test_broker_lost_while_collecting_in_the_background_ends_the_map(broker, workers):
    from rhtc.client.api import MapHandle
    from rhtc.client.errors import BrokerLost
    from rhtc.client.engine.maprun import MapRun
    workers.start(1)
    impatient = dataclasses.replace(process_settings(), broker_patience=2.0)
    run = MapRun(Storage(broker.config, settings=impatient), _slow_square, list(range(200)))
    run.submit()
    handle = MapHandle(run).start_background()
    assert poll_until(lambda: handle.received > 0, 60)
    workers.stop_all()
    broker.stop()
    assert poll_until(handle.done, 90), "the map never reported done after its broker went away"
    with pytest.raises(BrokerLost):
        handle.wait(5)


# -- a reduction that leaves failed tasks out says so --------------------------------------------

def fails_on_three(x):
    if x == 3:
        raise ValueError("three is bad")
    return x


@pytest.mark.parametrize("reduce", [True, operator.add], ids=["plus", "function"])
def test_reduce_with_errors_return_warns_naming_the_failed_tasks(broker, workers, reduce):
    workers.start(1)
    with pytest.warns(rhtc.TasksFailedWarning, match=r"1 of 10 tasks failed .* task 3 .*three is bad"):
        got = remote_map(fails_on_three, range(10), broker=broker, progress=False, reduce=reduce,
                         errors="return", timeout=60)
    assert got == 42
    assert [e.index for e in rhtc.last_map().failures] == [3]
