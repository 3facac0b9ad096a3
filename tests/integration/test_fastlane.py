"""A big argument leaves the fast lane as it is (broker/fastlane.py): a value set through
the fast lane, small or several times ``BIG_ARG``, comes back from a real redis-server
whole. (The bytes on the wire, without Redis: tests/unit/broker/test_fastlane.py.)"""
from __future__ import annotations

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
