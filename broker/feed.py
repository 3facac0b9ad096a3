"""What the dashboard reads that the queue itself does not keep: the recent finished tasks
of every map (a capped, expiring stream of JSON batches, one per map a second, added by
the clients, who already hold each result's metadata), each map's progress as its client
sees it, and the address of a dashboard serving the namespace.

Everything here is JSON: a reader never unpickles anything. The keys are in
:mod:`broker.keys` (``feed``, ``progress``, ``dashboard``) with their owners.

Example (against a running broker)::

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:                       # doctest: +SKIP
    ...     s = Storage(b.config)
    ...     publish(s, "0123456789abcdef", {"n": 2, "done": 1}, [{"i": 0, "w": "w1"}])
    ...     read_feed(s, "0")[1]
    [{'i': 0, 'w': 'w1'}]
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from rhtc.broker.storage import Storage

#: task records in one stream entry, at most (a bigger batch goes in several)
BATCH = 2000
#: field of a stream entry holding its JSON list of task records
FIELD = b"tasks"


def publish(storage: "Storage", map_id: str, progress: dict, records: list[dict]) -> None:
    """Add a map's newly finished tasks to the feed and set its progress note (one round trip)."""
    st, k = storage.settings, storage.keys
    pipe = storage.r.pipeline(transaction=False)
    for at in range(0, len(records), BATCH):
        pipe.xadd(k.feed, {FIELD: json.dumps(records[at:at + BATCH])}, maxlen=st.feed_entries, approximate=True)
    if records:
        pipe.expire(k.feed, st.feed_ttl)
    pipe.set(k.progress(map_id), json.dumps(progress), ex=st.feed_ttl)
    pipe.execute()


def read_feed(storage: "Storage", after: str, count: int = 100) -> tuple[str, list[dict]]:
    """Task records added after stream id ``after`` ("0": from the oldest kept), at most
    ``count`` batches; returns the id of the last batch read (``after`` if none) and them."""
    got = storage.r.xrange(storage.keys.feed, min=f"({after}" if after != "0" else "-", count=count)
    out: list[dict] = []
    for entry_id, fields in got:
        after = entry_id.decode()
        try:
            out += json.loads(fields.get(FIELD, b"[]"))
        except ValueError:
            continue                      # not ours: skip it, never fail the page
    return after, out


def read_progress(storage: "Storage", map_ids: Iterable[str]) -> dict[str, dict]:
    """The progress notes of these maps that still exist."""
    ids = list(map_ids)
    if not ids:
        return {}
    out = {}
    for m, raw in zip(ids, storage.r.mget([storage.keys.progress(m) for m in ids])):
        if raw:
            try:
                out[m] = json.loads(raw)
            except ValueError:
                continue
    return out


def announce_dashboard(storage: "Storage", url: str, ttl: int = 30) -> None:
    """Say a dashboard serves this namespace at ``url`` (renew it within ``ttl`` s)."""
    storage.r.set(storage.keys.dashboard, url, ex=ttl)


def withdraw_dashboard(storage: "Storage", url: str) -> None:
    """The dashboard at ``url`` stops: remove its address (unless another took the key)."""
    pipe = storage.r.pipeline(transaction=True)
    key = storage.keys.dashboard
    if storage.r.get(key) == url.encode():
        pipe.delete(key)
        pipe.execute()


def dashboard_address(storage: "Storage") -> str | None:
    """The address of a dashboard serving this namespace, if one runs."""
    raw = storage.r.get(storage.keys.dashboard)
    return raw.decode() if raw else None


def command_counts(storage: "Storage") -> dict[str, int]:
    """Redis commands run since the server started, by command (INFO commandstats), to
    measure what a reader costs the broker."""
    return {name.removeprefix("cmdstat_"): int(v["calls"])
            for name, v in storage.r.info("commandstats").items()}
