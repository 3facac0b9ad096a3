"""redis-htcondor: a Redis-brokered task queue for NanoAOD analysis.

The one import name of the project. The public API sits here::

    >>> from rhtc import remote_map, make_chunks, LocalCluster
    >>> results = remote_map(lambda x: x * x, [1, 2, 3])

The parts live in subpackages that mirror the repository's folders: ``rhtc.broker``
(Redis, protocol), ``rhtc.worker``, ``rhtc.client``, ``rhtc.condor`` (batch jobs),
``rhtc.bench`` and ``rhtc.examples``. Importing ``rhtc`` is cheap: the API is loaded on
first use, so a worker that imports ``rhtc.worker`` never loads the client.
"""
from __future__ import annotations

from rhtc import _checkout

# In a checkout the subpackages are the top-level folders next to this one (the layout
# the users asked for); an installed wheel has them inside this folder. Only the six
# folder names are mapped (see rhtc/_checkout.py): the repository root is never on
# ``__path__``, so ``pkgutil.walk_packages`` ends; the checkout that holds this file
# also provides the folders, and an installed wheel maps nothing.
_checkout.map_folders(__name__, __path__)  # noqa: F821 -- the package's own __path__

try:
    from importlib.metadata import PackageNotFoundError as _NotFound, version as _version
    __version__ = _version("redis-htcondor")
except _NotFound:  # running from a checkout that was never installed
    __version__ = "0+unknown"

_API = {
    "remote_map": "rhtc.client.api", "submit": "rhtc.client.api",
    "imap_unordered": "rhtc.client.api", "live_workers": "rhtc.client.api",
    "last_map": "rhtc.client.api", "resolve_config": "rhtc.client.api",
    "MapHandle": "rhtc.client.handle", "MapOptions": "rhtc.client.engine.options",
    "LocalCluster": "rhtc.client.local",
    "TaskResult": "rhtc.client.engine.tasks",
    "RemoteError": "rhtc.client.errors", "MapCancelled": "rhtc.client.errors",
    "BrokerLost": "rhtc.client.errors", "BrokerFull": "rhtc.client.errors",
    "KeyMismatch": "rhtc.client.errors", "WorkItemFailed": "rhtc.client.errors",
    "TasksFailedWarning": "rhtc.client.errors",
    "ReduceFailedOnWorker": "rhtc.client.reduce",
    "ChunkFileError": "rhtc.client.data.chunks", "BranchNotFound": "rhtc.client.data.chunks",
    "BrokerNotConfigured": "rhtc.broker.wire.config",
    "make_chunks": "rhtc.client.chunking", "Chunk": "rhtc.client.data.chunks",
    "BrokerConfig": "rhtc.broker.wire.config",
    "RhtcError": "rhtc.errors", "ReadOnlyArrayError": "rhtc.errors",
    "warm": "rhtc.client.warm", "submit_warm": "rhtc.client.warm", "Warming": "rhtc.client.warm",
    "WarmRefused": "rhtc.client.warm", "WarmFailed": "rhtc.client.warm",
    "WarmSummary": "rhtc.client.reports.placed",
    "make_nanoaod": "rhtc.client.synthetic:make_data",  # synthetic NanoAOD files to try things on
}
__all__ = sorted(_API) + ["__version__"]


def __getattr__(name: str):
    module = _API.get(name)
    import importlib
    if name == "coffea":  # rhtc.coffea: the coffea executor and cache strategy (needs [coffea])
        return importlib.import_module("rhtc.coffea")
    if module is None:
        raise AttributeError(f"module 'rhtc' has no attribute {name!r}")
    module, _, attr = module.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
