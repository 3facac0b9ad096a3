"""The client's beacon: while a map of this process runs, a background thread keeps saying
"this client is alive" in the broker (a key that expires after ``settings.client_ttl``).
When the process dies (SIGKILL, a crashed notebook kernel, a laptop lid), the beacon
stops: workers drop its maps' queued tasks within seconds instead of running them
for nobody (:mod:`broker.wire.keys`, ``client`` key; the sweep and the take script).

The thread, not the poll loop, renews it: a client busy in Python between two polls
(reducing results, plotting) stays alive. It runs only while a map is open.

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
_open: "weakref.WeakSet" = weakref.WeakSet()      # open MapRuns (anything with .storage)
_thread: threading.Thread | None = None
_ids: dict[int, str] = {}                          # pid -> this process's id (new after a fork)


def client_id() -> str:
    """This process's client id: the name of its beacon (new in a forked child)."""
    pid = os.getpid()
    if pid not in _ids:
        _ids.clear()
        _ids[pid] = secrets.token_hex(8)
    return _ids[pid]


def attach(run) -> None:
    """Keep the beacon going while ``run`` (a map; its ``storage`` is the broker) is open."""
    global _thread
    with _lock:
        _open.add(run)
        if _thread is None or not _thread.is_alive() or _thread.ident is None:
            _thread = threading.Thread(target=_beat, name="rhtc-client-beacon", daemon=True)
            _thread.start()


def detach(run) -> None:
    """``run`` ended; the thread stops once no map is open (the key then expires)."""
    with _lock:
        _open.discard(run)


def _beat() -> None:
    global _thread
    me = threading.current_thread()
    while True:
        with _lock:
            storages = {id(r.storage): r.storage for r in list(_open)}
            if not storages:
                if _thread is me:
                    _thread = None
                return
        period = min(s.settings.client_ttl for s in storages.values()) / 4
        for s in storages.values():
            try:
                s.maps.renew_client(client_id())
            except BrokerTrouble as err:         # the map's own loop reports a lost broker
                log.debug("client beacon: cannot reach %r: %s", s.config, err)
        storages = None
        time.sleep(period)
