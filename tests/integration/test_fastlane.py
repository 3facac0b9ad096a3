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
