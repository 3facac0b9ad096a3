"""The maps registry cleans itself: the entry of a map whose client died goes away
without anyone running `rhtc status`, and the registry itself has an expiry."""
from __future__ import annotations

import time

from rhtc.broker.wire.config import Settings
from rhtc.broker.storage import Storage
from rhtc.client.engine.maprun import MapRun
from tests.helpers import nap


def _ids(storage: Storage) -> set[str]:
    return {m.decode() for m in storage.r.zrange(storage.keys.maps, 0, -1)}


def test_killed_clients_map_leaves_the_registry_without_rhtc_status(broker, workers):
    short = Storage(broker.config, settings=Settings(map_ttl=2))
    try:
        abandoned = MapRun(short, nap, [0.01] * 8)       # no worker yet: it stays queued
        abandoned.submit()
        assert abandoned.map_id in _ids(short)
        assert 0 < short.r.ttl(short.keys.maps) <= 12    # a registry nobody renews expires
        # the client "dies": it never polls or renews again. Another client runs a map.
        time.sleep(2.5)
        workers.start(1)
        live = MapRun(short, nap, [0.2] * 12)
        live.submit()
        out = []
        deadline = time.monotonic() + 60
        while not live.done and time.monotonic() < deadline:
            out += live.poll(1.0)
        assert sorted(r.value for r in out) == [0.2] * 12
        assert abandoned.map_id not in _ids(short)      # pruned by the other client's upkeep
        assert live.map_id in _ids(short) or live.done
        live.close()
        abandoned.cancel()
    finally:
        short.close()
