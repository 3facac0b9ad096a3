"""A map whose start a full broker refused: one :class:`~client.errors.BrokerFull` that
names the broker, how full it is and what to do, and nothing of the map left in Redis,
whichever write of the start met the full broker first (the signed liveness token, the
scripts' load on a fresh broker, a call of the enqueue, the registry's renewal; which one
is luck). What got in before the refusal goes with commands a full broker still runs
(:mod:`broker.unstart`).
"""
from __future__ import annotations

from typing import Any, Protocol

from ...broker.errors import BrokerTrouble
from ...broker.storage import Storage
from ...broker.unstart import unstart_map
from ..errors import BrokerFull


class StartingMap(Protocol):
    """What a refused start reads of its map (:class:`client.engine.maprun.MapRun`, which
    imports this module)."""

    storage: Storage
    settings: Any
    map_id: str
    n: int
    label: str
    frames: Any                     # task index -> its signed frame

    def memory(self) -> tuple[int, int]:
        """(used, maxmemory) bytes of the broker; (0, 0) when it cannot say."""


def refused_start(run: StartingMap, sent: dict[str | None, list[int]]) -> tuple[BrokerFull, bool]:
    """The error for ``run``, whose start the broker refused after it sent the tasks
    ``sent`` (worker or None -> indices), and whether nothing of the map is left there."""
    try:
        unstart_map(run.storage, run.map_id, [(w, run.frames[i]) for w, indices in sent.items() for i in indices])
        left, removed = "nothing of it was left there", True
    except BrokerTrouble as err:
        left = f"what of it got in could not be removed ({err}); it expires within {run.settings.map_ttl:.0f} s"
        removed = False
    what = f"it refused to start map {run.map_id} ({run.n} tasks of {run.label}); {left}"
    return BrokerFull.refused(run.storage.config, *run.memory(), what), removed
