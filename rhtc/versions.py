"""Which versions of the analysis stack this process runs, read without importing it.

A worker publishes these in its heartbeat so that ``rhtc status`` and the client can tell
why a pickle made on one side does not load on the other.

    >>> v = stack_versions()
    >>> v["python"].count(".")
    2
"""
from __future__ import annotations

import functools
import sys
from importlib import metadata

STACK = ("redis-htcondor", "cloudpickle", "numpy", "awkward", "uproot", "coffea", "hist", "lz4")


def stack_versions() -> dict[str, str]:
    """Python's version and each installed package of :data:`STACK` (absent ones left out);
    read once per process (the bench's light workers start hundreds of workers in one)."""
    return dict(_read_versions())


@functools.lru_cache(maxsize=1)
def _read_versions() -> dict[str, str]:
    out = {"python": "%d.%d.%d" % sys.version_info[:3]}
    for name in STACK:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out
