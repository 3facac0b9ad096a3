"""A big argument leaves the fast lane as it is (broker/fastlane.py: pack_command): the
bytes on the wire are redis-py's, byte for byte. No Redis: the connection never connects.
(That the broker stores what was sent: tests/integration/test_fastlane.py.)"""
from __future__ import annotations

import redis
from hypothesis import given, settings, strategies as st

from rhtc.broker.fastlane import BIG_ARG, pack_command
from tests.helpers import examples

_ARG = st.one_of(st.integers(-2 ** 63, 2 ** 63 - 1), st.text(max_size=20), st.binary(max_size=40),
                 st.integers(BIG_ARG - 2, BIG_ARG + 2).map(lambda n: b"\r\n$" * (n // 3) + b"x" * (n % 3)))


@settings(max_examples=examples(100), derandomize=True, deadline=None)
@given(st.lists(_ARG, min_size=1, max_size=6))
def test_the_wire_is_redis_pys_whatever_the_arguments(args):
    conn = redis.Redis(port=1).connection_pool.make_connection()        # (never connects)
    assert b"".join(pack_command(conn, "SET", *args)) == b"".join(conn.pack_command("SET", *args))
