"""Routing chunks to workers (client/engine/routing.py), a plain function of plain data,
without Redis: a chunk goes home to the worker that holds it (never to a gone or avoided
one), and the chunks nobody holds yet are placed in contiguous blocks that carry about the
same number of events per worker, so a warm rerun, which goes back where the cold run put
each chunk, keeps every worker equally busy."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from rhtc.client.engine.routing import contiguous_blocks, owners
from tests.helpers import examples


@settings(max_examples=examples(300), derandomize=True, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10_000), min_size=2, max_size=200),
       st.integers(min_value=1, max_value=8))
def test_blocks_are_contiguous_and_balanced_by_events(weights, n):
    workers = [f"w{k}" for k in range(n)]
    indices = list(range(len(weights)))
    got = contiguous_blocks(indices, workers, weights)
    if len(indices) < 2 * n:
        assert got == {}
        return
    order = [workers.index(got[i]) for i in indices]
    assert order == sorted(order), "a worker's chunks are not one contiguous block"
    share = [sum(w for i, w in enumerate(weights) if got[i] == name) for name in workers]
    fair = sum(weights) / n
    assert all(abs(s - fair) <= max(weights) for s in share), (share, fair)


def test_chunks_of_uneven_sizes_split_by_events_not_by_count():
    class Chunk:
        def __init__(self, key, n):
            self.routing_key, self.num_entries = key, n
    # the first half of the chunks holds 90 % of the events
    args = [Chunk(f"f:{k}", 900 if k < 4 else 100) for k in range(8)]
    owner, home = owners(args, list(range(8)), locate=lambda keys: ({}, ["a", "b"]), avoid=set())
    events = {w: sum(a.num_entries for i, a in enumerate(args) if owner[i] == w) for w in "ab"}
    assert home == set() and max(events.values()) <= 2400, events      # by count: 3600 against 400


def test_a_worker_given_more_files_is_given_fewer_events():
    """Opening a file costs a cold worker as much as ~50,000 events (FILE_OPEN_EVENTS): nine
    files of one chunk each, two of them three times as big, no longer split 6 files to 3
    with equal events (the idle worker waited ~0.5 s of every cold AGC run)."""
    from rhtc.client.engine.routing import FILE_OPEN_EVENTS

    class Chunk:
        def __init__(self, key, n):
            self.routing_key, self.num_entries = key, n
    sizes = [30_000, 30_000] + [10_000] * 7
    args = [Chunk(f"u{k}:Events:0-{n}", n) for k, n in enumerate(sizes)]
    owner, _ = owners(args, list(range(len(args))), locate=lambda keys: ({}, ["a", "b"]), avoid=set())
    cost = {w: sum(a.num_entries + FILE_OPEN_EVENTS for i, a in enumerate(args) if owner[i] == w) for w in "ab"}
    files = {w: sum(1 for i in owner if owner[i] == w) for w in "ab"}
    assert max(cost.values()) - min(cost.values()) <= 30_000 + FILE_OPEN_EVENTS, (cost, files)
    assert sorted(files.values()) == [4, 5], files       # by events alone: 3 files against 6


class Chunk:
    def __init__(self, key):
        self.routing_key = key


def test_routing_without_a_broker():
    args = [Chunk(f"f:{i}") for i in range(6)]
    located = ({"f:1": "b", "f:4": "gone"}, ["a", "b"])
    owner, home = owners(args, list(range(6)), locate=lambda keys: located, avoid=set())
    assert home == {1} and owner[1] == "b" and "gone" not in owner.values()
    owner, _ = owners(args, list(range(6)), locate=lambda keys: located, avoid={"b"})
    assert "b" not in owner.values()
    assert contiguous_blocks([0, 1, 2, 3], ["a", "b"]) == {0: "a", 1: "a", 2: "b", 3: "b"}
