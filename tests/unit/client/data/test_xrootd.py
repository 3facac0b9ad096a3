"""XRootD URLs as documented (client/data/xrootd.py), before any request: a URL with one
slash after the host is refused, saying to use two and showing the URL that would work,
whether it reaches ``make_chunks`` or a chunk made by hand. No server, no process: with a
real server, tests/scenarios/test_xrootd_errors_and_timeouts.py."""
from __future__ import annotations

import pytest

from rhtc.client import make_chunks
from rhtc.client.data.chunks import Chunk, ChunkFileError
from tests.pools.common import free_port

REAL = "nano_dy.root"


def test_a_one_slash_url_is_refused_before_any_request():
    port = free_port()                      # nothing listens there: a request would be "unreachable"
    url = f"root://127.0.0.1:{port}/store/{REAL}"
    with pytest.raises(ChunkFileError) as info:
        make_chunks(url)
    assert info.value.reason == "bad URL", str(info.value)
    assert "use two slashes after the host" in str(info.value)
    assert f"root://127.0.0.1:{port}//store/{REAL}" in str(info.value)
    with pytest.raises(ChunkFileError) as info:                       # a Chunk made by hand
        Chunk(url, "Events", 0, 10, "uuid").arrays(["Muon_pt"])
    assert info.value.reason == "bad URL" and "two slashes" in str(info.value)
