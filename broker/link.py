"""One connection to the broker, shared by the roles of :class:`broker.storage.Storage`
(the client's map queue, the worker's lease, the operator's pool view, the pool keeper's
record): the redis-py client, its scripts, the hot path's own connection, the key names,
the settings, what its readers skipped and the broker's clock.

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import connect
    >>> with EmbeddedBroker() as b:
    ...     link = Link(b.config, None, connect(b.config))
    ...     link.broker_ms() > 0
    True
"""
from __future__ import annotations

import time

import redis

from .wire.config import BrokerConfig, Settings
from .wire.config import settings as default_settings
from .fastlane import FastLane
from .functions import Library
from .wire.keys import Keys
from .wire.records import MalformedLog


class Link:
    """What every role of the adapter shares: set once here, never added to later."""

    def __init__(self, config: BrokerConfig, settings: Settings | None, r: redis.Redis):
        self.config = config
        self.settings = settings or default_settings()
        self.keys = Keys(config.namespace)
        self.r = r                               # the shared redis-py client (its connection pool)
        self.scripts = Library(r)                # the Lua scripts (broker/functions.py)
        self.fast = FastLane(r)                  # the hot path's own connection
        self.malformed = MalformedLog()          # what its readers skipped (broker/wire/records.py)
        self._clock_offset: float | None = None  # broker clock minus ours (ms), from TIME

    def broker_ms(self) -> int:
        """The broker's clock (ms), estimated from ours and the offset last seen by TIME, so
        that tokens do not depend on the clocks of the client's and the workers' nodes."""
        if self._clock_offset is None:
            self.set_clock(self.r.time())
        return int(time.time() * 1000 + self._clock_offset)

    def set_clock(self, t) -> None:
        """Learn the broker's clock from a ``TIME`` reply (seconds, microseconds)."""
        self._clock_offset = int(t[0]) * 1000 + int(t[1]) / 1000 - time.time() * 1000
