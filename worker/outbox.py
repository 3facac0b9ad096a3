"""What a task process owes the broker: its signed result frames (and merged partials)
not handed in yet. They go in with the next take (one round trip for results and new
tasks), ahead of it in groups when together they exceed what one command may carry, and
are kept through broker trouble: a result is never dropped because the broker refused it
for a while (memory, a restart); only one over 1 MiB that it keeps refusing while it
answers becomes a ``ResultTooLarge`` error, so the worker is never wedged on it.

    (needs a broker: see tests/integration/test_big_results_waiting.py and tests/scenarios/test_lost_replies_crashes_and_refusals.py)
    >>> box = Outbox(storage, "w1", incarnation, key)                 # doctest: +SKIP
    >>> box.frames.append((map_id, task_id, frame)); box.flush()      # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

from ..broker.errors import BrokerOutOfMemory, BrokerUnavailable
from ..broker.wire.protocol import TASK_ID_LEN
from .results import ALWAYS_FITS, REFUSALS, batches_within, refused_by_broker

#: what a worker hands in: (map id, task id(s) (a partial's: all it covers), signed frame)
Outgoing = tuple[str, bytes, bytes]


class Outbox:
    """The result frames one incarnation of a worker has not handed in yet."""

    def __init__(self, storage, name: str, incarnation: str, key: bytes):
        self.storage, self.name, self.incarnation, self.key = storage, name, incarnation, key
        self.frames: list[Outgoing] = []
        self._refusals = 0                 # big results refused in a row (see refused)

    def __bool__(self) -> bool:
        return bool(self.frames)

    def held(self) -> list[bytes]:
        """The lease ids of what waits here (a partial's: every one it covers): still
        leased here until a hand-in returns, so the supervisor must not requeue them while
        the broker refuses it (their tasks would run again, and the hand-in be refused)."""
        n = TASK_ID_LEN
        return [tids[at:at + n] for _, tids, _ in self.frames for at in range(0, len(tids), n)]

    def take(self, n: int, watch: Sequence[str] = ()) -> tuple[bool, int, list[tuple[bytes, bytes]], set[str]]:
        """Hand every frame in and lease up to ``n`` tasks, in one round trip
        (:meth:`Storage.take_watching`: also which maps, of ``watch`` and of the batch, still
        have a backlog); the frames are handed in only if it returns."""
        self._hand_in_large()
        got = self.storage.lease.take_watching(self.name, self.incarnation, n, self.frames, watch)
        self.frames = []
        return got

    def flush(self) -> None:
        """Hand every frame in now (leasing nothing)."""
        self._hand_in_large()
        if self.frames:
            self.take(0)

    def _hand_in_large(self) -> None:
        """Results that together exceed what one command to the broker may carry
        (``client-query-buffer-limit``) go in ahead, in groups that fit; the last group
        is left for the take."""
        if sum(len(frame) for _, _, frame in self.frames) <= ALWAYS_FITS // 2:
            return
        budget = self.storage.lease.bulk_limits().query_buffer // 2
        for group in batches_within(self.frames, budget)[:-1]:
            self.storage.lease.take(self.name, self.incarnation, 0, group)
            self.frames = self.frames[len(group):]

    def refused(self, err: BaseException) -> None:
        """The broker refused a hand-in with ``err``. A result over 1 MiB that it refused
        three times in a row (a limit we could not read, or one lowered since) while it
        answers a ping goes in as a ``ResultTooLarge`` error instead."""
        big = [i for i, (_, _, frame) in enumerate(self.frames) if len(frame) > ALWAYS_FITS]
        if not big or isinstance(err, (BrokerOutOfMemory, BrokerUnavailable)):
            self._refusals = 0          # memory or a restart: results wait, by design
            return
        self._refusals += 1
        try:
            if self._refusals < REFUSALS or not self.storage.ping():
                return
        except Exception:   # the broker itself is away: keep the results
            return
        for i in big:
            map_id, tid, frame = self.frames[i]
            self.frames[i] = (map_id, tid, refused_by_broker(self.key, frame, err))
        self._refusals = 0
