"""Ctrl-C inside a step that must not be cut in half (client/engine/interrupts.py): a first
SIGINT inside :func:`held_interrupt` lets the step finish and is raised as
``KeyboardInterrupt`` after it; a second one is raised at once (a step that hangs); an error
of the step with a Ctrl-C pending becomes the KeyboardInterrupt (from it); Python's own
handler is back afterwards, whatever happened; and a handler of someone else's (a notebook's)
or a thread other than the main one is left alone. Real SIGINTs sent to this process. Ctrl-C
during a real map's submission and cancel: tests/scenarios/test_ctrl_c_cancel_and_refused_calls.py."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from rhtc.client.engine.interrupts import held_interrupt

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signals reach the main thread only")


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_a_ctrl_c_in_the_step_is_raised_after_it_ends():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with held_interrupt():
            ctrl_c()
            done.append("the rest of the step")
    assert done == ["the rest of the step"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_is_raised_at_once():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with held_interrupt():
            ctrl_c()
            ctrl_c()
            done.append("never")
    assert done == [] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_of_the_step_with_a_ctrl_c_pending_becomes_the_interrupt():
    with pytest.raises(KeyboardInterrupt) as caught:
        with held_interrupt():
            ctrl_c()
            raise ConnectionError("the broker went away")
    assert isinstance(caught.value.__cause__, ConnectionError)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_step_without_ctrl_c_runs_as_is_and_its_error_is_its_own():
    with held_interrupt():
        pass
    with pytest.raises(ConnectionError):
        with held_interrupt():
            raise ConnectionError("the broker went away")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_someone_elses_handler_is_left_alone():
    seen = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with held_interrupt():
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            ctrl_c()
        assert seen == [signal.SIGINT]                  # theirs ran, at once; nothing raised
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_another_thread_runs_the_step_as_is():
    handlers = []

    def step():
        with held_interrupt():
            handlers.append(signal.getsignal(signal.SIGINT))
    t = threading.Thread(target=step)
    t.start()
    t.join()
    assert handlers == [signal.default_int_handler]
