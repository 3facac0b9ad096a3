"""The embedded broker (broker/embedded.py) refuses, before it starts a redis-server, to
listen on a public interface unless asked to (``allow_remote``)."""
from __future__ import annotations

import pytest

from rhtc.broker.embedded import EmbeddedBroker


def test_embedded_broker_refuses_public_interface():
    with pytest.raises(ValueError, match="allow_remote"):
        EmbeddedBroker(host="0.0.0.0")
