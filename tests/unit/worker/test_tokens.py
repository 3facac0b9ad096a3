"""Which maps a worker may run tasks of (worker/tokens.py), on signed frames and tokens
alone: a live token lets a task run; an expired one, a forged one, another map's, one of
another nonce (a replayed frame) or the map's signed end refuses it, each for its own
reason; a live token written back after the worker saw the map's end is a replay; and each
kind of refusal is reported once per map, the end never (a cancel's leftovers look the same).
Real frames, signed with the session key (broker/wire/protocol.py); no broker: the tokens
are what the take returns."""
from __future__ import annotations

import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.broker.wire import protocol
from rhtc.broker.wire.messages import FaultKind
from rhtc.worker.tokens import MapTokens, Refusal
from tests.helpers import examples

KEY = b"k" * 32
MAP, OTHER = "0123456789abcdef", "fedcba9876543210"
NONCE, OLD_NONCE = "a" * 16, "b" * 16


def task(map_id: str = MAP, nonce: str = NONCE, index: int = 0) -> protocol.Task:
    return protocol.unpack_task(KEY, protocol.pack_task(KEY, map_id, index, nonce, "f" * 32, index))


def token(until_ms: int, map_id: str = MAP, nonce: str = NONCE, ended: bool = False, key: bytes = KEY) -> bytes:
    return protocol.pack_map_token(key, map_id, nonce, until_ms, ended=ended)


def test_a_live_token_of_the_map_and_its_nonce_lets_the_task_run():
    tokens = MapTokens(KEY, "w1")
    assert tokens.judge(task(), token(2_000), now_ms=1_000) is None
    assert tokens.judge(task(index=5), token(2_000), now_ms=2_000) is None     # valid up to its last ms


def test_no_token_means_the_map_is_gone_and_nothing_is_said():
    assert MapTokens(KEY, "w1").judge(task(), b"", now_ms=1_000) == Refusal(None)


def test_an_expired_token_refuses_and_says_by_how_much_by_the_brokers_clock():
    refusal = MapTokens(KEY, "w1").judge(task(), token(2_000), now_ms=4_500)
    assert refusal.kind is FaultKind.EXPIRED and refusal.report
    assert "expired" in refusal.message and "2.5 s ago" in refusal.message and "nothing was run" in refusal.message


def test_a_token_signed_with_another_key_is_a_forgery():
    refusal = MapTokens(KEY, "w1").judge(task(), token(9_000, key=b"x" * 32), now_ms=1_000)
    assert refusal.kind is FaultKind.BAD_FRAME and "not genuine" in refusal.message


def test_another_maps_token_moved_under_this_map_is_refused():
    refusal = MapTokens(KEY, "w1").judge(task(), token(9_000, map_id=OTHER), now_ms=1_000)
    assert refusal.kind is FaultKind.BAD_FRAME and f"is map {OTHER}'s" in refusal.message


def test_a_frame_of_an_earlier_map_with_the_same_id_is_a_replay():
    refusal = MapTokens(KEY, "w1").judge(task(nonce=OLD_NONCE), token(9_000), now_ms=1_000)
    assert refusal.kind is FaultKind.REPLAYED and OLD_NONCE in refusal.message


def test_the_signed_end_refuses_quietly_and_is_logged_once_per_map(caplog):
    tokens = MapTokens(KEY, "w1")
    end = token(9_000, ended=True)
    with caplog.at_level(logging.INFO, logger="rhtc.worker"):
        first = tokens.judge(task(index=0), end, now_ms=1_000)
        again = tokens.judge(task(index=1), end, now_ms=1_000)
    assert first.kind is again.kind is FaultKind.EXPIRED
    assert not first.report and not again.report              # a cancel's leftovers look the same
    assert sum("ended" in r.getMessage() for r in caplog.records) == 1


def test_a_live_token_written_back_after_the_end_is_a_replay():
    tokens = MapTokens(KEY, "w1")
    live = token(9_000)                                         # copied while the map ran
    assert tokens.judge(task(), live, now_ms=1_000) is None
    tokens.judge(task(), token(9_000, ended=True), now_ms=2_000)
    refusal = tokens.judge(task(index=3), live, now_ms=3_000)   # still valid by its time
    assert refusal.kind is FaultKind.REPLAYED and refusal.report and "after the map ended" in refusal.message


def test_the_end_of_one_map_leaves_another_map_running():
    tokens = MapTokens(KEY, "w1")
    tokens.judge(task(), token(9_000, ended=True), now_ms=1_000)
    assert tokens.judge(task(OTHER), token(9_000, map_id=OTHER), now_ms=1_000) is None


def test_each_kind_of_refusal_is_reported_once_per_map():
    tokens = MapTokens(KEY, "w1")
    reports = [tokens.judge(task(index=i), token(1_000), now_ms=5_000).report for i in range(3)]
    assert reports == [True, False, False]
    assert tokens.judge(task(nonce=OLD_NONCE), token(9_000), now_ms=1_000).report      # another kind
    assert tokens.judge(task(OTHER), token(1_000, map_id=OTHER), now_ms=5_000).report  # another map


KINDS = st.sampled_from(["live", "expired", "ended", "forged", "moved", "old-nonce", "none"])


@settings(settings.get_profile("default"), max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.sampled_from([MAP, OTHER]), KINDS), max_size=40))
def test_a_task_runs_only_under_a_live_token_of_its_map_never_after_its_end(steps):
    """Whatever tokens come, in any order: a task runs only under a genuine, unexpired token of
    its own map and nonce, never once the worker saw that map's end; a refusal is reported at
    most once per map and kind; the end and a gone map are never reported."""
    tokens, ended, reported = MapTokens(KEY, "w1"), set(), set()
    for i, (map_id, kind) in enumerate(steps):
        other = OTHER if map_id == MAP else MAP
        frame = {"live": token(9_000, map_id), "expired": token(500, map_id), "ended": token(9_000, map_id, ended=True),
                 "forged": token(9_000, map_id, key=b"x" * 32), "moved": token(9_000, other),
                 "old-nonce": token(9_000, map_id, nonce=OLD_NONCE), "none": b""}[kind]
        refusal = tokens.judge(task(map_id, index=i), frame, now_ms=1_000)
        if kind == "ended":
            ended.add(map_id)
        runs = kind == "live" and map_id not in ended
        assert (refusal is None) == runs, (kind, refusal)
        if refusal is not None and refusal.report:
            assert kind not in ("ended", "none") and (map_id, refusal.kind) not in reported
            reported.add((map_id, refusal.kind))
