"""Everything that touches Redis: configuration, the key schema, the wire protocol,
queues and leases, and the embedded ``redis-server``.

Nothing outside this package spells a Redis key or calls a Redis command.
"""
from .config import BrokerConfig, BrokerNotConfigured, KeyNotConfigured
from .protocol import VERSION as PROTOCOL_VERSION

__all__ = ["BrokerConfig", "BrokerNotConfigured", "KeyNotConfigured", "PROTOCOL_VERSION"]
