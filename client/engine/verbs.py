"""What the helpers that look after a map may use of it: :class:`MapVerbs`, the part of
:class:`client.engine.maprun.MapRun` that upkeep (:mod:`client.engine.upkeep`) and the
task timeouts (:mod:`client.engine.timeouts`) read, and its one verb, ``apply(event)``.

It sits below all three, so none of them imports another to name it: the map's driver
imports upkeep, upkeep imports the timeouts, and both only know a map by these verbs.
"""
from __future__ import annotations

from typing import Protocol

from ...broker.storage import Storage
from .feed import MapFeed
from .state import MapState


class MapVerbs(Protocol):
    """What upkeep reads from a map, and its one verb (:class:`client.engine.maprun.MapRun`)."""

    storage: Storage
    map_id: str
    fn_hash: str
    nonce: str
    n: int
    fingerprint: str
    straggler_factor: float | None
    task_timeout: float | None
    merging: bool
    sample_metrics: bool
    feed: MapFeed
    state: MapState

    def apply(self, event) -> None:
        """Hand ``event`` to the map's state and carry out what it returns."""

    def describe_argument(self, index: int) -> str:
        """Task ``index``'s argument, as an error names it."""

    def memory(self) -> tuple[int, int]:
        """(used, maxmemory) bytes of the broker; (0, 0) when it cannot say."""
