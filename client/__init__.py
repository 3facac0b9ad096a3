"""The analyst's API.

    >>> from rhtc.client import remote_map, LocalCluster, make_chunks

Each name loads its module on first use, as at the package's top (``rhtc``): a worker
that imports :mod:`client.data` to read a chunk runs this file, and must not load the map
engine with it (``tests/scenarios/test_a_worker_loads_only_what_it_runs.py``).
"""
from __future__ import annotations

import importlib

from . import dashlink as _dashlink

_NAMES = {
    "remote_map": "api", "submit": "api", "imap_unordered": "api", "live_workers": "api",
    "last_map": "api", "resolve_config": "api", "MapHandle": "handle",
    "RemoteError": "errors", "MapCancelled": "errors", "BrokerLost": "errors", "BrokerFull": "errors",
    "KeyMismatch": "errors", "LocalCluster": "local", "TaskResult": "engine.tasks",
    "make_chunks": "chunking", "Chunk": "data.chunks",
}
__all__ = list(_NAMES)


def _serve_dashboard(config, port: int):
    """``LocalCluster(dashboard=...)``'s server: the operator's dashboard (``ops/``, which
    uses the API), given to the API here, at the package's top, which sees both."""
    from .ops.dashboard import serve
    return serve(config, port)


_dashlink.provide(_serve_dashboard)


def __getattr__(name: str):
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'rhtc.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
