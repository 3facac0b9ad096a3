"""A map tells the dashboard how it goes: once a second (with its upkeep) and when it ends,
the client adds to the broker's feed (:mod:`broker.feed`; JSON, capped and expiring) the
map's progress, its new errors and the tasks that finished since. The client has each
result's metadata already; nothing here is read back by the map.

Publishing is best-effort: a broker that refuses it costs the dashboard a second, never
the map its results. The finished tasks' rows (the page's task stream) go only while a
dashboard serves the namespace (it announces itself: ``broker.feed.announce_dashboard``;
looked at every :data:`WATCH_EVERY` s, and assumed before the first look): nobody
watching, a million-task map does not JSON-encode a million rows for nobody (a tenth of
its client's CPU). Its progress, errors and sums always go. A map's last note is sent a moment after it ends (with the other
maps ending then), and at the latest when the process exits: a script whose map ends
within a second and exits still shows its map on the page, for as long as the feed keeps
it (``feed_ttl``).
"""
from __future__ import annotations

import atexit
import logging
import threading
import time

from ...broker import feed
from ...broker.errors import ConnectionProblem
from .tasks import TaskState

log = logging.getLogger("rhtc.client")

#: errors (with their tracebacks) a map's progress note carries, at most; and their length
MAX_ERRORS = 10
MAX_TRACEBACK = 6000
#: how often (s) a map looks whether a dashboard serves its namespace
WATCH_EVERY = 5.0


class MapFeed:
    """The dashboard's view of one :class:`~client.engine.maprun.MapRun`."""

    def __init__(self, run):
        self.run = run
        self._sent = 0                   # ledger rows already in the feed
        self.errors: list[dict] = []     # errors not yet in the feed (at most MAX_ERRORS in all)
        self._errors_kept = 0
        self.events = 0
        self.bytes_cache = 0
        self.bytes_file = 0
        self._watched: bool | None = None    # a dashboard serves the namespace (None: not looked yet)
        self._looked = 0.0

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

    def flush(self, later: bool = False) -> None:
        """Publish what finished since the last call: one round trip, or with ``later`` (the
        map's last note, sent as it ends) none on the map's path, a background thread
        sends it a moment after."""
        run = self.run
        records, events, cache, files = run.ledger.feed_rows(self._sent, rows=self._watching(later))
        self._sent = len(run.ledger)
        self.events += events
        self.bytes_cache += cache
        self.bytes_file += files
        progress = dict(self.progress(), errors=self.errors)
        self.errors = []
        if later:
            with _lock:
                _waiting.append((run.storage, progress, records))
            _wake.set()
            _start_publisher()
        else:
            _publish(run.storage, f"map {run.map_id}", [(progress, records)])


    def _watching(self, later: bool) -> bool:
        """Whether a dashboard serves the namespace (looked at every WATCH_EVERY s, never
        on the map's path: ``later``; unknown counts as yes)."""
        now = time.monotonic()
        if not later and now - self._looked >= WATCH_EVERY:
            self._looked = now
            try:
                self._watched = feed.dashboard_announced(self.run.storage)
            except Exception:                # the broker away or refusing: as before
                pass
        return self._watched is not False


def _publish(storage, what: str, notes: list) -> None:
    try:
        feed.publish_many(storage, notes)
    except (*ConnectionProblem, OSError) as err:
        log.debug("%s: could not update the dashboard's feed: %s", what, err)
    except Exception as err:          # e.g. a broker out of memory: the map goes on
        log.debug("%s: the broker refused the dashboard's feed: %s", what, err)


#: the maps' last notes wait this long (s) to go together: a stream of short maps costs
#: the broker a round trip per interval, not one per map
PUBLISH_EVERY = 0.5
_waiting: list[tuple] = []            # (storage, progress, records) of ended maps, not sent yet
_lock = threading.Lock()              # guards _waiting
_sending = threading.Lock()           # one sender at a time: the thread, or the process's exit
_wake = threading.Event()
_publisher: threading.Thread | None = None
_publisher_lock = threading.Lock()


def _start_publisher() -> None:
    global _publisher
    with _publisher_lock:
        if _publisher is None or not _publisher.is_alive():
            _publisher = threading.Thread(target=_publish_pending, name="rhtc-feed", daemon=True)
            _publisher.start()


def _publish_pending() -> None:
    """The background thread: every PUBLISH_EVERY s, what the ended maps left."""
    while True:
        _wake.wait()
        time.sleep(PUBLISH_EVERY)
        _wake.clear()
        publish_waiting()


@atexit.register
def publish_waiting() -> None:
    """Send the ended maps' last notes now, one round trip per broker (the background
    thread calls it; so does the process's exit, which would otherwise drop them)."""
    with _sending:
        with _lock:
            batch = _waiting[:]
            _waiting.clear()
        by_storage: dict[int, tuple] = {}
        for storage, progress, records in batch:
            by_storage.setdefault(id(storage), (storage, []))[1].append((progress, records))
        for storage, notes in by_storage.values():
            _publish(storage, f"{len(notes)} map(s)", notes)
