"""When a task runs again: the one place that decides.

* the function raised: rerun up to ``retries`` times, only for ``retry_on`` types if given,
  each after a pause (:meth:`RetryPolicy.delay`: ``RHTC_RETRY_DELAY``, 1 s, doubling up to
  a minute, jittered, so a flaky file server is not hit again at once by every task);
* a fault (the function blob went missing, a worker could not verify the frame): rerun up
  to ``max_attempts`` times (:class:`~broker.wire.config.Settings`, ``RHTC_MAX_ATTEMPTS``);
* the worker died while running it: the broker's reaper requeues it, up to the same
  ``max_attempts`` (``reap.lua``), then hands it back as dead (``WorkerLost``).

Example::

    >>> from rhtc.client.engine.tasks import TaskNote
    >>> p = RetryPolicy(retries=1, retry_on=("OSError",))
    >>> note = TaskNote()
    >>> from rhtc.broker.wire.messages import TaskError
    >>> p.retry_user_error(note, TaskError("OSError")), p.retry_user_error(note, TaskError("OSError"))
    (True, False)
    >>> p.retry_user_error(TaskNote(), TaskError("ValueError"))
    False
"""
from __future__ import annotations

import dataclasses
import heapq
import random

from ...broker.wire import protocol
from ...broker.wire.messages import TaskError
from .tasks import TaskNote


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How many times a task may run again, and after what."""

    retries: int = 0                       # reruns after the user's function raised
    retry_on: tuple | None = None          # ... only for these types (or type names)
    max_attempts: int = 3                  # runs in all after faults (Settings.max_attempts)
    retry_delay: float = 1.0               # pause before the first retry (Settings.retry_delay)
    max_delay: float = 60.0

    def delay(self, note: TaskNote, rng: random.Random | None = None) -> float:
        """Seconds to wait before the retry just granted: ``retry_delay`` doubled for each
        earlier retry, capped at ``max_delay``, times a random 0.8-1.2.

        >>> p = RetryPolicy(retries=5, retry_delay=1.0)
        >>> note = TaskNote(user_attempts=3)            # the third retry
        >>> 3.2 <= p.delay(note) <= 4.8
        True
        >>> RetryPolicy(retry_delay=0).delay(note)
        0.0
        """
        if self.retry_delay <= 0:
            return 0.0
        base = min(self.max_delay, self.retry_delay * 2 ** max(0, note.user_attempts - 1))
        return base * (rng or random).uniform(0.8, 1.2)

    def retry_user_error(self, note: TaskNote, info: TaskError) -> bool:
        """Whether to rerun a task whose function raised (counts the attempt if so)."""
        if note.user_attempts >= self.retries or not self._matches(info):
            return False
        note.user_attempts += 1
        return True

    def retry_fault(self, note: TaskNote) -> bool:
        """Whether to rerun a task a worker could not run (counts the attempt if so)."""
        if note.system_attempts + 1 >= self.max_attempts:
            return False
        note.system_attempts += 1
        return True

    def _matches(self, info: TaskError) -> bool:
        if not self.retry_on:
            return True
        names = {t if isinstance(t, str) else t.__name__ for t in self.retry_on}
        if info.type in names:
            return True
        exc = self.exception_of(info)
        types = tuple(t for t in self.retry_on if isinstance(t, type))
        return bool(exc is not None and types and isinstance(exc, types))

    @staticmethod
    def exception_of(info: TaskError) -> BaseException | None:
        """The remote exception object, if it unpickles here."""
        try:
            return protocol.loads_plain(info.exception) if info.exception else None
        except Exception:
            return None


class RetryQueue:
    """The retries waiting out their pause, soonest first (the client holds them: a task
    in its back-off is in no Redis key, so nothing there can be lost or expire). Times
    are the caller's (the map's events carry them): no clock is read here.

    >>> q = RetryQueue()
    >>> q.add(7, due=100.0); q.add(8, due=160.0)
    >>> q.pop_due(now=100.5), q.next_due, 8 in q
    ([7], 160.0, True)
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []

    def add(self, index: int, due: float) -> None:
        heapq.heappush(self._heap, (due, index))

    def __contains__(self, index: int) -> bool:
        return any(i == index for _, i in self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def indices(self) -> set[int]:
        return {i for _, i in self._heap}

    def pop_due(self, now: float) -> list[int]:
        """The tasks whose pause has passed by ``now`` (removed from the queue)."""
        due = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[1])
        return due

    @property
    def next_due(self) -> float:
        """When the next retry is due (in the events' time), ``inf`` if none waits."""
        return self._heap[0][0] if self._heap else float("inf")

    def clear(self) -> None:
        self._heap.clear()
