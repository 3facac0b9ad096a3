"""The worker's branch cache: arrays read from ROOT files, capped in bytes, LRU out first.

uproot already knows how to use a cache: ``tree.arrays(..., array_cache=mapping)`` looks
each branch up under a key made of the file's UUID, the tree, the branch, its
interpretation and the entry range, and stores what it had to read. This module only
supplies the mapping: a byte-capped LRU that also remembers which *chunk* each entry
belongs to (so the worker can advertise which chunks it holds and withdraw them when
they are evicted) and counts the bytes served from memory. What it holds is kept in
memory that no array owns (a copy made once, as a value enters), and what it hands out
is a read-only view or a new wrapper that cannot be made writable again
(:mod:`worker.frozen`): no task can change what a later task reads.

    >>> c = BranchCache(limit_bytes=100)
    >>> v = c.view("chunk-A")
    >>> import numpy as np
    >>> v["k1"] = np.zeros(10, dtype=np.float32)   # 40 bytes
    >>> c.nbytes, "chunk-A" in c.tags()
    (40, True)
"""
from __future__ import annotations

import collections
import sys
import urllib.parse
from typing import Any, Iterator, MutableMapping

from rhtc import context
from .frozen import freeze, hand_out


def nbytes_of(value: Any) -> int:
    n = getattr(value, "nbytes", None)
    if isinstance(n, int):
        return n
    return sys.getsizeof(value)


