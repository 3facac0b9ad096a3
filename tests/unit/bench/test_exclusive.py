"""bench/exclusive.py: one machine-wide bench at a time (an abstract socket name as the
lock, real threads here): a second holder waits for the first and says so once; the
processes a holder starts pass through; the lock is free again when the holder's block ends,
even by an exception."""
from __future__ import annotations

import os
import secrets
import threading

import pytest

from rhtc.bench import exclusive
from rhtc.bench.exclusive import one_at_a_time
from tests.helpers import wait_until


@pytest.fixture
def name():
    return f"rhtc-test-{secrets.token_hex(4)}"


def test_a_second_bench_waits_for_the_first_and_says_so_once(name, monkeypatch):
    monkeypatch.setattr(exclusive, "POLL", 0.01)
    said, order = [], []
    first_in, release = threading.Event(), threading.Event()

    def first():
        with one_at_a_time(name, say=said.append):
            order.append("first in")
            first_in.set()
            release.wait(30)
            order.append("first out")

    t = threading.Thread(target=first, daemon=True)
    t.start()
    assert first_in.wait(30)
    monkeypatch.delenv(exclusive.HELD, raising=False)   # (as in another process: it has not got the lock)
    second = threading.Thread(target=lambda: _hold(name, said, order), daemon=True)
    second.start()
    wait_until(lambda: said, 30, "the second bench saying it waits")
    assert order == ["first in"], "the second bench went in while the first held the machine"
    release.set()
    t.join(30), second.join(30)
    assert order == ["first in", "first out", "second in"]
    assert len(said) == 1 and name in said[0] and "waiting" in said[0]


def _hold(name, said, order):
    with one_at_a_time(name, say=said.append):
        order.append("second in")


def test_the_lock_is_free_after_an_exception_and_children_pass_through(name):
    with pytest.raises(RuntimeError):
        with one_at_a_time(name, say=pytest.fail):
            assert os.environ[exclusive.HELD] == name          # what the holder's children inherit
            with one_at_a_time(name, say=pytest.fail):         # (such a child: it does not wait)
                pass
            raise RuntimeError("the bench failed")
    assert exclusive.HELD not in os.environ
    with one_at_a_time(name, say=pytest.fail):                  # free again at once
        pass
