"""The embedded broker on a unix socket: a real redis-server that answers there, and a
client with the wrong password refused with a PermissionError naming it."""
from __future__ import annotations

import pytest

from rhtc.broker.embedded import EmbeddedBroker
from rhtc.broker.storage import Storage
from rhtc.broker.wire.config import BrokerConfig


@pytest.mark.heavy  # starts its own broker on a unix socket
def test_unix_socket_broker_and_wrong_password(tmp_path):
    with EmbeddedBroker(unix_socket=True) as b:
        s = Storage(b.config)
        assert b.config.url.startswith("unix://") and s.ping()
        bad = BrokerConfig(url=b.config.url.replace(b.password, "wrong"), key=b.key, namespace="x")
        with pytest.raises(PermissionError, match="password"):
            Storage(bad).ping()
        s.close()