class BranchCache(MutableMapping):
    """Byte-capped LRU mapping for uproot's ``array_cache``, with per-chunk tags."""

    def __init__(self, limit_bytes: int, disk=None):
        self.limit_bytes = int(limit_bytes)
        self.disk = disk                       # the node's disk tier under it (worker.disk), or None
        self._data: collections.OrderedDict[str, tuple[Any, int, str | None]] = collections.OrderedDict()
        self._tag_count: collections.Counter = collections.Counter()
        self._offsets: dict[str, list] = {}    # per chunk: offsets arrays kept once
        self.nbytes = 0
        self.evicted_tags: set[str] = set()   # chunks no longer held; drained by the worker
        self.hits = self.misses = self.disk_hits = 0

    # MutableMapping
    def __getitem__(self, key: str) -> Any:
        value = self._data[key]
        self._data.move_to_end(key)
        _handed(key, value[2], value[0])
        return hand_out(value[0])

    def get(self, key: str, default: Any = None) -> Any:
        return self.get_counted(key, default)

    def get_counted(self, key: str, default: Any = None, tag: str | None = None) -> Any:
        entry = self._data.get(key)
        if entry is None and self.disk is not None:
            return self._from_disk(key, default, tag)
        if entry is None:
            self.misses += 1
            return default
        self._data.move_to_end(key)
        self.hits += 1
        if context.current is not None:
            context.current.bytes_from_cache += entry[1]
        _handed(key, entry[2], entry[0])
        return hand_out(entry[0])

    def _from_disk(self, key: str, default: Any, tag: str | None) -> Any:
        """A RAM miss looked up in the node's disk tier; a hit goes back into memory under
        its chunk and counts as bytes from disk."""
        value = self.disk.get(key)
        if value is None:
            self.misses += 1
            return default
        value = self.put(key, value, tag)
        self.disk_hits += 1
        if context.current is not None:
            context.current.bytes_from_disk += nbytes_of(value)
            if tag is not None:
                context.current.routing_keys.add(tag)
        return hand_out(value)

    def __setitem__(self, key: str, value: Any) -> None:
        self.put(key, value, None)

    def put(self, key: str, value: Any, tag: str | None) -> Any:
        """Keep ``value`` under ``key`` for the chunk ``tag``, as :func:`worker.frozen.freeze`
        makes it (the values in memory no array owns: the task that read ``value`` holds
        it, and it is made read-only too); returns what the cache keeps (or would have
        kept), never to be handed out as it is. A value that cannot be made read-only (not
        a numpy or awkward array, nor immutable) is not kept: None.

        >>> import numpy as np
        >>> c = BranchCache(limit_bytes=100)
        >>> read = np.arange(3.0)
        >>> kept = c.put("k", read, None)
        >>> kept is read, kept.flags.owndata, read.flags.writeable, c.put("list", [1], None), len(c)
        (False, False, False, None, 1)
        """
        if key in self._data:          # uproot re-stores what it just got from us: keep ours
            self._data.move_to_end(key)
            kept = self._data[key][0]
            _handed(key, tag, kept)
            return kept
        kept = freeze(value)
        if kept is None:
            return None
        _handed(key, tag, kept)
        kept, size = self._share_offsets(kept, tag) if tag is not None else (kept, nbytes_of(kept))
        self._store(key, kept, size, tag)
        return kept

    def keep(self, key: str, value: Any, nbytes: int, tag: str | None) -> bool:
        """Keep an object that is not an array read from a file (coffea's NanoEvents built
        for a chunk, :mod:`client.data.coffea_events`) under ``key`` for the chunk ``tag``:
        ``nbytes`` (what it holds in memory) counts against the cap and it is evicted, least
        recently used first, with the branches. It stays in RAM (never the node's disk tier)
        and is never handed out as an array. False when it is larger than the whole cache.

        >>> c = BranchCache(limit_bytes=100)
        >>> c.keep("k", object(), 60, "chunk-A"), c.nbytes, "chunk-A" in c.tags()
        (True, 60, True)
        >>> c.keep("k2", object(), 60, "chunk-B"), c.kept("k") is None    # the older one goes
        (True, True)
        """
        if key in self._data:
            self._data.move_to_end(key)
            return True
        return self._store(key, value, int(nbytes), tag)

    def kept(self, key: str) -> Any:
        """What :meth:`keep` kept under ``key`` (now the most recently used), or None. It is
        not counted as bytes served from the cache: those are the arrays read through it."""
        entry = self._data.get(key)
        if entry is None:
            return None
        self._data.move_to_end(key)
        return entry[0]

    def _store(self, key: str, value: Any, size: int, tag: str | None) -> bool:
        if size > self.limit_bytes:
            return False                # larger than the whole cache: don't thrash it
        self._data[key] = (value, size, tag)
        self.nbytes += size
        if tag is not None:
            self._tag_count[tag] += 1
            self.evicted_tags.discard(tag)
        while self.nbytes > self.limit_bytes:
            self._evict_oldest()
        return True

    def _share_offsets(self, value: Any, tag: str) -> tuple[Any, int]:
        """Jagged branches of one collection (Muon_pt, Muon_eta, ...) carry identical
        offsets: keep one copy per chunk, so the cache holds ~2x more NanoAOD chunks and
        fills with half the page faults. Returns the value to store and its new bytes."""
        layout = getattr(value, "layout", None)
        if type(layout).__name__ != "ListOffsetArray" or not type(value).__module__.startswith("awkward"):
            return value, nbytes_of(value)
        import awkward as ak
        import numpy as np
        offsets = np.asarray(layout.offsets)
        known = self._offsets.setdefault(tag, [])
        for other in known:
            if len(other) == len(offsets) and np.array_equal(other, offsets):
                shared = ak.contents.ListOffsetArray(ak.index.Index64(other), layout.content,
                                                     parameters=layout.parameters)
                return ak.Array(shared, behavior=value.behavior), layout.content.nbytes
        known.append(offsets)
        return value, nbytes_of(value)

    def _evict_oldest(self) -> None:
        self._forget(*self._data.popitem(last=False)[1])

    def __delitem__(self, key: str) -> None:
        self._forget(*self._data.pop(key))

    def _forget(self, _value: Any, size: int, tag: str | None) -> None:
        self.nbytes -= size
        if tag is not None:
            self._tag_count[tag] -= 1
            if self._tag_count[tag] <= 0:
                del self._tag_count[tag]
                self._offsets.pop(tag, None)
                self.evicted_tags.add(tag)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)

    def tags(self) -> set[str]:
        """The chunks (routing keys) with at least one entry in the cache."""
        return set(self._tag_count)

    def drain_evicted(self) -> set[str]:
        out, self.evicted_tags = self.evicted_tags, set()
        return out

    def view(self, tag: str, version: str | None = None, by_chunk: bool = False,
             serves_back: bool = False) -> "TaggedView":
        """A mapping to hand to uproot for one chunk: entries it stores carry ``tag``.

        ``version`` names the version of the file the chunk is read from (see
        :mod:`client.data.freshness`): it prefixes the view's keys, so a file rewritten in place,
        even with the same UUID, never gets the entries read from its old version.
        ``by_chunk`` (``tag`` is the chunk's routing key and uproot reads the branches with
        their own interpretations) keys the entries by chunk and branch (:func:`chunk_key`),
        so that :meth:`TaggedView.branch` finds them without the file's metadata.
        ``serves_back`` (a reader that gives its task what the cache keeps in place of what
        it read: :meth:`TaggedView.served`) has the view remember what was stored through it.

        >>> c = BranchCache(limit_bytes=100)
        >>> c.view("chunk-A", "v1")["k"] = b"old"
        >>> c.view("chunk-A", "v2").get("k") is None, c.view("chunk-A", "v1").get("k")
        (True, b'old')
        """
        return TaggedView(self, tag, version, by_chunk, serves_back)

    def holds(self, key: str) -> bool:
        """True when ``key`` is in memory or in the node's disk tier (nothing is read)."""
        return key in self._data or (self.disk is not None and self.disk.has(key))


