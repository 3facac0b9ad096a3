"""What a worker owes the broker (worker/outbox.py), against a model of the lease role that
records every command: the frames go in with the next take and the box is empty after it;
more than one command may carry goes ahead in groups that fit, in order, each frame once;
the lease ids it reports held are every task a frame covers; and a big result the broker
keeps refusing while it answers becomes a ``ResultTooLarge`` error after REFUSALS refusals
in a row, never when the broker is full, restarting or away (results wait then).
The frames are real signed results (broker/wire/protocol.py); the broker is the model: the
real lease role is tests/integration/test_big_results_waiting.py's."""
from __future__ import annotations

import os

import pytest
import redis

from rhtc.broker.errors import BrokerOutOfMemory, BrokerRefused, BrokerUnavailable
from rhtc.broker.leases import BulkLimits
from rhtc.broker.wire import protocol
from rhtc.broker.wire.messages import ErrorKind, ResultMeta, TaskError, decode_result, encode_result
from rhtc.worker.outbox import Outbox
from rhtc.worker.results import ALWAYS_FITS, REFUSALS

KEY = b"k" * 32
MAP = "0123456789abcdef"


def result(index: int, nbytes: int = 10) -> tuple[str, bytes, bytes]:
    """A signed result of ``nbytes`` random bytes (random: LZ4 cannot shrink it)."""
    payload = encode_result(protocol.dumps(os.urandom(nbytes)), ResultMeta("w1", "h", 1, 0.0, 1.0))
    return MAP, protocol.TaskRef(MAP, index).task_id, protocol.pack_result(KEY, MAP, index, protocol.OK, payload)


class LeaseModel:
    """The lease role's commands as the outbox uses them, each call recorded."""

    def __init__(self, query_buffer: int = 1 << 30):
        self.limits = BulkLimits(query_buffer=query_buffer, known=True)
        self.calls: list[tuple[str, int, list]] = []

    def take_watching(self, name, incarnation, n, results, watch=()):
        self.calls.append(("take_watching", n, list(results)))
        return True, 0, [], set(watch)

    def take(self, name, incarnation, n, results):
        self.calls.append(("take", n, list(results)))
        return True, 0, []

    def bulk_limits(self):
        return self.limits


class StorageModel:
    def __init__(self, query_buffer: int = 1 << 30, answers: bool | Exception = True):
        self.lease, self.answers = LeaseModel(query_buffer), answers

    def ping(self) -> bool:
        if isinstance(self.answers, Exception):
            raise self.answers
        return self.answers


def outbox(storage=None) -> Outbox:
    return Outbox(storage or StorageModel(), "w1", "inc", KEY)


def test_the_frames_go_in_with_the_next_take_in_one_round_trip():
    box = outbox()
    box.frames += [result(0), result(1)]
    assert box
    assert box.take(4, watch=[MAP]) == (True, 0, [], {MAP})
    assert [(c[0], c[1], [tid for _, tid, _ in c[2]]) for c in box.storage.lease.calls] == \
        [("take_watching", 4, [protocol.TaskRef(MAP, 0).task_id, protocol.TaskRef(MAP, 1).task_id])]
    assert not box and box.frames == []


def test_flush_hands_in_without_leasing_and_an_empty_box_calls_nobody():
    box = outbox()
    box.flush()
    assert box.storage.lease.calls == []
    box.frames.append(result(0))
    box.flush()
    assert [(c[0], c[1], len(c[2])) for c in box.storage.lease.calls] == [("take_watching", 0, 1)]


def test_what_waits_here_is_held_task_by_task_a_partials_every_task():
    box = outbox()
    ids = [protocol.TaskRef(MAP, i).task_id for i in range(3)]
    box.frames += [(MAP, ids[0], b"frame"), (MAP, ids[1] + ids[2], b"partial")]
    assert box.held() == ids


def test_more_than_one_command_carries_goes_ahead_in_groups_that_fit():
    budget = 3 * ALWAYS_FITS // 4                      # a query buffer of 1.5 results' worth
    storage = StorageModel(query_buffer=2 * budget)
    box = outbox(storage)
    frames = [result(i, ALWAYS_FITS // 4) for i in range(7)]
    box.frames += frames
    box.take(2)
    calls = storage.lease.calls
    assert [c[0] for c in calls[:-1]] == ["take"] * (len(calls) - 1) and calls[-1][0] == "take_watching"
    assert all(c[1] == 0 for c in calls[:-1]) and calls[-1][1] == 2     # tasks leased by the last one only
    handed = [frame for c in calls for frame in c[2]]
    assert handed == frames                                              # each once, in order
    assert all(sum(len(f) for _, _, f in c[2]) <= budget for c in calls if len(c[2]) > 1)
    assert len(calls) > 2


def test_small_results_go_in_one_command():
    storage = StorageModel(query_buffer=1000)          # never read while the frames are small
    box = outbox(storage)
    box.frames += [result(i) for i in range(5)]
    box.take(1)
    assert [c[0] for c in storage.lease.calls] == ["take_watching"]


def _error_of(frame: bytes) -> tuple[int, TaskError]:
    _, _, status, payload = protocol.unpack_result(KEY, frame)
    return status, TaskError.from_wire(protocol.loads(bytes(decode_result(payload)[1])))


def test_a_big_result_refused_again_and_again_while_the_broker_answers_becomes_an_error():
    box = outbox()
    big, small = result(0, ALWAYS_FITS + 1024), result(1)
    box.frames += [big, small]
    for _ in range(REFUSALS - 1):
        box.refused(BrokerRefused("ERR Protocol error: invalid bulk length"))
        assert box.frames == [big, small]
    box.refused(BrokerRefused("ERR Protocol error: invalid bulk length"))
    assert box.frames[1] == small and box.frames[0][:2] == big[:2]
    status, error = _error_of(box.frames[0][2])
    assert status == protocol.USER_ERROR and error.type == ErrorKind.RESULT_TOO_LARGE
    assert "refused" in error.message and "invalid bulk length" in error.message


@pytest.mark.parametrize("err", [BrokerOutOfMemory("OOM command not allowed"),
                                 BrokerUnavailable("LOADING Redis is loading")])
def test_a_full_or_restarting_broker_never_turns_a_result_into_an_error(err):
    box = outbox()
    big = result(0, ALWAYS_FITS + 1024)
    box.frames.append(big)
    for _ in range(3 * REFUSALS):
        box.refused(err)
    assert box.frames == [big]


@pytest.mark.parametrize("answers", [False, redis.ConnectionError("gone")])
def test_a_broker_that_does_not_answer_keeps_the_result(answers):
    box = outbox(StorageModel(answers=answers))
    big = result(0, ALWAYS_FITS + 1024)
    box.frames.append(big)
    for _ in range(3 * REFUSALS):
        box.refused(BrokerRefused("ERR Protocol error"))
    assert box.frames == [big]


def test_the_refusals_must_come_in_a_row():
    box = outbox()
    big = result(0, ALWAYS_FITS + 1024)
    box.frames.append(big)
    for _ in range(3):
        for _ in range(REFUSALS - 1):
            box.refused(BrokerRefused("ERR Protocol error"))
        box.refused(BrokerOutOfMemory("OOM"))           # memory in between: the count starts again
    assert box.frames == [big]


def test_small_results_refused_are_never_changed():
    box = outbox()
    frames = [result(0), result(1)]
    box.frames += frames
    for _ in range(3 * REFUSALS):
        box.refused(BrokerRefused("ERR whatever"))
    assert box.frames == frames
