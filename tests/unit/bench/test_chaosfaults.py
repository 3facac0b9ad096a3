"""The plan of faults of ``bench chaos`` (bench/chaosfaults.py): the seed's alone, every kind
of fault first, all of it inside the first half of the map's progress, so that the chaos
map (tests/scenarios/test_exactly_once_under_chaos.py) always outlasts it."""
from __future__ import annotations

import pytest

from rhtc.bench.chaos import FAULT_KINDS
from rhtc.bench.chaosfaults import FIRST_AT, LAST_AT, MIN_TASKS, plan_faults
from tests.kits.chaosplan import LEASE, SEED_MERGED, SEED_PLAIN, TASKS


def test_a_seed_plans_every_kind_of_fault_inside_the_first_half_of_the_map():
    """The plan is the seed's alone, names every kind first, and fires within the map's
    progress, so that a map always outlasts it (its last task waits at the gate)."""
    for seed in (SEED_PLAIN, SEED_MERGED, 0, 7, 123456):
        plan = plan_faults(seed, TASKS)
        assert plan == plan_faults(seed, TASKS), "the same seed plans the same faults"
        assert sorted(f.kind for f in plan[:len(FAULT_KINDS)]) == sorted(FAULT_KINDS), plan
        assert [f.at for f in plan] == sorted(f.at for f in plan)
        assert all(FIRST_AT * TASKS <= f.at <= LAST_AT * TASKS for f in plan), plan
        assert all(f.gap >= 0.3 and f.seconds <= 0.25 * LEASE for f in plan if f.kind != "latency"), plan
    with pytest.raises(ValueError, match=f"{MIN_TASKS} tasks or more, not 50"):
        plan_faults(1, 50)
