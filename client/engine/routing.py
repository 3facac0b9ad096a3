"""Where each task of a map goes: back to the worker that holds its chunk, else in
contiguous blocks over the live workers, else into the shared queue.

A chunk's ``routing_key`` (file UUID, tree, entry range) names what a worker caches; the
broker says which live worker holds which key (:meth:`broker.storage.Storage.locate`).
Nothing here talks to Redis itself, so the placement tests without a broker::

    >>> contiguous_blocks(list(range(6)), ["a", "b"])
    {0: 'a', 1: 'a', 2: 'a', 3: 'b', 4: 'b', 5: 'b'}
    >>> contiguous_blocks([0, 1], ["a", "b"])           # too few to split
    {}
    >>> class C:
    ...     def __init__(self, key): self.routing_key = key
    >>> args = [C("f:0"), C("f:1"), 7]
    >>> owners(args, [0, 1, 2], locate=lambda keys: ({"f:1": "b"}, ["a", "b"]), avoid=set())
    ({1: 'b'}, {1})
"""
from __future__ import annotations

from typing import Callable, Sequence


def contiguous_blocks(indices: list[int], workers: list[str], weights: Sequence[float] | None = None
                      ) -> dict[int, str]:
    """Place chunks nobody holds yet: consecutive chunks (mostly of the same file) go to
    the same worker, so each worker opens few files; idle workers steal from the tails
    of the others' queues, so a slow worker cannot hold the map up. With ``weights`` (a
    chunk's events, one per index), each worker gets about the same number of *events*,
    not of chunks: a warm rerun goes back where the cold run put each chunk, so a worker
    given 60 % of the events there takes 60 % of the warm time (the chunk goes to the
    worker whose share holds its middle event).

        >>> contiguous_blocks([0, 1, 2, 3, 4], ["a", "b"], weights=[100, 100, 100, 10, 10])
        {0: 'a', 1: 'a', 2: 'b', 3: 'b', 4: 'b'}
    """
    if len(indices) < 2 * len(workers):
        return {}                     # too few to split: the shared queue balances best
    total = float(sum(weights)) if weights is not None else 0.0
    if weights is None or total <= 0 or min(weights) < 0:
        block = -(-len(indices) // len(workers))
        return {i: workers[k // block] for k, i in enumerate(indices)}
    out, before, n = {}, 0.0, len(workers)
    for i, w in zip(indices, weights):
        out[i] = workers[min(n - 1, int((before + w / 2) / total * n))]
        before += w
    return out


#: What opening a file costs a cold worker, counted in events: uproot reads the tree's
#: metadata (~0.2 s for a NanoAOD tree of ~950 branches) and coffea works out its form,
#: ~0.28 s per file in ``bench agc``'s cold breakdown, while an event costs ~4 us there. Counting
#: only events gave one worker 6 files and the other 3 (the same events): it sat idle for the
#: last ~0.5 s of every cold AGC run.
FILE_OPEN_EVENTS = 50_000


def _weights(args: Sequence, indices: list[int]) -> list[float] | None:
    """Each chunk's cold cost in events: its ``num_entries``, plus its share (by events) of
    :data:`FILE_OPEN_EVENTS` for its file (its routing key's file UUID and tree), so a file
    costs its events and one opening, and the chunks of one file still split by events;
    None unless every chunk says its events.

        >>> class C:
        ...     def __init__(self, key, n): self.routing_key, self.num_entries = key, n
        >>> _weights([C("u1:Events:0-10", 10), C("u1:Events:10-40", 30), C("u2:Events:0-5", 5)], [0, 1, 2])
        [12510.0, 37530.0, 50005.0]
    """
    got = [getattr(args[i], "num_entries", None) for i in indices]
    if any(not isinstance(w, (int, float)) for w in got):
        return None
    files = []
    for i in indices:
        key = getattr(args[i], "routing_key", None)
        files.append(key.rsplit(":", 1)[0] if isinstance(key, str) else None)
    per_file: dict = {}
    for f, w in zip(files, got):
        per_file[f] = per_file.get(f, 0) + w
    return [w + (FILE_OPEN_EVENTS * w / per_file[f] if f is not None and per_file[f] > 0 else 0)
            for f, w in zip(files, got)]


def owners(args: Sequence, indices: list[int], *, locate: Callable, avoid: set[str],
           good: list[str] | None = None, route: bool = True) -> tuple[dict[int, str], set[int]]:
    """The worker each task of ``indices`` is queued for (a task not in the result goes to
    the shared queue), and those of them that go to a worker that holds their chunk.

    ``locate(keys)`` returns (key -> live worker holding it, live workers); workers in
    ``avoid`` (another key, forged, shunned) get nothing; ``good`` (a mixed pool: the
    workers known to hold our key) also gets every task nobody holds, so nothing goes
    into the shared queue where a misfit could take it. ``route=False``: only that."""
    keyed = [i for i in indices if getattr(args[i], "routing_key", None)] if route else []
    owner: dict[int, str] = {}
    if keyed:
        where, live = locate([args[i].routing_key for i in keyed])
        live = sorted(set(live) - avoid)
        owner = {i: where[args[i].routing_key] for i in keyed if where.get(args[i].routing_key) in live}
        home = set(owner)
        if live:
            free = [i for i in keyed if i not in owner]
            owner.update(contiguous_blocks(free, live, _weights(args, free)))
    else:
        home = set()
    if good:
        for k, i in enumerate(indices):
            if i not in owner:
                owner[i] = good[k % len(good)]
    return owner, home
