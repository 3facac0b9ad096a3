"""The client's beacon (client/engine/beacon.py) against real redis-servers: while a map of
this process is open on a broker, this client's key there is renewed every quarter of
``client_ttl``; a key that expires gets the client's maps dropped as a dead client's.

Seen: in a full run of the suite, a worker's drain test logged "map ... vanished from the
broker (did it restart?)" and ran a task twice: only the sweep of dead clients drops a live
map, so its key went unrenewed for 10 s. Two ways that happened, both fixed and tested
here: one thread renewed the key on every broker of the process in turn, so an earlier
test's map on a broker that stalls (SIGSTOP, a cut proxy) held it for the 30 s socket
timeout; and an error other than a broker's trouble ended the thread until the next map.
"""
from __future__ import annotations

import os
import signal
import time

from rhtc.broker.embedded import EmbeddedBroker
from rhtc.broker.storage import Storage
from rhtc.client.engine import beacon
from tests.helpers import wait_until
from tests.kits.roles import tuned


class _Run:
    """What the beacon keeps: an open map's broker adapter."""

    def __init__(self, storage):
        self.storage = storage


def _renewed_throughout(storage, seconds: float) -> float:
    """The least time to live the client's key had on ``storage``'s broker, watched for
    ``seconds`` (0: it expired)."""
    key, least = storage.keys.client(beacon.client_id()), float("inf")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        least = min(least, max(0, storage.r.pttl(key)) / 1000)
        time.sleep(0.1)
    return least


def test_a_frozen_broker_never_stops_the_beacon_on_another(storage):
    with EmbeddedBroker() as frozen, tuned(storage, client_ttl=3.0) as healthy:
        stalled = Storage(frozen.config, healthy.settings)
        stuck, live = _Run(stalled), _Run(healthy)
        os.kill(frozen.pid, signal.SIGSTOP)            # its calls wait for the socket timeout (30 s)
        try:
            beacon.attach(stuck)
            time.sleep(0.2)                            # the frozen broker's beacon is in its call
            beacon.attach(live)
            key = healthy.keys.client(beacon.client_id())
            wait_until(lambda: healthy.r.pttl(key) > 0, 5.0,
                       "the first renewal on the healthy broker (its beacon waits on the frozen one?)")
            least = _renewed_throughout(healthy, 3 * healthy.settings.client_ttl)
        finally:
            beacon.detach(stuck)
            beacon.detach(live)
            os.kill(frozen.pid, signal.SIGCONT)
            stalled.close()
        assert least > 0, "the healthy broker's client key expired while another broker was frozen"


def test_the_beacon_outlives_an_error_it_does_not_expect(storage):
    """A renewal that raises something other than a broker's trouble is logged, and the
    beacon goes on (a thread that died dropped every map of the process 10 s later)."""
    with tuned(storage, client_ttl=2.0) as s:
        run = _Run(s)
        calls = []
        renew = s.maps.renew_client

        def flaky(client):
            calls.append(client)
            if len(calls) == 1:
                raise ValueError("an unexpected reply")
            return renew(client)
        s.maps.renew_client = flaky
        try:
            beacon.attach(run)
            deadline = time.monotonic() + 5
            while len(calls) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            beacon.detach(run)
        assert len(calls) >= 3, f"the beacon stopped after {len(calls)} renewal(s)"
        assert s.r.pttl(s.keys.client(beacon.client_id())) > 0
