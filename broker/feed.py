"""What the dashboard reads that the queue itself does not keep: how each map goes, as
its client sees it (progress, new errors with their tracebacks, and the tasks that
finished since, with where they read from), in one capped, expiring stream that the
clients add to once a second per map; and the address of a dashboard serving the
namespace.

Everything here is JSON: a reader never unpickles anything. The keys are in
:mod:`broker.wire.keys` (``feed``, ``dashboard``) with their owners. No key names a map, so
a map that ends (or whose client dies) leaves nothing of its own behind: its entries go
with the feed's cap or expiry.

Example (against a running broker)::

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     publish(s, {"map_id": "0123456789abcdef", "n": 2, "done": 1}, [[0, "w1", 1.0, 2.0, 0, 10, None, 0]])
    ...     read_feed(s, "0")[1][0]["tasks"]
    [[0, 'w1', 1.0, 2.0, 0, 10, None, 0]]
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .wire import records

if TYPE_CHECKING:  # pragma: no cover
    from .storage import Storage

#: task records in one stream entry, at most (a bigger batch goes in several)
BATCH = 2000
#: the field of a stream entry holding its JSON: {"map": progress, "tasks": [records]}
FIELD = b"j"
#: a task record is a list: these fields, in this order (their types: records.FEED_TASK)
TASK_FIELDS = tuple(records.FEED_TASK)


def publish(storage: "Storage", progress: dict, tasks: list[list]) -> None:
    """Add a map's progress and its newly finished tasks to the feed (one round trip)."""
    publish_many(storage, [(progress, tasks)])


def publish_many(storage: "Storage", notes: list[tuple[dict, list[list]]]) -> None:
    """:func:`publish` for several notes (maps, or one map's several) in one round trip."""
    st, key = storage.settings, storage.keys.feed
    pipe = storage.r.pipeline(transaction=False)
    for progress, tasks in notes:
        parts = [tasks[at:at + BATCH] for at in range(0, len(tasks), BATCH)] or [[]]
        for k, part in enumerate(parts):
            entry = {"map": progress if k == len(parts) - 1 else {"map_id": progress["map_id"]}, "tasks": part}
            pipe.xadd(key, {FIELD: json.dumps(entry, separators=(",", ":"))}, maxlen=st.feed_entries,
                      approximate=True)
    pipe.expire(key, st.feed_ttl)
    pipe.execute()


def read_feed(storage: "Storage", after: str, count: int = 1000) -> tuple[str, list[dict]]:
    """Entries added after stream id ``after`` ("0": from the oldest kept), at most
    ``count``; returns the id of the last one read (``after`` if none) and them."""
    got = storage.r.xrange(storage.keys.feed, min=f"({after}" if after != "0" else "-", count=count)
    out: list[dict] = []
    malformed = []
    for entry_id, fields in got:
        after = entry_id.decode()
        try:
            out.append(records.feed_entry(fields.get(FIELD, b"{}"), f"{storage.keys.feed} entry {after}"))
        except records.MalformedRecord as err:        # not ours: skipped and named, never fails the page
            malformed.append(err)
    if malformed:
        storage.malformed.read((), malformed)
    return after, out


def announce_dashboard(storage: "Storage", url: str, ttl: int = 30) -> None:
    """Say a dashboard serves this namespace at ``url`` (renew it within ``ttl`` s). Anyone
    with the Redis password reads it: never put the dashboard's token in it."""
    if "token=" in url:
        raise ValueError(f"announce_dashboard: {url.split('token=')[0]}token=... carries the dashboard's token; "
                         "announce the address without it (Dashboard.address)")
    storage.r.set(storage.keys.dashboard, url, ex=ttl)


def withdraw_dashboard(storage: "Storage", url: str) -> None:
    """The dashboard at ``url`` stops: remove its address (unless another took the key)."""
    pipe = storage.r.pipeline(transaction=True)
    key = storage.keys.dashboard
    if storage.r.get(key) == url.encode():
        pipe.delete(key)
        pipe.execute()


def dashboard_announced(storage: "Storage") -> bool:
    """Whether a dashboard says it serves this namespace (one EXISTS)."""
    return bool(storage.r.exists(storage.keys.dashboard))


def dashboard_address(storage: "Storage") -> str | None:
    """The address of a dashboard serving this namespace, if one runs."""
    raw = storage.r.get(storage.keys.dashboard)
    return raw.decode() if raw else None


def command_counts(storage: "Storage") -> dict[str, int]:
    """Redis commands run since the server started, by command (INFO commandstats), to
    measure what a reader costs the broker."""
    return {name.removeprefix("cmdstat_"): int(v["calls"])
            for name, v in storage.r.info("commandstats").items()}
