"""Every Redis command of the project, behind one small class per role over one connection.

``Storage`` owns the connection (:class:`broker.link.Link`) and three roles, whose plainly
named methods make the rest of the code read as intent, never as Redis:

* ``storage.maps``, the client's map queue (:class:`broker.mapqueue.MapQueue`): enqueue,
  keep alive, fetch results, sign the end, cancel, audit;
* ``storage.lease``, the worker's lease (:class:`broker.leases.Lease`): claim, heartbeat,
  take, hand in, merge up, release, reconcile, reap;
* ``storage.pool``, the operator's pool view (:class:`broker.pool.PoolView`): the workers'
  statuses, where chunks are cached, the maps in flight, the pool keeper's record.

The key schema is in :mod:`broker.wire.keys`; the atomic steps are the Lua scripts in
``broker/lua/``, each called through its wrapper in :mod:`broker.scriptargs`; a task's
moves between them are one table, :mod:`broker.taskmoves`.

Example (against a running broker)::

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.ping(), s.pool.worker_count(), s.maps.unread_results("0123456789abcdef")
    (True, 0, 0)
"""
from __future__ import annotations

import json
import time

import redis

from .wire.config import BrokerConfig, Settings, redact
from .errors import PARSER, ConnectionProblem
from .leases import Lease
from .link import Link
from .mapqueue import FETCH_BYTES, MapQueue
from .pool import PoolView
from .wire.records import PROBLEM, checked

__all__ = ["AuthenticationError", "FETCH_BYTES", "Storage", "connect"]

#: the broker refused the password (or user): re-exported, so callers never import redis
AuthenticationError = redis.AuthenticationError


def connect(config: BrokerConfig, **kwargs) -> redis.Redis:
    """A redis-py client for ``config.url`` (redis://, rediss://, unix://)."""
    opts = dict(socket_timeout=30, socket_connect_timeout=10, health_check_interval=15,
                parser_class=PARSER)
    if not config.url.startswith("unix:"):
        opts["socket_keepalive"] = True
    opts.update(kwargs)
    try:
        return redis.Redis.from_url(config.url, **opts)
    except ValueError as err:
        raise ValueError(f"cannot use broker URL {redact(config.url)}: {err}. Expected "
                         "redis://[:password@]host:port[/db], rediss://... or unix:///path.sock") from err


class Storage:
    """The broker as the project sees it: one connection (``link``) and its roles,
    ``maps``, ``lease`` and ``pool`` (see the module's docstring); here only what is the
    connection's own (ping, memory, the problems log, closing)."""

    def __init__(self, config: BrokerConfig, settings: Settings | None = None, *,
                 client: redis.Redis | None = None, **redis_kwargs):
        """``client``: share this redis-py client (its connection pool) instead of opening
        one; the hot path still gets a connection of its own (:class:`~broker.fastlane.FastLane`)."""
        self.link = Link(config, settings, client if client is not None else connect(config, **redis_kwargs))
        self.config, self.settings, self.keys = config, self.link.settings, self.link.keys
        self.r = self.link.r                    # the raw client: the adapter's and the tests' only
        self.malformed = self.link.malformed    # what its readers skipped (broker/wire/records.py)
        self.maps = MapQueue(self.link)
        self.lease = Lease(self.link)
        self.pool = PoolView(self.link)

    # -- connection -----------------------------------------------------------------
    def ping(self) -> bool:
        """True if the broker answers; raises a clear ConnectionError otherwise."""
        try:
            return bool(self.r.ping())
        except AuthenticationError as err:
            raise PermissionError(f"broker {redact(self.config.url)} refused the password: {err}. "
                                  "Check the password in the URL or config file.") from err
        except ConnectionProblem as err:
            raise ConnectionError(f"cannot reach the broker at {redact(self.config.url)}: {err}. "
                                  "Is it running (`rhtc broker`) and is the URL right?") from err

    def reset_connection(self) -> None:
        """Drop the hot-path connection (it reconnects on the next command)."""
        self.link.fast.reset()

    def close(self) -> None:
        """Delete the keys of maps ended lazily (if the broker answers) and close the connections."""
        try:
            self.maps.flush()
        except ConnectionProblem:
            pass
        self.link.fast.reset()
        self.r.close()

    def broker_ms(self) -> int:
        """The broker's clock (ms): :meth:`broker.link.Link.broker_ms`."""
        return self.link.broker_ms()

    def server_info(self) -> dict:
        return self.r.info("server")

    def memory(self) -> tuple[int, int]:
        """(used bytes, maxmemory bytes or 0 when unlimited)."""
        info = self.r.info("memory")
        return int(info["used_memory"]), int(info.get("maxmemory", 0))

    def server_load(self) -> tuple[float, int, int]:
        """(seconds of CPU the broker has used, system and user; used memory bytes; clients
        connected), from INFO: what ``bench scale`` reads before and after a map."""
        info = self.r.info()
        return (float(info["used_cpu_sys"]) + float(info["used_cpu_user"]), int(info["used_memory"]),
                int(info["connected_clients"]))

    def server_counters(self) -> dict:
        """The broker's INFO (every section): what ``bench``'s probes read before and after."""
        return self.r.info()

    def memory_or_none(self) -> tuple[int, int]:
        """:meth:`memory`, or (0, 0) when the broker cannot say (unreachable, refusing)."""
        try:
            return self.memory()
        except Exception:
            return 0, 0

    # -- the problems log --------------------------------------------------------------
    def report(self, message: str) -> None:
        """Leave a problem where `rhtc status` and the client can see it."""
        pipe = self.r.pipeline(transaction=False)
        pipe.lpush(self.keys.log, json.dumps({"t": time.time(), "message": message}))
        pipe.ltrim(self.keys.log, 0, 199)
        pipe.expire(self.keys.log, self.settings.log_ttl)
        pipe.execute()

    def recent_problems(self, n: int = 20) -> list[dict]:
        return checked(self, self.keys.log, self.r.lrange(self.keys.log, 0, n - 1), PROBLEM)

    def count_keys(self) -> int:
        """How many keys exist under this namespace (for tests and `rhtc status`)."""
        return sum(1 for _ in self.r.scan_iter(match=f"{self.keys.ns}:*", count=1000))