def _handed(key: str, tag: str | None, value: Any) -> None:
    """Note that the running task holds ``value`` (so a write into it is explained by name)."""
    if context.current is not None:
        context.current.handed.append((key, tag, value))


def branch_label(key: str, tag: str | None) -> str:
    """The branch and chunk a cache key names, in words (for errors).

    >>> branch_label("v1|u1:Events:0-10|Muon_pt|ak", "u1:Events:0-10")
    "'Muon_pt' of chunk u1:Events:0-10"
    >>> branch_label("v1|u1:/Events;1:Muon_pt:AsDtype(Bf4(),Lf4()):0-10:np", "u1:Events:0-10")
    "'Muon_pt' of chunk u1:Events:0-10"
    >>> branch_label("v1|u1/%2FEvents%3B1/0-10/data/Muon_pt%2C%21load%2C%21content", "u1:Events:0-10")
    "'Muon_pt' of chunk u1:Events:0-10 (coffea buffer u1//Events;1/0-10/data/Muon_pt,!load,!content)"
    """
    parts = key.split("|")
    if len(parts) == 4:
        return f"{parts[2]!r} of chunk {parts[1]}"
    found = branch_of(parts[-1], tag) if tag else None
    if found is not None:
        return f"{found[0]!r} of chunk {tag}"
    where = f" of chunk {tag}" if tag else ""
    if "/" in parts[-1]:               # coffea's NanoEvents buffer: .../0-50/data/Muon_pt%2C%21load...
        column = urllib.parse.unquote(parts[-1].rsplit("/", 1)[1]).split(",")[0]
        if column:
            return f"{column!r}{where} (coffea buffer {urllib.parse.unquote(parts[-1])})"
    return f"{parts[-1]!r}{where}"


def chunk_key(version: str, tag: str, branch: str, library: str) -> str:
    """The cache key of one branch of one chunk (``tag``: its routing key) of one version of
    its file, as uproot's ``library`` returns it with the branch's own interpretation.

    >>> chunk_key("v1", "uuid:Events:0-10", "Muon_pt", "ak")
    'v1|uuid:Events:0-10|Muon_pt|ak'
    """
    return f"{version}|{tag}|{branch}|{library}"


