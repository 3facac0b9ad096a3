"""The pool keeper's decisions (condor/keeper_rules.py) and its guard against a second keeper
of the same pool; the keeper on the real pools is in tests/test_pool_keeper.py."""
from __future__ import annotations

import pytest

import signal
import time

from rhtc.condor.batch import job_of_worker
from rhtc.condor.keeper import PoolFailing, PoolKeeper
from rhtc.condor.keeper_rules import (KeeperPlan, Tracked, Verdict, active, fix_for, mark_served, replace_ahead,
                                      shrink_victims, systematic, verdict, wanted_size)


def test_a_fixed_pool_wants_its_size_and_an_adaptive_one_follows_the_work():
    assert wanted_size(KeeperPlan(5, 5), busy=0, pending=100) == 5
    plan = KeeperPlan(2, 8)
    assert [wanted_size(plan, b, p) for b, p in [(0, 0), (1, 3), (8, 50)]] == [2, 4, 8]
    with pytest.raises(ValueError, match="MIN <= MAX"):
        KeeperPlan(5, 3)


def test_a_worker_due_to_drain_soon_no_longer_counts_so_its_replacement_starts_ahead():
    now = 1000.0
    ahead = replace_ahead(KeeperPlan(2, 2, interval=1), [10.0, 12.0, 14.0])       # twice the longest start
    jobs = {"1.0": Tracked("1.0", 0, served=1, leaves_at=now + ahead - 1),
            "1.1": Tracked("1.1", 0, served=1, leaves_at=now + 3600),
            "1.2": Tracked("1.2", 0, served=1, leaving="lifetime"),
            "1.3": Tracked("1.3", 0, ending="held: memory")}
    assert [t.id for t in active(jobs, now, ahead)] == ["1.1"]


def test_shrinking_never_removes_a_busy_worker_and_takes_the_smallest_caches_first():
    busy = Tracked("1.0", 0, served=1, idle_since=0.0, cache_bytes=0)
    big = Tracked("1.1", 0, served=1, idle_since=100.0, cache_bytes=10 ** 9)
    small = Tracked("1.2", 0, served=1, idle_since=100.0, cache_bytes=10)
    recent = Tracked("1.3", 0, served=1, idle_since=990.0, cache_bytes=0)
    assert [t.id for t in shrink_victims([busy, big, small, recent], 3, now=1000.0, shrink_after=300)] == ["1.2", "1.1"]


def test_failures_in_a_row_make_one_message_with_the_cause_and_the_fix():
    assert systematic(["held: memory exceeded"] * 2, 3) is None
    message = systematic(["cannot unpack x.tar.gz into /s"] * 3, 3)
    assert "3 in a row" in message and "cannot unpack" in message and "rhtc pack --rebuild" in message
    assert "rhtc broker --host 0.0.0.0" in fix_for("worker w: waiting for the broker at redis://h:6379 (...)")


def test_a_job_whose_worker_served_between_two_looks_is_replaced_as_no_start_up_failure():
    """Issue 29: a job held after its worker served, though no look of the keeper fell
    while it ran, is replaced at once and never counted toward --max-failures; a job whose
    worker never reached the broker is a failed start."""
    plan = KeeperPlan(1, 1, interval=5, max_failures=3)
    failures = []
    for k in range(3):                                    # three such holds in a row
        t = Tracked(f"7.{k}", submitted=100.0)
        assert mark_served(t, 103.0), "the broker's record of its worker's claim, read after it left"
        v = verdict(t, "held", "via condor_hold (by user rhtc)", 1, 104.0, 105.0, plan)
        assert (v.action, v.failure) == ("replace", False), v
        failures += [v.why] if v.failure else []
    assert systematic(failures, plan.max_failures) is None
    never = verdict(Tracked("8.0", submitted=100.0), "held", "memory exceeded", 1, 104.0, 105.0, plan)
    assert (never.action, never.why, never.failure) == ("replace", "held: memory exceeded", True)
    stuck = verdict(Tracked("8.1", submitted=0.0), "running", "", 1, 10.0, 10.0 + plan.startup_limit + 1, plan)
    assert stuck.failure and "never reached the broker" in stuck.why


def test_a_job_vacated_and_running_again_between_two_looks_is_an_eviction():
    """condor_vacate_job of a running job: under load its worker hands back and the job
    runs again on a node before the keeper's next look, which sees it running with one
    start more. That is an eviction (noted, not a replacement); a look that sees it idle
    is one too; a job that runs on with its starts unchanged is left alone."""
    plan = KeeperPlan(1, 1, interval=5)
    seen = Tracked("9.0", submitted=100.0, starts=1, state="running")
    assert verdict(seen, "running", "", 2, 104.0, 105.0, plan) == Verdict("evicted", "")
    assert verdict(seen, "idle", "", 1, 104.0, 105.0, plan) == Verdict("evicted", "")
    assert verdict(seen, "running", "", 1, 104.0, 105.0, plan) is None


def test_the_broker_remembers_a_worker_that_served_and_left(broker, workers):
    """Whether a job served comes from the broker: a worker named as a batch job's, that
    ran a task and left (its heartbeat gone), is still in the broker's record of claims."""
    from rhtc.broker.storage import Storage
    from rhtc.client import remote_map
    t0 = time.time()
    name = workers.start(names=["condor-4242.0@node1"])[0]
    assert remote_map(abs, [-3], broker=broker, progress=False) == [3]
    workers.signal(name, signal.SIGTERM)                  # as condor_hold does: it retires and exits 0
    assert workers.procs[name].wait(30) == 0
    s = Storage(broker.config)
    try:
        assert name not in {w.name for w in s.pool.worker_statuses(queue_depths=False)}, "its heartbeat is gone"
        joined = s.pool.workers_joined()
        assert name in joined and t0 - 1 <= joined[name] <= time.time() + 1, joined
        assert job_of_worker(name) == "4242.0"
        assert s.pool.workers_joined(since=time.time() + 60) == {}, "a later look reads only newer claims"
        assert s.r.ttl(s.keys.joined) > 0, "the record expires"
    finally:
        s.close()
    t = Tracked("4242.0", submitted=t0)
    assert mark_served(t, joined[name])
    assert verdict(t, "held", "via condor_hold", 1, time.time(), time.time(), KeeperPlan(1, 1)).failure is False


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
