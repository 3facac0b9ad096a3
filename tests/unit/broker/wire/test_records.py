"""One malformed record never breaks a reader. Anyone with the Redis password alone can
write a heartbeat with ``task: ["x"]`` or any other JSON that rhtc never wrote: decoding it
either gives a status every reader can use or raises :class:`MalformedRecord`, naming
its key and field, and never another exception (broker/wire/records.py, the schema that
``WorkerStatus.decode`` checks). No Redis. (The other records, on a real broker:
tests/integration/test_malformed_records.py; a running map, ``rhtc status`` and the
dashboard with a malformed heartbeat: tests/scenarios/test_a_malformed_heartbeat_breaks_no_reader.py.)"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rhtc.broker.wire.messages import WorkerStatus
from rhtc.broker.wire.records import MalformedRecord
from rhtc.client.ops.status import credential_lines, disk_tiers, misfits
from tests.helpers import examples

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


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
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
