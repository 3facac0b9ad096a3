"""What the dashboard shows, read from the broker: workers (with their problems, and those
that went away), maps in flight and just ended, the recent tasks, throughput over time and
the broker's recent problems, and each ended map's efficiency by the wall clock and per
worker (:class:`~client.reports.efficiency.MapTally` over the tasks of the feed; while a map
runs its finished tasks are not all in the feed yet, results merged on the workers come in
late, so a running map shows none). Everything it reads is JSON (heartbeats, the maps registry,
the maps' feed, the problem log); nothing is unpickled, nothing is written.

One :class:`DashState` serves every open page: it reads the broker at most once per
``min_interval`` s whoever asks, so ten open tabs cost the broker what one does.

    >>> from rhtc.client.api import storage_for
    >>> DashState(storage_for()).snapshot()["workers"][:1]      # no worker yet
    []
"""
from __future__ import annotations

import collections
import threading
import time

from ...broker import feed
from ...broker.wire.protocol import key_fingerprint
from ...broker.storage import Storage
from ..reports.efficiency import MapTally
from rhtc.versions import stack_versions
from .status import MALFORMED_NOTE, misfits

#: recent task records kept for the task stream; gone workers kept this long (s);
#: throughput samples kept (one a snapshot); maps kept this long after their last word (s)
MAX_TASKS = 20_000
MAX_ERRORS = 10
MAX_MALFORMED = 100
GONE_SECONDS = 600
MAX_SAMPLES = 600
ENDED_MAP_SECONDS = 600
#: a heartbeat older than this many heartbeat periods is stalled
STALLED_PERIODS = 3


