"""The maps registry (``{ns}:maps``, :mod:`broker.wire.keys`) keeps itself clean: entries of
maps whose client was killed expire without anyone running ``rhtc status``.

Every live client renews its map's entry once a second (score = last renewal) and drops
the entries nobody renewed for ``map_ttl`` seconds; the registry itself expires
``map_ttl`` seconds after the last renewal of any map, so a namespace whose clients all
died is left clean too. The commands are the map queue's
(:meth:`broker.mapqueue.MapQueue.renew_entry`).

Example (against a running broker)::

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     renew_map_entry(Storage(b.config), "0123456789abcdef")
    0
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .storage import Storage


def renew_map_entry(storage: "Storage", map_id: str, now: float | None = None) -> int:
    """Mark ``map_id`` alive in the registry (if it is there), remove entries not renewed
    within ``map_ttl`` and renew the registry's expiry; returns how many were removed."""
    return storage.maps.renew_entry(map_id, now)
