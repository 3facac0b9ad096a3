"""The client's beacon: while a map of this process runs, a background thread keeps saying
"this client is alive" in the broker (a key that expires after ``settings.client_ttl``).
When the process dies (SIGKILL, a crashed notebook kernel, a laptop lid), the beacon
stops: workers drop its maps' queued tasks within seconds instead of running them
for nobody (:mod:`broker.wire.keys`, ``client`` key; the sweep and the take script).

The thread, not the poll loop, renews it: a client busy in Python between two polls
(reducing results, plotting) stays alive. It runs only while a map is open, one thread
per broker: a broker that stalls (a frozen server, a cut network: a call waits up to its
30 s socket timeout) delays only its own beacon, never the maps of this process on
another broker, which would otherwise be dropped as a dead client's after ``client_ttl``.

    >>> from rhtc.client.engine.beacon import client_id
    >>> len(client_id())
    16
"""
from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import weakref

from ...broker.errors import BrokerTrouble

log = logging.getLogger("rhtc.client")

_lock = threading.Lock()
_beacons: dict[tuple, "_Beacon"] = {}             # (url, namespace) -> that broker's beacon
_ids: dict[int, str] = {}                          # pid -> this process's id (new after a fork)


class _Beacon:
    """One broker's beacon: the open maps there (anything with ``.storage``) and the
    thread that renews this client's key while any is open."""

    def __init__(self, where: tuple):
        self.where = where
        self.runs: "weakref.WeakSet" = weakref.WeakSet()
        self.thread: threading.Thread | None = None


def client_id() -> str:
    """This process's client id: the name of its beacon (new in a forked child)."""
    pid = os.getpid()
    if pid not in _ids:
        _ids.clear()
        _ids[pid] = secrets.token_hex(8)
    return _ids[pid]


def _where(run) -> tuple:
    config = run.storage.config
    return config.url, config.namespace


def attach(run) -> None:
    """Keep the beacon going while ``run`` (a map; its ``storage`` is the broker) is open."""
    with _lock:
        b = _beacons.get(_where(run))
        if b is None:
            b = _beacons[_where(run)] = _Beacon(_where(run))
        b.runs.add(run)
        if b.thread is None or not b.thread.is_alive():
            b.thread = threading.Thread(target=_beat, args=(b,), name="rhtc-client-beacon", daemon=True)
            b.thread.start()


def detach(run) -> None:
    """``run`` ended; its broker's thread stops once no map is open there (the key then
    expires)."""
    with _lock:
        b = _beacons.get(_where(run))
        if b is not None:
            b.runs.discard(run)


def _beat(b: _Beacon) -> None:
    me = threading.current_thread()
    while True:
        with _lock:
            runs = list(b.runs)
            if not runs:
                if b.thread is me:
                    b.thread = None
                    if _beacons.get(b.where) is b:
                        del _beacons[b.where]
                return
        storage = runs[0].storage
        period = min(r.storage.settings.client_ttl for r in runs) / 4
        runs = None                              # (a map that ends meanwhile can be collected)
        try:
            storage.maps.renew_client(client_id())
        except BrokerTrouble as err:             # the map's own loop reports a lost broker
            log.debug("client beacon: cannot reach %s: %s", b.where[0], err)
        except Exception as err:                 # noqa: BLE001 - a beacon that dies drops its maps
            log.warning("client beacon for %s: %s: %s; it goes on", b.where[0], type(err).__name__, err)
        storage = None
        time.sleep(period)
