"""One malformed record never breaks a reader: the broker's records, on a real redis-server.
Anyone with the Redis password alone can write a map entry whose ``n`` is not a number, a
feed entry, a keeper state or a problem line that rhtc never wrote, or a result stub that
is no stub: ``rhtc status``'s text, the dashboard's state and ``/metrics`` skip each and
name it (key and field), and a fetch drops the stub. Real redis-server, no workers.
(A malformed heartbeat decoded alone: tests/unit/broker/wire/test_records.py; with a
running map, ``rhtc status`` and the dashboard: tests/scenarios/test_a_malformed_heartbeat_breaks_no_reader.py.)"""
from __future__ import annotations

import json

import pytest

from rhtc.broker import feed
from rhtc.broker.storage import Storage
from rhtc.client.ops.dashstate import DashState
from rhtc.client.ops.status import render_status
from tests.kits.record import password_only


def test_every_kind_of_record_malformed_is_named_and_skipped(broker, storage):
    """The registry, the feed, a keeper's state and log, the problem log: each written
    wrong with the password alone; the readers name each and go on."""
    r = password_only(broker.config)
    keys = storage.keys
    # a map entry whose task count is not a number
    r.zadd(keys.maps, {"badmap0000000000": 1e12})
    r.hset(keys.map("badmap0000000000"), mapping={"n": "many", "label": "x", "started": "1"})
    # feed entries: not JSON; a note whose task count is text (the page would write it raw)
    r.xadd(keys.feed, {feed.FIELD: b"{not json"})
    r.xadd(keys.feed, {feed.FIELD: json.dumps({"map": {"map_id": "m1", "n": "<img src=x>"}, "tasks": []})})
    r.xadd(keys.feed, {feed.FIELD: json.dumps({"map": {"map_id": "m2"}, "tasks": [[1, "w", 0.0]]})})
    feed.publish(storage, {"map_id": "goodmap000000000", "n": 2, "done": 2, "started": 1.0, "ended": 2.0},
                 [[0, "w1", 1.0, 2.0, 0, 10, None, 0]])
    # a keeper whose jobs are not counts, and one well-formed
    storage.pool.publish_keeper("good", {"wanted": 2, "serving": 2, "jobs": {"running": 2}}, ttl=60)
    r.zadd(keys.keepers, {"evil": 1.0})
    r.hset(keys.keeper("evil"), mapping={"pool": json.dumps("evil"), "jobs": json.dumps("lots")})
    r.lpush(keys.keeper_log("good"), b"\xff\xfe")
    # the problem log: a line whose time is text
    storage.report("a real problem")
    r.lpush(keys.log, json.dumps({"t": "soon", "message": "x"}))
    r.close()

    text = render_status(storage)
    wanted = [f"{keys.map('badmap0000000000')}: field 'n' is 'many'", f"{keys.keeper('evil')}: field 'jobs'",
              f"{keys.keeper_log('good')}[0]: is not JSON", f"{keys.log}[0]: field 't' is \"soon\""]
    for line in wanted:
        assert line in text, f"{line!r} not in:\n{text}"
    assert "pool good" in text and "a real problem" in text, text

    snap = DashState(Storage(broker.config)).snapshot()
    named = "\n".join(snap["malformed"])
    for line in wanted[:2] + [f"{keys.feed} entry", "field 'n' is \"<img src=x>\"", "field 'tasks[0]'"]:
        assert line in named, f"{line!r} not in:\n{named}"
    assert [m["map_id"] for m in snap["maps"]] == ["goodmap000000000"], snap["maps"]
    assert snap["problems"][0]["message"] == "a real problem"
    pytest.importorskip("prometheus_client")
    from rhtc.client.ops.dashmetrics import render
    assert b"rhtc_maps_in_flight" in render(DashState(Storage(broker.config)))


def test_a_malformed_result_stub_is_dropped_not_raised(storage):
    frames = storage.maps.resolve("0123456789abcdef", [b"RB", b"RB\x01short"], 1 << 20)
    assert frames == []
