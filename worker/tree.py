"""A worker's part in the tree of partials (:mod:`broker.wire.merge`): once a map has nothing
left queued for this worker (its queue ran dry while the map's backlog is empty), or its
next task is another map's (whatever the backlog: the partial must not wait for that
task), its partial of that map goes *up*: while the map's pool holds other workers'
partials, the broker gives it up to the fan-in of them to fold in (leased here, so they
go back to the pool if this worker dies), and once the pool is empty its partial goes to
the pool for the next merger, or to the client when it covers every task not answered
yet. Nothing waits for a timer.

    (needs a broker and a task process: see tests/scenarios/test_workers_merge_each_others_partials.py)
    >>> Tree(storage, partials, "w1", incarnation, hold).up(["0123456789abcdef"])   # doctest: +SKIP
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

from ..broker.wire.messages import HandedUp
from .merge import Partials

log = logging.getLogger("rhtc.worker")


class Tree:
    """Hands one task process's partials up the tree."""

    def __init__(self, storage, partials: Partials, name: str, incarnation: str, hold: Callable[[], None],
                 leasing: Callable[[], None] = lambda: None):
        self.storage, self.partials = storage, partials
        self.name, self.incarnation = name, incarnation
        self.hold = hold                      # tells the supervisor what this process holds now
        self.leasing = leasing                # ... and that partials may be leased to it (until hold())

    def up(self, map_ids: Iterable[str], rounds: int | None = None) -> None:
        """Each open partial of ``map_ids`` up the tree, folding in others' partials as long
        as the map's pool holds some (at most ``rounds`` times: another map's task waits);
        one that cannot go (this incarnation does not hold the name now, or its plan has
        no tree) stays open, for the caller to hand in as before."""
        for map_id in list(map_ids):
            part = self.partials.open.get(map_id)
            if part is not None and part.plan.fanin > 1:
                self._up(map_id, part.plan.fanin, rounds)

    def _up(self, map_id: str, fanin: int, rounds: int | None) -> None:
        merge_up, partials = self.storage.lease.merge_up, self.partials
        aside, packed = b"", None
        while True:
            ids, frame = packed or (b"", b"")
            if len(partials.open[map_id].tids) + fanin > partials.room or rounds == 0:
                fanin = 1                     # (what it holds stays within what the supervisor is told)
            if fanin > 1:
                self.leasing()                # (others' partials may come back, leased here)
            held, outcome, inputs = merge_up(self.name, self.incarnation, map_id, fanin, ids, frame, aside,
                                             len(partials.open[map_id].indices))
            aside, packed = b"", None
            if not held:
                return                        # (the broker took nothing of it: it stays open)
            if outcome == HandedUp.INPUTS:           # others' partials: folded in first, then up again
                rounds = None if rounds is None else rounds - 1
                partials.taking = [pid for pid, _ in inputs]
                self.hold()
                try:
                    side, dropped = partials.absorb(map_id, inputs, self.storage.lease.partial_frame)
                finally:
                    partials.taking = []
                if dropped:
                    self.storage.lease.release(self.name, dropped)
                aside = b"".join(side)
                self.hold()
                continue
            if outcome != HandedUp.NONE:             # parked, delivered, refused or gone: it left
                partials.open.pop(map_id, None)
                self.hold()
                return
            packed = partials.pack_up(map_id)
            if packed is None:                # the partials it folded in go alone
                unfolded, partials.unfolded = partials.unfolded, []
                merge_up(self.name, self.incarnation, map_id, 1, aside=b"".join(unfolded))
                self.hold()
                return
