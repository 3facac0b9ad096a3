"""A chunk served from the worker's caches without opening its file.

A worker that replaced another on the node (walltime, eviction, the next morning's pool)
finds the chunk's branches in the node's disk tier, but opening the file to let uproot
look them up costs more than the lookups: uproot parses the tree's metadata (a thousand
branches in NanoAOD) before it asks the cache for anything. When the file is not open in
this process and every branch the call asks for is in the worker's caches, keyed by chunk
and branch (``BranchCache.view(..., by_chunk=True)``), :func:`cached_arrays` serves them
without opening the file, as uproot would have returned them.

It is never stale: the keys carry the version of the file (:mod:`client.data.freshness`), and
the version is taken from the local file as it is now (``fstat`` of a fresh descriptor
and its first 100 bytes: microseconds, no metadata). A file rewritten since (even under
the same path and UUID) has another version: nothing is found, the file is opened and the
chunk read, or refused as ``changed`` when its UUID is another one. ``root://`` files
take the ordinary path (their version needs the open file).

Only plain calls are served (branch names, ``how`` = dict, tuple, list or None, ``library``
"ak" or "np"); anything else reads through uproot as before.

    >>> plain_call(["Muon_pt"], {"how": dict}), plain_call(["Muon_pt"], {"cut": "x > 1"})
    ((<class 'dict'>, 'ak'), None)
"""
from __future__ import annotations

from typing import Any, Sequence

from . import freshness
from .openfiles import is_open

#: the ``library`` arguments served, and uproot's name for each (in its cache keys)
LIBRARIES = {"ak": "ak", "awkward": "ak", "np": "np", "numpy": "np"}
HOWS = (dict, tuple, list, None)


def plain_call(branches: Sequence[str], kwargs: dict) -> tuple[Any, str] | None:
    """(how, library) of a ``Chunk.arrays`` call that :func:`cached_arrays` may serve, else None."""
    if set(kwargs) - {"how", "library"} or not branches or len(set(branches)) != len(branches):
        return None
    how, library = kwargs.get("how"), LIBRARIES.get(kwargs.get("library", "ak"))
    if library is None or not any(how is h for h in HOWS) or not all(isinstance(b, str) for b in branches):
        return None
    return how, library


def cached_arrays(chunk, branches: Sequence[str], ctx, kwargs: dict) -> Any | None:
    """What ``chunk.arrays(branches, **kwargs)`` returns, from the worker's caches without
    opening the file; None when it cannot (not a worker, not a plain call, the file is
    open here or not local, a branch not cached): then the caller reads it through uproot."""
    call = plain_call(branches, kwargs)
    cache = getattr(ctx, "cache", None)
    if call is None or cache is None or "://" in chunk.file or is_open(chunk.file, chunk.tree):
        return None
    try:
        version = freshness.local_stamp(chunk.file).version
    except OSError:
        return None                            # the ordinary path says what is wrong
    view = cache.view(chunk.routing_key, version, by_chunk=True)
    how, library = call
    if not view.holds(list(branches), library):
        return None
    arrays = {}
    for b in branches:
        value = view.branch(b, library)
        if value is None:                      # evicted meanwhile, or a corrupt entry dropped
            return None
        arrays[b] = value
    return group(arrays, how, library)


def group(arrays: dict, how, library: str) -> Any:
    """``arrays`` (branch -> array, in the call's order) grouped as uproot's ``library``
    groups them for ``how``.

    >>> group({"a": 1, "b": 2}, tuple, "np"), group({"a": 1}, None, "np")
    ((1, 2), {'a': 1})
    """
    if how is tuple:
        return tuple(arrays.values())
    if how is list:
        return list(arrays.values())
    if how is None and library == "ak":
        import awkward
        return awkward.Array(arrays)
    return dict(arrays)
