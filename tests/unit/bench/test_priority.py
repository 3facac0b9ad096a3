"""bench/priority.py: the bench in a cpu control group of its own (cgroup v1), on this
machine's real cgroup filesystem: made with its shares, this process moved in and back, the
task halves' child group, and nothing left behind, by the bench or by one that was killed.
Where the controller is not writable (not root), the bench says why and changes nothing."""
from __future__ import annotations

import os

import pytest

from rhtc.bench import priority
from rhtc.bench.priority import Share

writable = os.access(f"{priority.ROOT}/cgroup.procs", os.W_OK)
needs_cgroups = pytest.mark.skipif(not writable, reason=f"{priority.ROOT} is not writable here (not root?)")


def _group_of_self() -> str:
    return priority._own_group() or "/"


@needs_cgroups
def test_the_bench_runs_in_its_own_group_and_leaves_nothing():
    home = _group_of_self()
    with Share() as share:
        assert share.active and share.why_not is None
        assert _group_of_self() == f"/{priority.PREFIX}{os.getpid()}"
        assert open(f"{share.path}/cpu.shares").read().strip() == str(priority.BENCH_SHARES)
        assert open(f"{share.tasks}/cpu.shares").read().strip() == str(priority.TASKS_SHARES)
        assert os.environ[priority.TASKS_GROUP_ENV] == share.tasks     # for the light processes it starts
        path = share.path
    assert _group_of_self() == home and not os.path.exists(path)
    assert priority.TASKS_GROUP_ENV not in os.environ


@needs_cgroups
def test_a_task_half_joins_the_task_group():
    home = _group_of_self()
    with Share() as share:
        try:
            assert priority.join_tasks_group()
            assert _group_of_self() == f"/{priority.PREFIX}{os.getpid()}/halves"
        finally:
            priority._write(f"{share.path}/cgroup.procs", os.getpid())   # (this process is the bench here)
    assert _group_of_self() == home
    assert not priority.join_tasks_group(), "outside a bench there is no task group to join"


@needs_cgroups
def test_the_group_of_a_killed_bench_is_removed_by_the_next():
    dead = 2 ** 22 + 1                                  # (above pid_max's default: no such process)
    path = Share.path_of(dead)
    os.makedirs(f"{path}/halves")
    try:
        assert path in priority.sweep()
        assert not os.path.exists(path)
    finally:
        priority._remove(path)


def test_without_the_controller_the_bench_says_why_and_changes_nothing(monkeypatch):
    home = _group_of_self()
    monkeypatch.setattr(priority, "ROOT", "/nonexistent/cgroup/cpu")
    with Share() as share:
        assert not share.active and "not writable" in share.why_not and share.tasks is None
        assert priority.TASKS_GROUP_ENV not in os.environ
    with Share(enabled=False) as share:
        assert not share.active and "--cpu-group none" in share.why_not
    assert _group_of_self() == home
