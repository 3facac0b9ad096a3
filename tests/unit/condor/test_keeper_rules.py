"""The pool keeper's decisions (condor/keeper_rules.py), pure: the size a pool wants, which
jobs count, which to shrink, when failures in a row stop it, and what a job seen between two
looks was. The keeper against a real broker: tests/integration/test_keeper_state_in_the_broker.py
and tests/scenarios/test_keeper_knows_a_worker_served.py; on the real pools:
tests/scenarios/test_pool_keeper.py."""
from __future__ import annotations

import pytest

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
    """A job held after its worker served, though no look of the keeper fell while it ran,
    is replaced at once and never counted toward --max-failures; a job whose worker never
    reached the broker is a failed start."""
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
