"""How a worker waits for a broker that refuses or is away (worker/backoff.py): pauses that
double up to the cap and start again once the broker answers; what it waits for, said once
per reason (memory, a refusal, the connection) and not again while the reason stays the
same; and that the broker answers again, said only after a wait was. The pauses are recorded,
not slept (``time.sleep`` of the module is replaced for that)."""
from __future__ import annotations

import logging

import pytest
import redis

from rhtc.broker.errors import BrokerOutOfMemory, BrokerRefused, BrokerUnavailable
from rhtc.worker import backoff as backoff_module
from rhtc.worker.backoff import Backoff

URL = "redis://broker:6379"


@pytest.fixture
def slept(monkeypatch) -> list[float]:
    pauses: list[float] = []
    monkeypatch.setattr(backoff_module.time, "sleep", pauses.append)
    return pauses


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rhtc.worker"]


def test_the_pauses_double_up_to_the_cap_and_start_again_once_it_answers(slept):
    b = Backoff("worker w1", cap=1.0)
    for _ in range(6):
        b.wait(redis.ConnectionError("refused"), URL)
    assert slept == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.ok()
    b.wait(redis.ConnectionError("refused"), URL)
    assert slept[-1] == 0.1


@pytest.mark.parametrize("err, what", [
    (BrokerOutOfMemory("OOM command not allowed"), "memory in the broker"),
    (BrokerRefused("NOPERM no permission"), "the broker to accept our commands (ResponseError: NOPERM"),
    (BrokerUnavailable("LOADING"), f"the broker at {URL} (BrokerUnavailable: LOADING"),
    (redis.ConnectionError("Connection refused"), f"the broker at {URL} (ConnectionError: Connection refused"),
])
def test_it_says_what_it_waits_for(err, what, slept, caplog):
    with caplog.at_level(logging.WARNING, logger="rhtc.worker"):
        Backoff("worker w1").wait(err, URL)
    [line] = _said(caplog)
    assert line.startswith(f"worker w1: waiting for {what}") and line.endswith("retrying in 0.1 s")


def test_one_reason_is_said_once_and_a_new_one_at_once(slept, caplog):
    b = Backoff("worker w1")
    with caplog.at_level(logging.WARNING, logger="rhtc.worker"):
        for _ in range(5):
            b.wait(BrokerOutOfMemory("OOM"), URL)
        b.wait(redis.ConnectionError("gone"), URL)
        b.wait(redis.ConnectionError("gone"), URL)
    said = _said(caplog)
    assert len(said) == 2 and "memory" in said[0] and "ConnectionError: gone" in said[1]


def test_the_broker_answering_again_is_said_only_after_a_wait(slept, caplog):
    b = Backoff("worker w1")
    with caplog.at_level(logging.WARNING, logger="rhtc.worker"):
        b.ok()
        assert _said(caplog) == []
        b.wait(BrokerOutOfMemory("OOM"), URL)
        b.ok()
        b.ok()
    assert _said(caplog)[1:] == ["worker w1: the broker answers again"]
    with caplog.at_level(logging.WARNING, logger="rhtc.worker"):
        b.wait(BrokerOutOfMemory("OOM"), URL)              # the same reason, after ok(): said again
    assert len(_said(caplog)) == 3


def test_say_uses_the_delay_it_is_given(caplog):
    with caplog.at_level(logging.WARNING, logger="rhtc.worker"):
        Backoff("worker w1").say(BrokerOutOfMemory("OOM"), URL, 2.5)
    assert _said(caplog)[0].endswith("retrying in 2.5 s")
