"""The analyst's API.

    >>> from rhtc.client import remote_map, LocalCluster, make_chunks
"""
from .api import (MapHandle, imap_unordered, last_map, live_workers, remote_map,
                        resolve_config, submit)
from .errors import BrokerFull, BrokerLost, KeyMismatch, MapCancelled, RemoteError
from .local import LocalCluster
from .engine.tasks import TaskResult
from . import dashlink as _dashlink

__all__ = ["remote_map", "submit", "imap_unordered", "live_workers", "last_map", "LocalCluster",
           "MapHandle", "TaskResult", "RemoteError", "MapCancelled", "BrokerLost", "BrokerFull", "KeyMismatch", "resolve_config",
           "make_chunks", "Chunk"]


def _serve_dashboard(config, port: int):
    """``LocalCluster(dashboard=...)``'s server: the operator's dashboard (``ops/``, which
    uses the API), given to the API here, at the package's top, which sees both."""
    from .ops.dashboard import serve
    return serve(config, port)


_dashlink.provide(_serve_dashboard)


def __getattr__(name):  # chunks pull in uproot: import them on first use only
    if name in ("make_chunks", "Chunk"):
        from .data import chunks
        return getattr(chunks, name)
    raise AttributeError(name)
