"""One malformed record never breaks a reader: a heartbeat written with the Redis password
alone (``task: ["x"]``, which rhtc never writes) is skipped and named (key and field) by a
running map, ``rhtc status`` (the real command), the dashboard's ``/api/state`` and
``/metrics``. Real broker, real workers, the real ``rhtc status`` command. (The other
records: tests/integration/test_malformed_records.py; a heartbeat decoded alone:
tests/unit/broker/wire/test_records.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from rhtc.broker.storage import Storage
from rhtc.client import remote_map
from rhtc.client.ops.status import render_status
from tests.kits.record import password_only

GHOST = "ghost-1"


def slow_square(x):
    import time
    time.sleep(0.2)
    return x * x


def _plant_heartbeat(config, storage: Storage, body) -> str:
    r = password_only(config)
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
