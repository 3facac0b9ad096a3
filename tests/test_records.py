"""One malformed record never breaks a reader (issue 29, item 3). Anyone with the Redis
password alone can write a heartbeat with ``task: ["x"]``, a map entry whose ``n`` is not
a number, a feed entry, a keeper state or a problem line that rhtc never wrote: a running
map, ``rhtc status``, the dashboard's ``/api/state`` and ``/metrics`` skip it and name it
(key and field). Real broker, real workers, the real ``rhtc status`` command."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rhtc.broker import feed
from rhtc.broker.wire.messages import WorkerStatus
from rhtc.broker.wire.records import MalformedRecord
from rhtc.broker.storage import Storage
from rhtc.client import remote_map
from rhtc.client.ops.dashstate import DashState
from rhtc.client.ops.status import credential_lines, disk_tiers, misfits, render_status

GHOST = "ghost-1"


def slow_square(x):
    import time
    time.sleep(0.2)
    return x * x


def _password_only(config) -> redis.Redis:
    """What an attacker holds: the URL with the password, not the signing key."""
    return redis.Redis.from_url(config.url)


def _plant_heartbeat(config, storage: Storage, body) -> str:
    r = _password_only(config)
    r.sadd(storage.keys.workers, GHOST)
    r.set(storage.keys.incarnation(GHOST), "0" * 16, ex=600)     # alive, as far as the reaper can tell
    key = storage.keys.heartbeat(GHOST)
    r.set(key, body if isinstance(body, (bytes, str)) else json.dumps(body), ex=600)
    r.close()
    return key


def _get(url: str, token: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_a_malformed_heartbeat_is_skipped_by_a_running_map_the_status_and_the_dashboard(broker, workers, storage):
    pytest.importorskip("tornado")
    pytest.importorskip("prometheus_client")
    from rhtc.client.ops.dashboard import Dashboard
    workers.start(2)
    key = _plant_heartbeat(broker.config, storage, {"name": GHOST, "host": "h", "task": ["x"]})

    assert remote_map(slow_square, range(6), broker=broker.config, progress=False) == [x * x for x in range(6)]

    text = render_status(storage)
    assert f"{key}: field 'task' is [\"x\"], not a [map id, task index] pair" in text, text
    assert "2 live workers" in text, text

    env = dict(os.environ, **broker.config.env())
    done = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "status"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert key in done.stdout and "field 'task'" in done.stdout, done.stdout

    with Dashboard(broker.config) as d:
        base = d.url.split("?")[0]
        status, body = _get(base + "api/state", d.token)
        assert status == 200, body
        snap = json.loads(body)
        assert any(key in line and "'task'" in line for line in snap["malformed"]), snap["malformed"]
        assert len(snap["workers"]) == 2
        status, body = _get(base + "metrics", d.token)
        assert status == 200, body
        from prometheus_client.parser import text_string_to_metric_families
        live = {s.labels["state"]: s.value for fam in text_string_to_metric_families(body)
                for s in fam.samples if s.name == "rhtc_workers"}
        assert live["busy"] + live["idle"] + live["stalled"] == 2, live


def test_every_kind_of_record_malformed_is_named_and_skipped(broker, storage):
    """The registry, the feed, a keeper's state and log, the problem log: each written
    wrong with the password alone; the readers name each and go on."""
    r = _password_only(broker.config)
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


HEARTBEATS = [
    (b"not json", None), (b"[1, 2]", None), ({"task": ["x"]}, "task"), ({"task": "m:x"}, "task"),
    ({"pid": "1"}, "pid"), ({"t": None}, "t"), ({"metrics": {"cpu": "hot"}}, "metrics['cpu']"),
    ({"metrics": {"name": 1}}, "metrics"), ({"versions": {"numpy": 2}}, "versions['numpy']"),
    ({"credential": {"x509": {"expires": "soon"}}}, "expires"), ({"name": ["w"]}, "name"),
]


@pytest.mark.parametrize("body,field", HEARTBEATS)
def test_a_malformed_heartbeat_names_its_key_and_field(body, field):
    raw = body if isinstance(body, bytes) else json.dumps({"name": "w1", **body})
    with pytest.raises(MalformedRecord) as got:
        WorkerStatus.decode(raw, "ns:hb:w1")
    assert got.value.key == "ns:hb:w1" and got.value.field == field
    assert str(got.value).startswith("malformed record ns:hb:w1: ") and "delete the key" in str(got.value)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)
FIELDS = st.sampled_from(["name", "host", "pid", "task", "t", "task_seconds", "tasks_done", "metrics", "versions",
                          "credential", "disk_tier", "disk_bytes", "disk_limit", "leaving", "cache_bytes"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.dictionaries(FIELDS, JSON, max_size=6))
def test_whatever_a_heartbeat_holds_it_decodes_whole_or_is_named_malformed(fields):
    """A heartbeat either decodes into a status every reader can use, or raises
    MalformedRecord: never another exception, in decode or in the readers after it."""
    try:
        s = WorkerStatus.decode(json.dumps(dict({"name": "w1", "host": "h", "pid": 1}, **fields)), "ns:hb:w1")
    except MalformedRecord:
        return
    d = s.to_dict()
    assert isinstance(d["name"], str) and d["state"] in ("busy", "idle")
    misfits([s], b"k" * 32, {"numpy": "1.0"})
    disk_tiers([s])
    credential_lines([s], now=0.0)
    f"{d.get('cpu', 0) or 0:>5.0f} {d.get('task') or '-':<22} {d['tasks_done']:>6}"    # rhtc status' row


def test_a_malformed_result_stub_is_dropped_not_raised(storage):
    from rhtc.broker.wire import blobs
    frames = storage.maps.resolve("0123456789abcdef", [b"RB", b"RB\x01short"], 1 << 20)
    assert frames == []
