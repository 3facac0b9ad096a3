"""tests/helpers.py itself: a wait that times out fails, naming what it waited for, and the
examples in its docstrings run. (Its task functions reaching a process that cannot import
``tests``: tests/scenarios/test_task_functions_travel_by_value.py.)"""
from __future__ import annotations

import doctest
import time

import pytest

from tests import helpers
from tests.helpers import poll_until, wait_until


def test_wait_until_returns_the_first_true_value():
    values = iter([0, None, [], "ready", "later"])
    assert wait_until(lambda: next(values), 5, "a value", interval=0.001) == "ready"


def test_wait_until_fails_naming_what_the_timeout_and_the_last_value():
    t = time.monotonic()
    with pytest.raises(AssertionError) as info:
        wait_until(lambda: [], 0.2, "the queue to fill", interval=0.01)
    assert time.monotonic() - t >= 0.2
    assert str(info.value) == "the queue to fill: not within 0.2 s (last: [])"


def test_a_callable_what_is_read_when_the_wait_fails():
    state = {"n": 0}

    def look():
        state["n"] += 1
        return False
    with pytest.raises(AssertionError, match=r"^after \d+ looks: not within 0.05 s$") as info:
        wait_until(look, 0.05, lambda: f"after {state['n']} looks", interval=0.01)
    assert str(state["n"]) in str(info.value) and state["n"] >= 2


def test_poll_until_returns_the_last_value_without_raising():
    looks = []
    assert poll_until(lambda: looks.append(time.monotonic()) or 0, 0.05, interval=0.01) == 0
    assert len(looks) >= 2 and looks[-1] - looks[0] >= 0.05     # looked once more after the deadline


def test_the_examples_in_the_helpers_run():
    failed, attempted = doctest.testmod(helpers, optionflags=doctest.ELLIPSIS)
    assert attempted and not failed
