"""coffea's cache strategy outside a worker (client/coffea.py): ``worker_cache`` is None in
a process that is no worker (coffea then keeps no cache), and ``rhtc.coffea`` resolves to
the same executor. No processes; coffea's processors on real workers:
tests/scenarios/test_coffea_on_workers_answers_as_coffea.py."""
from __future__ import annotations

import pytest

pytest.importorskip("coffea")

import rhtc  # noqa: E402
from rhtc.client.coffea import RedisExecutor, worker_cache  # noqa: E402


def test_worker_cache_is_none_outside_a_worker_and_rhtc_coffea_resolves():
    assert worker_cache() is None
    assert rhtc.coffea.RedisExecutor is RedisExecutor
