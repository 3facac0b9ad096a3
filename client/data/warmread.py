"""The task of a warm map (``rhtc warm``, :mod:`client.warm`): read a chunk's branches
through the worker's caches and keep nothing else.

A :class:`WarmChunk` is the chunk as a run read it (file, tree, entry range, file UUID),
with the branches its tasks read: it routes, weighs and reads as that chunk does, so the
warm map places it where a cold run of the analysis would, and the entries it leaves in
the worker's memory and the node's disk tier are the ones that run reads (the caches key
them by chunk, branch and uproot ``library``, not by the call that read them).

    >>> chunk = WarmChunk("../shared/data/nanoaod/nano_dy.root", "Events", 0, 20, "uuid",
    ...                   (("Muon_pt", "ak"), ("nMuon", "np")))
    >>> chunk.routing_key, chunk.num_entries, by_library(chunk.branches)
    ('uuid:Events:0-20', 20, {'ak': ['Muon_pt'], 'np': ['nMuon']})
"""
from __future__ import annotations

import dataclasses

from .chunks import Chunk


@dataclasses.dataclass(frozen=True, repr=False)
class WarmChunk(Chunk):
    """A chunk and the branches to read of it, as ((branch, uproot library), ...)."""

    branches: tuple = ()

    def __repr__(self) -> str:
        return f"{Chunk.__repr__(self)[:-1]}, {len(self.branches)} branches)"


def by_library(branches) -> dict[str, list[str]]:
    """The branch names grouped by the ``library`` they were read as (first-read order)."""
    out: dict[str, list[str]] = {}
    for name, library in branches:
        out.setdefault(library, []).append(name)
    return out


def read_branches(chunk: WarmChunk) -> int:
    """Read ``chunk``'s branches (on a worker: into its caches, where a later task finds
    them); returns how many. A file that is gone or changed fails as reading it in the
    analysis would (:class:`~client.errors.ChunkFileError` naming the file)."""
    for library, names in by_library(chunk.branches).items():
        chunk.arrays(names, library=library, how=dict)
    return len(chunk.branches)
