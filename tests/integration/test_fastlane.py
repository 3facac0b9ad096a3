"""A big argument leaves the fast lane as it is (broker/fastlane.py): a value set through
the fast lane, small or several times ``BIG_ARG``, comes back from a real redis-server
whole. (The bytes on the wire, without Redis: tests/unit/broker/test_fastlane.py.)"""
from __future__ import annotations

import pytest
import redis

from rhtc.broker.fastlane import BIG_ARG, FastLane


def test_a_big_value_set_through_the_fast_lane_comes_back_whole(storage):
    lane = FastLane(storage.r)
    values = {f"fastlane-test:{n}": bytes(range(256)) * (n // 256) + b"\r\n" for n in (BIG_ARG, 3 * BIG_ARG, 100)}
    try:
        for key, value in values.items():
            lane.send("SET", key, value, "EX", 60, flush=False)
        lane.send("PING")
        assert len(lane.collect_all()) == len(values) + 1        # (an error reply would raise)
        for key, value in values.items():
            assert storage.r.get(key) == value
    finally:
        storage.r.delete(*values)
        lane.reset()


def test_a_reply_sent_to_a_handler_reaches_it_and_nothing_else(storage, caplog):
    """``send(on_reply=...)``: the reply goes to the handler when it is read (with the next
    command's), never to the caller of that command; an error reply is dropped; a handler
    that raises is logged, and the command that read its reply gets its own reply whole."""
    lane, got = FastLane(storage.r), []
    try:
        lane.send("ECHO", "for the handler", on_reply=got.append)
        storage.r.set("fastlane-test:not-a-number", "x", ex=60)
        lane.send("INCR", "fastlane-test:not-a-number", on_reply=got.append)     # (an error reply)
        assert got == []
        lane.send("ECHO", "mine")
        assert lane.collect_all() == [b"mine"] and got == [b"for the handler"]
        lane.send("ECHO", "again", on_reply=lambda reply: 1 / 0)
        assert lane.call("ECHO", "whole") == b"whole"
        assert "a reply's handler failed" in caplog.text
    finally:
        storage.r.delete("fastlane-test:not-a-number")
        lane.reset()


def test_settle_reads_the_handlers_replies_but_leaves_a_callers_to_it(storage):
    """``settle()`` gives the handlers their replies when nothing else is owed; a reply (or an
    error) that a caller's collect() must see stays owed, with the handlers' before it."""
    lane, got = FastLane(storage.r), []
    try:
        lane.send("ECHO", "one", on_reply=got.append)
        lane.send("SET", "fastlane-test:settle", "x", "EX", 60, quiet=True)
        lane.settle()
        assert got == [b"one"] and lane.pending == 0
        lane.send("ECHO", "two", on_reply=got.append)
        lane.send("ECHO", "the caller's")                     # owed to whoever collects next
        lane.settle()
        assert got == [b"one"] and lane.pending == 2
        assert lane.collect_all() == [b"the caller's"] and got == [b"one", b"two"]
    finally:
        storage.r.delete("fastlane-test:settle")
        lane.reset()


def test_a_connection_closed_under_the_lane_with_replies_owed_fails_the_next_command_at_once(storage):
    """The client's map ends with its end's reply owed (read with the next command's); the
    broker restarts and the connection pool is disconnected. redis-py writes the next
    command on a new socket, so the lane read that command's reply as the lost one's and
    waited out the socket timeout (30 s) for another: the next map after a restart took 31 s
    (tests/scenarios/test_maps_on_real_workers.py). Now the next command raises
    ``ConnectionError`` (what :meth:`FastLane.retrying` sends again on), the lost reply's
    handler is never called, and the command after it has its own reply."""
    r = redis.Redis(connection_pool=redis.ConnectionPool(**storage.r.connection_pool.connection_kwargs
                                                          | {"socket_timeout": 3}))
    lane, got = FastLane(r), []
    try:
        lane.send("ECHO", "owed to a handler", on_reply=got.append)
        lane.send("ECHO", "owed, dropped", quiet=True)
        r.connection_pool.disconnect()           # (a timeout here, redis.TimeoutError, was the bug)
        with pytest.raises(redis.ConnectionError, match="closed with 2 replies owed"):
            lane.call_behind("ECHO", "next")
        assert lane.call_behind("ECHO", "mine") == b"mine" and got == []
        assert lane.retrying(lambda: lane.call_behind("ECHO", "again"), 5, "echo", "here") == b"again"
    finally:
        lane.reset()
        r.close()
