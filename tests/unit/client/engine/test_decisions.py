"""Upkeep decides, the map applies: the decisions (client/engine/decisions.py: which
stragglers get a backup copy, which tasks are lost from the broker) are plain functions of
plain data, tested here without Redis. (The routing, the other such function:
tests/unit/client/engine/test_routing.py; a map's containers checked to agree after every
map the tests run: tests/scenarios/test_every_map_checks_its_containers.py.)"""
from __future__ import annotations

from rhtc.client.engine.decisions import Slow, lost_tasks, straggler_backups


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
