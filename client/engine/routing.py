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
    ({1: 'b'}, 1)
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


def _weights(args: Sequence, indices: list[int]) -> list[float] | None:
    """Each chunk's events (``num_entries``), or None unless every one of them says."""
    got = [getattr(args[i], "num_entries", None) for i in indices]
    return None if any(not isinstance(w, (int, float)) for w in got) else got


def owners(args: Sequence, indices: list[int], *, locate: Callable, avoid: set[str],
           good: list[str] | None = None, route: bool = True) -> tuple[dict[int, str], int]:
    """The worker each task of ``indices`` is queued for (a task not in the result goes to
    the shared queue), and how many of them go to a worker that holds their chunk.

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
        home = len(owner)
        if live:
            free = [i for i in keyed if i not in owner]
            owner.update(contiguous_blocks(free, live, _weights(args, free)))
    else:
        home = 0
    if good:
        for k, i in enumerate(indices):
            if i not in owner:
                owner[i] = good[k % len(good)]
    return owner, home
