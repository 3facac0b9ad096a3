"""The local cluster (client/local.py) refuses what cannot work before it starts anything: a
number of workers that is not a whole number above 0, and a setting out of its range.

Starting one for real: tests/scenarios/test_local_default_outlives_its_thread.py and
tests/scenarios/test_ctrl_c_cancel_and_refused_calls.py."""
from __future__ import annotations

import psutil
import pytest

from rhtc.broker.wire.settings import SettingRefused
from rhtc.client import LocalCluster
from tests.kits.settings import environment  # noqa: F401  (a fixture)


@pytest.mark.timeout(90)     # a refused call that was not refused would wait forever
@pytest.mark.parametrize("n, error", [(-1, ValueError), (0, ValueError), (2.5, TypeError), ("4", TypeError)])
def test_local_cluster_bad_n_workers_refused(n, error):
    with pytest.raises(error, match="n_workers must"):
        LocalCluster(n_workers=n)


def test_a_local_cluster_refuses_before_it_starts_a_broker_or_a_worker(environment, monkeypatch):
    """Before: ``LocalCluster()`` (and ``remote_map`` without a broker, which starts the
    session's one) started a redis-server and workers, and only then met the refusal."""
    from rhtc import remote_map
    from rhtc.client import local
    from rhtc.client.local import LocalCluster
    # as in a fresh session: no local cluster yet (an earlier test in this process may have
    # started the session's one, which read its settings then, and remote_map would use it)
    monkeypatch.setattr(local, "_default", None)
    monkeypatch.setattr(local, "_active", [])
    environment("RHTC_MAP_TTL", "1e20")
    ours = psutil.Process()
    before = {p.pid for p in ours.children(recursive=True)}
    try:
        with pytest.raises(SettingRefused, match=r"\$RHTC_MAP_TTL='1e20'"):
            LocalCluster(n_workers=1)
        with pytest.raises(SettingRefused, match=r"\$RHTC_MAP_TTL='1e20'"):
            remote_map(abs, [1], progress=False, timeout=60)
    finally:
        started = [p for p in ours.children(recursive=True) if p.pid not in before]
        for p in started:                  # (what the code before the fix left running)
            p.terminate()
        for p in psutil.wait_procs(started, timeout=5)[1]:
            p.kill()
    assert not started, [p.pid for p in started]
