"""What a map's state remembers of its recent events, to tell a task's story when
something about it goes wrong (an invalid move, an error to report): the last
``STORY_EVENTS`` events, a fetch's results as the indices they answered (never their
values), and at most ``STORY_INDICES`` such indices in all. Without that bound a
million-task map's last 2,000 fetches kept ~8 MB of indices alive for the map's life.

    >>> from rhtc.client.engine.events import Tick
    >>> s = Story(events=3, indices=4)
    >>> s.remember(Tick(now=1.0))
    >>> s.remember_fetch([1, 2, 3]); s.remember_fetch([3, 5])       # the first fetch makes room
    >>> s.about(3), s.about(1), s.kept_indices
    (['Results'], [], 2)
"""
from __future__ import annotations

import collections
from array import array
from typing import Iterable

STORY_EVENTS = 2000               # recent events kept to tell a task's story
STORY_INDICES = 50_000            # ... with at most this many fetched tasks' indices among them


class _Fetched:
    """A :class:`~client.engine.events.Results` event as the story keeps it: the indices it answered."""

    __slots__ = ("indices",)

    def __init__(self, indices: Iterable[int]):
        self.indices = array("q", indices)


class Story:
    """A map's recent events, bounded in number and in the indices they hold."""

    def __init__(self, events: int = STORY_EVENTS, indices: int = STORY_INDICES):
        self._recent: collections.deque = collections.deque()
        self.events, self.indices, self.kept_indices = events, indices, 0

    def remember(self, event) -> None:
        """Keep ``event`` (one that names a task by ``index``, or none)."""
        self._append(event, 0)

    def remember_fetch(self, indices: Iterable[int]) -> None:
        """Keep a fetch of results as the indices it answered."""
        fetched = _Fetched(indices)
        self._append(fetched, len(fetched.indices))

    def _append(self, item, n: int) -> None:
        recent = self._recent
        self.kept_indices += n
        while recent and (len(recent) >= self.events or self.kept_indices > self.indices):
            old = recent.popleft()
            if type(old) is _Fetched:
                self.kept_indices -= len(old.indices)
        recent.append(item)

    def about(self, index: int) -> list[str]:
        """The kinds of the kept events that name task ``index``, oldest first."""
        return [("Results" if type(e) is _Fetched else type(e).__name__) for e in self._recent
                if index in _indices_of(e)]


def _indices_of(event) -> tuple | array:
    i = getattr(event, "index", None)
    if i is not None:
        return (i,)
    got = getattr(event, "indices", ())
    return got if isinstance(got, array) else tuple(got)
