"""The pool keeper's state in a real broker (condor/keeper.py, broker/pool.py): a second keeper
of the same pool is refused, naming the first, and the dashboard's line reads the keeper's
size and its last replacement. No batch system, no worker. Its decisions alone:
tests/unit/condor/test_keeper_rules.py."""
from __future__ import annotations

import pytest

from rhtc.condor.keeper import PoolFailing, PoolKeeper
from rhtc.condor.keeper_rules import KeeperPlan


def test_a_second_keeper_of_the_same_pool_is_refused(broker, tmp_path):
    from rhtc.broker.storage import Storage
    s = Storage(broker.config)
    try:
        s.pool.publish_keeper("dup", {"pid": 4242, "host": "login1"}, ttl=30)
        cfg = broker.config.write(tmp_path / "broker.json")
        keeper = PoolKeeper(KeeperPlan(1, 1), pool_id="dup", config_file=cfg, python="/usr/bin/python3",
                            log_dir=tmp_path)
        with pytest.raises(PoolFailing, match="already kept by pid 4242 on login1"):
            keeper.run()
        assert [k["pool"] for k in s.pool.keepers()] == ["dup"], "the running keeper's state is left alone"
    finally:
        s.close()


def test_the_dashboard_shows_the_keepers_size_and_last_replacement(broker):
    from rhtc.broker.storage import Storage
    from rhtc.client.ops.dashstate import DashState
    s = Storage(broker.config)
    try:
        assert DashState(s).snapshot()["pool"]["keeper"] is None
        s.pool.publish_keeper("p7", {"wanted": 3, "serving": 2}, ttl=30)
        s.pool.keeper_event("p7", {"what": "replaced", "job": "12.1", "why": "held: memory exceeded"})
        line = DashState(s).snapshot()["pool"]["keeper"]
        assert line == "p7 wants 3, 2 serving; last replaced 12.1: held: memory exceeded", line
    finally:
        s.close()