def branch_of(key: str, tag: str) -> tuple[str, str] | None:
    """(branch, library) of uproot's ``array_cache`` key ``key`` when it is one branch of the
    chunk ``tag`` names (``uuid:tree:start-stop``), else None.

    >>> branch_of("u1:/Events;1:Muon_pt:AsJagged(AsDtype(Bf4(),Lf4()),0):0-10:ak", "u1:Events:0-10")
    ('Muon_pt', 'ak')
    >>> branch_of("u1:/Events;1:Muon_pt:AsDtype(Bf4(),Lf4()):0-20:ak", "u1:Events:0-10") is None
    True
    """
    uuid, _, rest = tag.partition(":")
    tree, _, entries = rest.rpartition(":")
    try:
        head, key_entries, library = key.rsplit(":", 2)
        path, branch, _interpretation = head[len(uuid) + 1:].split(":", 2)
    except ValueError:
        return None
    if not key.startswith(uuid + ":") or key_entries != entries or not branch \
            or path.lstrip("/").rsplit(";", 1)[0] != tree.lstrip("/"):
        return None
    return branch, library


class TaggedView(MutableMapping):
    """What uproot sees as ``array_cache`` while reading one chunk (of one file version)."""

    def __init__(self, cache: BranchCache, tag: str, version: str | None = None, by_chunk: bool = False,
                 serves_back: bool = False):
        self.cache, self.tag, self.version = cache, tag, version
        self.prefix = f"{version}|" if version else ""
        self.by_chunk = by_chunk and bool(version)
        # id(what was stored) -> (it, what the cache keeps), when :meth:`served` is to be asked
        self._stored: dict[int, tuple[Any, Any]] | None = {} if serves_back else None

    def _key(self, key: str) -> str:
        if self.by_chunk:
            parts = branch_of(key, self.tag)
            if parts is not None:
                return chunk_key(self.version, self.tag, *parts)
        return self.prefix + key

    def __getitem__(self, key):
        return self.cache[self._key(key)]

    def get(self, key, default=None):
        return self.cache.get_counted(self._key(key), default, self.tag)

    def branch(self, branch: str, library: str) -> Any:
        """One branch of the chunk from memory or the node's disk (None when absent), as
        uproot stored it through a ``by_chunk`` view: the file is not needed."""
        return self.cache.get_counted(chunk_key(self.version, self.tag, branch, library), None, self.tag)

    def holds(self, branches: list[str], library: str) -> bool:
        """True when every branch of the chunk is in memory or on the node's disk."""
        return all(self.cache.holds(chunk_key(self.version, self.tag, b, library)) for b in branches)

    def __setitem__(self, key, value):
        key = self._key(key)
        fresh = key not in self.cache._data
        kept = self.cache.put(key, value, self.tag)
        if fresh and kept is not None:
            if self._stored is not None:
                self._stored[id(value)] = (value, kept)
            if self.cache.disk is not None and self.prefix:   # read from the file: keep it on the node,
                self.cache.disk.put_later(key, kept)          # written from the cache's copy (no task's)
            if context.current is not None:
                context.current.routing_keys.add(self.tag)

    def served(self, value: Any) -> Any:
        """What the task gets for ``value``, an array uproot read from the file and stored
        through this view, in place of it: a view of what the cache keeps, as a warm read
        would give (``value`` itself when it was not stored here, e.g. already served).
        The view must have been made with ``serves_back``.

        >>> import numpy as np
        >>> v = BranchCache(limit_bytes=100).view("chunk-A", "v1", serves_back=True)
        >>> read = np.arange(3.0)
        >>> v["k"] = read
        >>> mine = v.served(read)
        >>> mine is read, mine.tolist(), mine.flags.owndata
        (False, [0.0, 1.0, 2.0], False)
        """
        entry = self._stored.get(id(value)) if self._stored is not None else None
        return hand_out(entry[1]) if entry is not None and entry[0] is value else value

    def __delitem__(self, key):
        del self.cache[self._key(key)]

    def __iter__(self):
        return iter(self.cache)

    def __len__(self):
        return len(self.cache)
