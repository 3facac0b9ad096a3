"""One schema per message, end to end: the node figures a worker samples (``node_cpu``,
every 5 heartbeats) reach the run record of a real map, as the floats that
broker/wire/messages.py's ``WORKER_METRICS`` names. Real redis-server, a real worker
process. (The schemas themselves, without Redis: tests/unit/broker/wire/test_messages.py.)"""
from __future__ import annotations


def test_node_cpu_reaches_the_run_record_of_a_real_map(broker, workers):
    from rhtc import last_map, remote_map
    workers.start(1)
    remote_map(_burn, [2.0] * 4, broker=broker.config, progress=False)   # node figures: every 5 heartbeats
    metrics = last_map().record().metrics
    assert metrics, "the map sampled no worker metrics"
    assert all(isinstance(m.node_cpu, float) for m in metrics)
    assert any(m.node_cpu > 0 for m in metrics), [m.node_cpu for m in metrics]


def _burn(seconds):
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return seconds
