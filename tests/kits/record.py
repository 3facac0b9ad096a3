"""What the tests of malformed records share: a connection with what an attacker holds, the
Redis URL with its password and not the session's signing key, to write records rhtc never
wrote."""
from __future__ import annotations

import redis


def password_only(config) -> redis.Redis:
    """What an attacker holds: the URL with the password, not the signing key."""
    return redis.Redis.from_url(config.url)
