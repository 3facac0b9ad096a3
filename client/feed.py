"""A map tells the dashboard how it goes: once a second (with its upkeep) and when it ends,
the client adds to the broker's feed (:mod:`broker.feed`; JSON, capped and expiring) the
map's progress, its new errors and the tasks that finished since. The client has each
result's metadata already; nothing here is read back by the map.

Publishing is best-effort: a broker that refuses it costs the dashboard a second, never
the map its results.
"""
from __future__ import annotations

import logging
import time

from rhtc.broker import feed
from rhtc.broker.errors import ConnectionProblem
from rhtc.client.tasks import TaskState

log = logging.getLogger("rhtc.client")

#: errors (with their tracebacks) a map's progress note carries, at most; and their length
MAX_ERRORS = 10
MAX_TRACEBACK = 6000


class MapFeed:
    """The dashboard's view of one :class:`~client.maprun.MapRun`."""

    def __init__(self, run):
        self.run = run
        self._sent = 0                   # ledger rows already in the feed
        self.errors: list[dict] = []     # errors not yet in the feed (at most MAX_ERRORS in all)
        self._errors_kept = 0
        self.events = 0
        self.bytes_cache = 0
        self.bytes_file = 0

    def note_error(self, index: int, error) -> None:
        """Keep the first few errors of the map, with their tracebacks, for the page."""
        if self._errors_kept < MAX_ERRORS:
            self._errors_kept += 1
            self.errors.append({"index": index, "type": error.remote_type, "message": str(error.message)[:500],
                                "worker": error.worker, "argument": (error.argument or "")[:300],
                                "traceback": (error.remote_traceback or "")[-MAX_TRACEBACK:]})

    def progress(self) -> dict:
        run = self.run
        return {"map_id": run.map_id, "label": run.label, "n": run.n, "started": run.start, "ended": run.end,
                "done": run.tasks.count(TaskState.DONE), "failed": run.tasks.count(TaskState.FAILED),
                "cancelled": bool(run.cancelled), "events": self.events, "bytes_cache": self.bytes_cache,
                "bytes_file": self.bytes_file, "t": round(time.time(), 3)}

    def flush(self) -> None:
        """Publish what finished since the last call (one round trip)."""
        run = self.run
        records = []
        for m in run.ledger.metas(self._sent):
            self._sent += 1
            ev, c, f = m.get("events"), m.get("bytes_cache", 0), m.get("bytes_file", 0)
            self.events += ev or 0
            self.bytes_cache += c
            self.bytes_file += f
            if "start" in m:             # in the order of feed.TASK_FIELDS
                records.append([m["index"], m.get("worker"), round(m["start"], 3), round(m["stop"], 3), c, f, ev,
                                int(bool(m.get("error")))])
        progress = dict(self.progress(), errors=self.errors)
        try:
            feed.publish(run.storage, progress, records)
            self.errors = []
        except (*ConnectionProblem, OSError) as err:
            log.debug("map %s: could not update the dashboard's feed: %s", run.map_id, err)
        except Exception as err:          # e.g. a broker out of memory: the map goes on
            log.debug("map %s: the broker refused the dashboard's feed: %s", run.map_id, err)
