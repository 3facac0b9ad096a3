"""Upkeep decides, the map applies (issue 17): the decisions and the routing are plain
functions of plain data (tested here without Redis), and a map's containers are checked
to agree after every map the tests run (client/engine/invariants.py)."""
from __future__ import annotations

import pytest

from rhtc.client.engine.decisions import Slow, lost_tasks, straggler_backups
from rhtc.client.engine.invariants import InvariantBroken, check
from rhtc.client.engine.routing import contiguous_blocks, owners
from rhtc.client.engine.tasks import TaskState
from tests.helpers import square


def _backups(**kw):
    args = dict(unfinished=1, n=100, idle=2, durations=[1.0, 1.0, 1.0], factor=3.0,
                running=[(5, 10.0), (6, 2.0), (7, 11.0), (8, 12.0)], backed_up=set())
    args.update(kw)
    return straggler_backups(**args)


def test_stragglers_are_backed_up_in_the_tail_only():
    assert _backups() == Slow((5, 7), why="straggler over 3.0 s")
    assert _backups(unfinished=10) is None                      # not the tail: 10 of 100 left
    assert _backups(idle=0) is None                             # nobody free to run a copy
    assert _backups(backed_up={5}).indices == (7, 8)            # one copy per task
    assert _backups(durations=[]) is None                       # nothing to compare with
    assert _backups(durations=[4.0], running=[(5, 11.0), (6, 13.0)]).indices == (6,)  # small map: the longest


def test_a_task_is_requeued_when_missing_from_the_broker_twice():
    lost, seen = lost_tasks(waiting={1, 2, 3}, in_broker={1, 2, 3}, missing_before=set())
    assert (lost, seen) == ([], set())
    lost, seen = lost_tasks(waiting={1, 2, 3}, in_broker={1}, missing_before=set())
    assert (lost, seen) == ([], {2, 3})                         # once: maybe in flight
    lost, seen = lost_tasks(waiting={1, 2, 3}, in_broker={1, 3}, missing_before=seen)
    assert (lost, seen) == ([2], set())


class Chunk:
    def __init__(self, key):
        self.routing_key = key


def test_routing_without_a_broker():
    args = [Chunk(f"f:{i}") for i in range(6)]
    located = ({"f:1": "b", "f:4": "gone"}, ["a", "b"])
    owner, home = owners(args, list(range(6)), locate=lambda keys: located, avoid=set())
    assert home == {1} and owner[1] == "b" and "gone" not in owner.values()
    owner, _ = owners(args, list(range(6)), locate=lambda keys: located, avoid={"b"})
    assert "b" not in owner.values()
    assert contiguous_blocks([0, 1, 2, 3], ["a", "b"]) == {0: "a", 1: "a", 2: "b", 3: "b"}


def test_every_map_checks_its_containers_and_a_disagreement_is_named(broker, workers):
    from rhtc import last_map, remote_map
    from rhtc.broker.wire.config import settings
    assert settings().check_invariants, "tests/conftest.py turns the check on for every map"
    workers.start(1)
    assert remote_map(square, range(6), broker=broker.config, progress=False) == [x * x for x in range(6)]
    run = last_map().run
    assert check(run.state) == []
    run.tasks._state[3] = int(TaskState.QUEUED)      # as if a bug had sent a finished task back
    with pytest.raises(InvariantBroken, match="task 3 is queued but has 1 ledger rows") as info:
        run.validate()
    assert "counts 6 done tasks but holds 5" in str(info.value)
    run.tasks._state[3] = int(TaskState.DONE)
    run.state.outbox.append(object())                  # a result delivered twice
    with pytest.raises(InvariantBroken, match="6 task.s. finished but 7 result"):
        run.validate()
