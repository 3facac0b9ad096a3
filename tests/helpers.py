"""What many test modules need and none owns: waiting for a condition, the small task
functions that tests send to workers, and sending a test module's functions by value.

Waiting. A test that starts a process waits for what that process does. It polls a
predicate, never sleeps a fixed time. It says what it was waiting for when the wait times out:

* :func:`wait_until` polls until the predicate returns something true and returns that value.
  At the timeout it raises AssertionError naming ``what``, the timeout and the last value seen.
  Use it unless the test must check something else before the waited-for condition.
* :func:`poll_until` polls in the same way but returns the last value even when it is false.
  It only bounds a wait against a hang. The caller asserts, with its own message and in its
  own order (a security test first asserts that nothing ran, then that the refusal was reported).

Task functions. :func:`square`, :func:`double`, :func:`identity`, :func:`nap`,
:func:`pid_after` and :func:`big_result` are defined here once. Modules that need another
function (one that raises a given message, notes its runs in a file) still define their own.

By value. A function pickled by reference makes the worker import its module. For a test
module, that brings ``tests.conftest``, pytest and the client's engine into the worker
(tests/scenarios/test_a_worker_loads_only_what_it_runs.py checks that a worker loads no engine). A worker started outside
the checkout (``LocalCluster``, the pools, an installed wheel) cannot import ``tests`` at all.
So this module registers itself with :func:`cloudpickle.register_pickle_by_value`. A test
module whose own functions or classes must reach workers by value says so with one line:
``register_by_value(__name__)``. A module that only sends the functions defined here needs
no such line. The ``tests`` package as a whole is not registered. The functions of the other
test modules still travel by reference, to the workers of the ``workers`` fixture, which run
in the checkout and can import ``tests``.

Examples. A property test says how many examples it runs with :func:`examples`: all of them
in ``make test``, a fifth (at least 20) in ``make test-quick`` (which sets
``RHTC_TEST_TIER=quick``), so the fast tier stays fast and the full suite keeps its strength.

The ``on_a_worker`` fixture (this process as a worker's task process) lives in
tests/conftest.py with the other fixtures.

Example::

    from tests.helpers import register_by_value, square, wait_until

    register_by_value(__name__)          # this module's own task functions travel by value

    def test_it(broker, workers, storage):
        workers.start(2)
        assert remote_map(square, [2, 3], broker=broker) == [4, 9]
        wait_until(lambda: not map_keys(storage), 10, "the map's keys to go")
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, TypeVar

import cloudpickle

T = TypeVar("T")

#: seconds between two looks, unless a caller has a reason for another pace
INTERVAL = 0.05


# -- waiting ----------------------------------------------------------------------------------
def poll_until(predicate: Callable[[], T], timeout: float, interval: float = INTERVAL) -> T:
    """Call ``predicate`` every ``interval`` s until it returns something true, or until
    ``timeout`` s have passed. Return its last value, which is false after a timeout.
    The predicate is always called at least once, and once more after the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def wait_until(predicate: Callable[[], T], timeout: float, what: str | Callable[[], str] = "the condition",
               interval: float = INTERVAL) -> T:
    """Call ``predicate`` every ``interval`` s until it returns something true, and return
    that value. If ``timeout`` s pass first, raise AssertionError naming ``what``, the
    timeout and the predicate's last value (unless that was None or False). ``what`` may be
    a callable: it is called only on failure, so its message shows the state at that time.

    >>> wait_until(lambda: [1], 1, "a list")
    [1]
    >>> wait_until(lambda: 0, 0.01, "the count to rise")
    Traceback (most recent call last):
    ...
    AssertionError: the count to rise: not within 0.01 s (last: 0)
    """
    value = poll_until(predicate, timeout, interval)
    if value:
        return value
    said = what() if callable(what) else what
    seen = "" if value is None or value is False else f" (last: {_short(value)})"
    raise AssertionError(f"{said}: not within {timeout:g} s{seen}")


def _short(value: object, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# -- by value ---------------------------------------------------------------------------------
#: ``make test-quick`` sets it: property tests run a fifth of their examples there
QUICK_TIER = os.environ.get("RHTC_TEST_TIER") == "quick"


def examples(n: int) -> int:
    """The examples a property test of ``n`` runs in this tier: ``n`` in ``make test``, a
    fifth of them (at least 20) in ``make test-quick``."""
    return max(20, n // 5) if QUICK_TIER else n


def register_by_value(module_name: str) -> None:
    """Pickle the functions and classes of the (imported) module ``module_name`` by value,
    so that workers never import it (see the module's docstring)."""
    cloudpickle.register_pickle_by_value(sys.modules[module_name])


register_by_value(__name__)


# -- task functions ---------------------------------------------------------------------------
def square(x):
    return x * x


def double(x):
    return 2 * x


def identity(x):
    return x


def nap(seconds: float) -> float:
    """Sleep ``seconds``, then return them."""
    time.sleep(seconds)
    return seconds


def pid_after(seconds: float) -> int:
    """Sleep ``seconds``, then return the pid of the process that ran the task."""
    time.sleep(seconds)
    return os.getpid()


def big_result(n: int) -> bytes:
    """``n`` random bytes: a result that does not compress."""
    return os.urandom(n)
