"""The merger's bookkeeping without a broker (the tree of partials, issue 32): whatever
partials a worker is given to fold in (its own tasks among them, overlapping each other,
signed with another key, of another map), its partial covers each task at most once, its
value counts each covered task once, and what it hands up names exactly the leases it
stands for: its own tasks and the partials it folded in."""
from __future__ import annotations

from collections import Counter

from hypothesis import given, settings, strategies as st

from rhtc.broker.wire import protocol
from rhtc.broker.wire.merge import MergePlan, decode_partial, is_partial_id, partial_id
from rhtc.broker.wire.messages import ResultMeta, decode_result
from rhtc.worker.merge import Partials

KEY, OTHER_KEY = b"k" * 32, b"o" * 32
MAP, OTHER_MAP = "0123456789abcdef", "fedcba9876543210"
PLAN = MergePlan(lambda i: Counter({i: 1}), None, 10_000, 3600.0, fanin=4)
META = ResultMeta(worker="w", host="h", pid=1, start=1.0, stop=2.0)


def partial_frame(indices: list[int], key: bytes = KEY, map_id: str = MAP) -> bytes:
    """The frame another worker hands up for ``indices`` (one task: a plain result)."""
    p = Partials(key, room=10_000)
    for i in indices:
        assert p.fold(PLAN, protocol.TaskRef(map_id, i), Counter({i: 1}), META)
    ((_, _, frame),) = p.flush()
    return frame


indices = st.lists(st.integers(0, 40), min_size=1, max_size=8, unique=True)
inputs = st.lists(st.tuples(indices, st.sampled_from(["ok", "ok", "ok", "other key", "other map"])), max_size=6)


@settings(max_examples=150, deadline=None)
@given(own=indices, given_=inputs)
def test_a_merger_counts_each_task_once_and_names_what_it_stands_for(own, given_):
    p = Partials(KEY, room=10_000)
    for i in own:
        p.fold(PLAN, protocol.TaskRef(MAP, i), Counter({i: 1}), META)
    pairs, expect_folded, expect_aside, expect_dropped, covered = [], [], [], [], set(own)
    for seq, (idx, kind) in enumerate(given_):
        pid = partial_id(MAP, seq)
        key, map_id = (OTHER_KEY, MAP) if kind == "other key" else (KEY, OTHER_MAP if kind == "other map" else MAP)
        pairs.append((pid, partial_frame(idx, key, map_id)))
        if kind != "ok":
            expect_dropped.append(pid)
        elif covered & set(idx):
            expect_aside.append(pid)
        else:
            expect_folded.append(pid)
            covered |= set(idx)
    aside, dropped = p.absorb(MAP, pairs, read=lambda item: item)
    assert (aside, dropped) == (expect_aside, expect_dropped)
    part = p.open[MAP]
    assert sorted(part.indices) == sorted(covered) and len(part.indices) == len(set(part.indices))
    assert part.value == Counter({i: 1 for i in covered})
    assert part.tids == [protocol.TaskRef(MAP, i).task_id for i in own] + expect_folded
    assert all(is_partial_id(t) for t in part.folded) and not any(is_partial_id(t) for t in part.tids[:len(own)])
    ids, frame = p.pack_up(MAP)
    assert ids == b"".join(part.tids)
    map_id, first, status, payload = protocol.unpack_result(KEY, frame)
    if status == protocol.MERGED:
        got, metas, packed = decode_partial(payload)
    else:
        packed, got = decode_result(payload)[1], [first]
    assert map_id == MAP and got == part.indices and protocol.loads(packed) == part.value


def test_a_task_sent_again_while_folded_in_from_another_goes_with_the_partial():
    p = Partials(KEY, room=100)
    p.fold(PLAN, protocol.TaskRef(MAP, 0), Counter({0: 1}), META)
    pid = partial_id(MAP, 1)
    assert p.absorb(MAP, [(pid, partial_frame([5, 6]))], read=lambda item: item) == ([], [])
    again = protocol.TaskRef(MAP, 6)
    assert p.holds(again) and p.holds(again)          # not run again; its new lease goes along (once)
    assert p.open[MAP].tids == [protocol.TaskRef(MAP, 0).task_id, pid, again.task_id]


def test_a_partial_whose_blob_is_gone_is_dropped_not_folded():
    p = Partials(KEY, room=100)
    p.fold(PLAN, protocol.TaskRef(MAP, 0), Counter({0: 1}), META)
    assert p.absorb(MAP, [(partial_id(MAP, 1), b"stub")], read=lambda item: None) == ([], [partial_id(MAP, 1)])
    assert p.open[MAP].value == Counter({0: 1})