class DashState:
    """The dashboard's reading of one broker namespace (thread-safe)."""

    def __init__(self, storage: Storage, min_interval: float = 0.5):
        self.storage = storage
        self.min_interval = min_interval
        self.versions = stack_versions()
        self.fingerprint = key_fingerprint(storage.config.key)
        self._lock = threading.Lock()
        self._snap: dict | None = None
        self._at = 0.0
        self._cursor = "0"
        self._seq = 0
        self.tasks: collections.deque = collections.deque(maxlen=MAX_TASKS)
        self._seen: dict[str, dict] = {}            # worker name -> its last row
        self._gone: dict[str, dict] = {}
        self._maps_seen: dict[str, float] = {}       # map id -> when it was last seen
        self.progress: dict[str, dict] = {}          # map id -> its latest progress (with its errors)
        self.tallies: dict[str, MapTally] = {}       # map id -> its finished tasks' times, per worker
        self._last_counts: dict[str, tuple] = {}     # worker incarnation -> (t, cache, file, tasks)
        self.samples: collections.deque = collections.deque(maxlen=MAX_SAMPLES)

    def snapshot(self) -> dict:
        """The latest reading (a new one if the last is older than ``min_interval``)."""
        with self._lock:
            if self._snap is None or time.monotonic() - self._at >= self.min_interval:
                self._snap = self._read()
                self._at = time.monotonic()
            return self._snap

    def tasks_since(self, seq: int) -> list[dict]:
        """Task records numbered after ``seq`` (each has its number as ``q``)."""
        with self._lock:
            if not self.tasks or self.tasks[-1]["q"] <= seq:
                return []
            return [t for t in self.tasks if t["q"] > seq]

    # -- reading -------------------------------------------------------------------
    def _read(self) -> dict:
        now = time.time()
        st = self.storage
        statuses = st.pool.worker_statuses()
        workers = self._workers(statuses, now)
        self._cursor, entries = feed.read_feed(st, self._cursor)
        for entry in entries:
            self._take(entry, now)
        registry = st.pool.maps_in_flight(tidy=False)
        for m in registry:
            self._maps_seen[m["map_id"]] = now
        for m, t in list(self._maps_seen.items()):
            if now - t > ENDED_MAP_SECONDS:
                del self._maps_seen[m]
                self.progress.pop(m, None)
                self.tallies.pop(m, None)
        progress = self.progress
        maps = self._maps(registry, progress, now)
        self._sample(statuses, now)
        busy = sum(1 for w in workers if w["state"] == "busy")
        return {"t": now, "broker": repr(st.config), "workers": workers, "gone": sorted(self._gone.values(),
                key=lambda w: w["name"]), "maps": maps, "shared_queue": st.pool.shared_depth(),
                "pool": {"workers": len(workers), "busy": busy, "keeper": _keepers(st),
                         "note": "no pool keeper runs for this broker (rhtc pool start): held or replaced jobs "
                                 "are not known here (see condor_q)"},
                "throughput": list(self.samples), "problems": st.recent_problems(20),
                "malformed": st.malformed.lines()[:MAX_MALFORMED], "malformed_note": MALFORMED_NOTE,
                "last_task": self._seq}

    def _take(self, entry: dict, now: float) -> None:
        """One entry of the feed: a map's progress (errors added to those seen) and tasks."""
        p = entry["map"]
        map_id = str(p.get("map_id", ""))
        self._maps_seen[map_id] = now
        if len(p) > 1:
            errors = self.progress.get(map_id, {}).get("errors", [])
            self.progress[map_id] = dict(p, errors=(errors + list(p.get("errors") or []))[:MAX_ERRORS])
        for rec in entry.get("tasks") or []:
            if not isinstance(rec, list) or len(rec) != len(feed.TASK_FIELDS):
                continue
            i, w, start, stop, c, f, ev, err = rec
            self.tallies.setdefault(map_id, MapTally()).add(str(w), start, stop)
            self._seq += 1
            self.tasks.append({"q": self._seq, "m": map_id, "i": i, "w": w, "s": start, "e": stop, "c": c, "f": f,
                               "ev": ev, "err": err})

    def _workers(self, statuses, now: float) -> list[dict]:
        st = self.storage.settings
        stalled_after, idle_factor = STALLED_PERIODS * st.heartbeat, st.idle_heartbeat / st.heartbeat
        odd: dict[str, list[str]] = {}
        for line in misfits(statuses, self.storage.config.key, self.versions):
            name, _, why = line.partition(": ")
            odd.setdefault(name, []).append(why)
        rows = []
        for s in statuses:
            m = s.metrics or {}
            problems = list(odd.get(s.name, []))
            if s.forged:
                problems.append(f"forged heartbeat: {s.forged}")
            age = now - s.t if s.t else None
            state = s.state
            if age is not None and age > stalled_after * (1 if s.task else idle_factor):
                state = "stalled"
                problems.append(f"heartbeat {age:.0f} s old")
            read = (s.bytes_read or 0) + (s.bytes_from_cache or 0)
            rows.append({"name": s.name, "host": s.host, "pid": s.pid, "state": state,
                         "task": str(s.task) if s.task else None, "task_seconds": s.task_seconds,
                         "hb_age": age, "tasks_done": s.tasks_done, "errors": s.errors, "crashes": s.crashes,
                         "queued": s.queued, "cache_bytes": s.cache_bytes, "cache_limit": s.cache_limit,
                         "cache_entries": s.cache_entries, "bytes_from_cache": s.bytes_from_cache,
                         "bytes_from_file": s.bytes_read,
                         "hit_rate": (s.bytes_from_cache / read) if read else None,
                         "cpu": m.get("cpu"), "rss": m.get("rss"), "incarnation": s.incarnation,
                         "versions": " ".join(f"{k} {v}" for k, v in sorted((s.versions or {}).items())),
                         "problems": problems})
        names = {r["name"] for r in rows}
        for name, row in self._seen.items():
            if name not in names and name not in self._gone:
                self._gone[name] = dict(row, state="gone", gone_since=now, task=None)
        for name in list(self._gone):
            if name in names or now - self._gone[name]["gone_since"] > GONE_SECONDS:
                del self._gone[name]
        self._seen = {r["name"]: r for r in rows}
        return rows

    def _maps(self, registry: list[dict], progress: dict[str, dict], now: float) -> list[dict]:
        out = []
        listed = {m["map_id"]: m for m in registry}
        for map_id in sorted(set(listed) | set(progress), key=lambda m: -(progress.get(m, {}).get("started")
                                                                         or float(listed.get(m, {}).get("started") or 0))):
            p, r = progress.get(map_id, {}), listed.get(map_id, {})
            n = int(p.get("n") or r.get("n") or 0)
            done, failed = int(p.get("done", 0)), int(p.get("failed", 0))
            started = p.get("started") or float(r.get("started") or now)
            ended = p.get("ended")
            span = max(1e-3, (ended or now) - started)
            rate = (done + failed) / span
            left = n - done - failed
            state = "done" if n and left <= 0 else ("cancelled" if p.get("cancelled") else
                                                    ("running" if map_id in listed else "ended"))
            tally = self.tallies.get(map_id)
            eff = tally.figures(started, ended) if ended and tally else {}
            out.append({"map_id": map_id, "label": p.get("label") or r.get("label", "?"), "n": n, "done": done,
                        "failed": failed, "started": started, "ended": ended, "state": state,
                        "progress": (done + failed) / n if n else 0.0, "tasks_per_s": rate,
                        "efficiency_wall": eff.get("efficiency_wall"), "efficiency": eff.get("efficiency"),
                        "events": p.get("events", 0), "events_per_s": p.get("events", 0) / span,
                        "bytes_cache": p.get("bytes_cache", 0), "bytes_file": p.get("bytes_file", 0),
                        "eta_s": (left / rate) if rate > 0 and left > 0 and state == "running" else None,
                        "queued": r.get("queued"), "client": r.get("client"),
                        "client_alive": r.get("client_alive"), "errors": p.get("errors", [])})
        return out

    def _sample(self, statuses, now: float) -> None:
        """Throughput since the last reading, from the workers' own counters (per
        incarnation, so a restarted worker's counters starting again count right)."""
        cache = file = tasks = 0.0
        counts = {}
        for s in statuses:
            key = f"{s.name}/{s.incarnation}"
            c = counts[key] = (now, s.bytes_from_cache or 0, s.bytes_read or 0, s.tasks_done or 0)
            before = self._last_counts.get(key)
            if before is not None:
                cache += max(0, c[1] - before[1])
                file += max(0, c[2] - before[2])
                tasks += max(0, c[3] - before[3])
        span = now - self.samples[-1]["t"] if self.samples else 0.0
        self._last_counts = counts
        if span > 0:
            self.samples.append({"t": now, "cache_Bps": cache / span, "file_Bps": file / span,
                                 "tasks_per_s": tasks / span})
        elif not self.samples:
            self.samples.append({"t": now, "cache_Bps": 0.0, "file_Bps": 0.0, "tasks_per_s": 0.0})


def _keepers(st) -> str | None:
    """One line per pool keeper: wanted and actual size, and its last replacement with why."""
    lines = []
    for k in st.pool.keepers():
        last = next((e for e in st.pool.keeper_events(k["pool"], 20) if e.get("what") in ("replaced", "failed", "evicted")),
                    None)
        lines.append(f"{k['pool']} wants {k.get('wanted')}, {k.get('serving', 0)} serving"
                     + (f"; last {last['what']} {last.get('job', '')}: {last.get('why', '')}" if last else ""))
    return "; ".join(lines) or None
