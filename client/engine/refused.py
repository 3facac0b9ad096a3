"""A map whose start a full broker refused: one :class:`~client.errors.BrokerFull` that
names the broker, how full it is and what to do, and nothing of the map left in Redis,
whichever write of the start met the full broker first (the signed liveness token, the
scripts' load on a fresh broker, a call of the enqueue, the registry's renewal; which one
is luck). What got in before the refusal goes with commands a full broker still runs
(:mod:`broker.unstart`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...broker.errors import BrokerTrouble
from ...broker.unstart import unstart_map
from ..errors import BrokerFull

if TYPE_CHECKING:  # pragma: no cover
    from .maprun import MapRun


def refused_start(run: "MapRun", sent: dict[str | None, list[int]]) -> tuple[BrokerFull, bool]:
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
