"""The broker, in two parts.

* :mod:`broker.wire`, the wire vocabulary: frames and signing, messages, records,
  pickling, key names, settings and config. What client and worker agree on; no Redis.
* The Redis adapter (:mod:`broker.storage`): one class per role over one connection (the
  client's map queue, the worker's lease, the operator's pool view), the Lua scripts each
  called through a wrapper that names its arguments, and the embedded ``redis-server``.

Nothing outside this package spells a Redis key or calls a Redis command.
"""
from .wire.config import BrokerConfig, BrokerNotConfigured, KeyNotConfigured
from .wire.protocol import VERSION as PROTOCOL_VERSION

__all__ = ["BrokerConfig", "BrokerNotConfigured", "KeyNotConfigured", "PROTOCOL_VERSION"]
