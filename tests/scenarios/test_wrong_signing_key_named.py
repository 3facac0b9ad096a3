"""A wrong key is named, fast: a map whose every worker holds another signing key fails
within seconds naming them; a pool with one such worker warns and routes around it. Real
workers that hold another signing key."""
from __future__ import annotations

import dataclasses
import os
import time
import warnings

import pytest

from rhtc import KeyMismatch, remote_map
from rhtc.client.ops.status import render_status

from tests.conftest import Workers
from tests.helpers import square


def slow_square(x):
    time.sleep(0.05)
    return x * x


@pytest.fixture
def strangers(broker, tmp_path):
    """Workers attached to the same broker but holding another signing key."""
    other = dataclasses.replace(broker.config, key=os.urandom(32))
    w = Workers(other, tmp_path)
    w._n = 1000                # names tw1001-<pid>...: distinct from the `workers` fixture's
    yield w
    w.stop_all()


def test_all_workers_with_another_key_fail_fast_naming_them(broker, strangers):
    names = strangers.start(2)
    t = time.monotonic()
    with pytest.raises(KeyMismatch) as info:
        remote_map(square, range(6), broker=broker, progress=False, timeout=60)
    assert time.monotonic() - t < 15
    text = str(info.value)
    assert "key" in text and all(n in text for n in names)
    assert isinstance(info.value, RuntimeError)


def test_mixed_pool_warns_and_routes_around_the_misfit(broker, workers, strangers, storage):
    good = workers.start(1)
    bad = strangers.start(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = remote_map(slow_square, range(40), broker=broker, progress=False, timeout=120, label="mixed")
    assert out == [x * x for x in range(40)]
    texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any(bad[0] in t for t in texts), texts
    assert not any(good[0] in t for t in texts)
    status = render_status(storage)
    assert bad[0] in status and "another signing key" in status
