"""The client's side of the merge on the workers (client/engine/merged.py): a map that
reduces sends a :class:`MergePlan` (``reduce=True`` folds with ``+``, a function folds with
itself), one that does not, or whose ``merge`` option is off, sends its function as is; and
a stalled map takes its pool's partials only when they cover all it waits for but its tail.
``drain_stalled`` is given the map queue's ``drain_pool`` as a recorder: what the broker then
moves is tests/integration/test_merge_script.py's; on real workers,
tests/scenarios/test_workers_merge_each_others_partials.py."""
from __future__ import annotations

import operator
import time
from types import SimpleNamespace

import pytest

from rhtc.broker.wire.merge import MergePlan
from rhtc.client.engine import merged
from rhtc.client.engine.merged import STALLED_SECONDS, drain_stalled, function_to_send
from rhtc.client.engine.options import MapOptions


def test_a_map_that_reduces_sends_a_merge_plan():
    plan = function_to_send(abs, True, MapOptions(), tasks=16, seconds=lambda: 2.0, fanin=4)
    assert isinstance(plan, MergePlan)
    assert (plan.fn, plan.reduce, plan.tasks, plan.seconds, plan.fanin) == (abs, None, 16, 2.0, 4)
    assert plan.fold(2, 3) == 5                                       # True: folded with +
    own = function_to_send(abs, operator.mul, MapOptions(), tasks=16, seconds=lambda: 2.0)
    assert own.reduce is operator.mul and own.fold(2, 3) == 6 and own.fanin == 1


@pytest.mark.parametrize("reduce, options", [(None, MapOptions()), (False, MapOptions()),
                                             (True, MapOptions(merge=False)), (operator.add, MapOptions(merge=False))])
def test_a_map_that_does_not_merge_sends_its_function(reduce, options):
    asked = []
    assert function_to_send(abs, reduce, options, 16, lambda: asked.append(1) or 2.0) is abs
    assert asked == []                                                # the interval is not even read


class Pool:
    """The map queue's ``drain_pool``, recorded: moves ``at_least`` if the pool holds that many."""

    def __init__(self, holds: int):
        self.holds, self.asked = holds, []
        self.maps = SimpleNamespace(drain_pool=self.drain_pool)

    def drain_pool(self, map_id, at_least):
        self.asked.append((map_id, at_least))
        return at_least if self.holds >= at_least else 0


STALLED = time.time() - STALLED_SECONDS - 1


def test_a_map_that_progresses_or_waits_for_nothing_takes_nothing():
    pool = Pool(100)
    assert drain_stalled(pool, "m", 50, 100, time.time()) == 0
    assert drain_stalled(pool, "m", 0, 100, STALLED) == 0
    assert pool.asked == []


@pytest.mark.parametrize("waiting, n, held, at_least", [
    (80, 80, 0, 76),          # the tail: 5 % of 80 = 4 tasks
    (80, 80, 6, 70),          # partials its workers hold are not in the pool
    (10, 20, 0, 8),           # the tail: at least 2 tasks
    (3, 1000, 0, 1),          # never less than 1
    (2000, 2000, 0, 1900),
])
def test_a_stalled_map_asks_for_all_it_waits_for_but_its_tail(waiting, n, held, at_least):
    pool = Pool(10_000)
    assert drain_stalled(pool, "m", waiting, n, STALLED, held=held) == at_least
    assert pool.asked == [("m", at_least)]


def test_a_pool_that_covers_less_gives_nothing():
    assert drain_stalled(Pool(10), "m", 80, 80, STALLED) == 0


def test_the_stall_is_measured_from_the_last_progress():
    pool = Pool(100)
    assert drain_stalled(pool, "m", 80, 80, time.time() - STALLED_SECONDS + 1) == 0
    assert merged.TAIL * 80 == 4.0 and drain_stalled(pool, "m", 80, 80, STALLED) == 76
