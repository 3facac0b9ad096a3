"""The dashboards of this process, as the analyst's API sees them: where one serves a
broker (a handle's link to it), and how a :class:`~client.local.LocalCluster` starts one.

The dashboard itself is an operator's tool (:mod:`client.ops.dashboard`, a tornado app);
the command line in ``ops/`` uses the API (``rhtc workers`` runs a LocalCluster), so the
API's modules never import ``ops/``: a running dashboard registers itself here, and the
function that serves one is given here by the package's top (``rhtc.client``), which sees
both.

    >>> from rhtc.client.api import storage_for
    >>> address_for(storage_for()) is None      # no dashboard serves this broker
    True
"""
from __future__ import annotations

from typing import Any, Callable

from ..broker import feed
from ..broker.wire.config import BrokerConfig
from ..broker.storage import Storage

#: (broker url, namespace) -> the dashboard this process serves for it (it has a ``url``)
_running: dict[tuple[str, str], Any] = {}

#: how this process serves a dashboard: ``server(config, port)`` returns it started
_server: Callable[[BrokerConfig, int], Any] | None = None


def register(config: BrokerConfig, dashboard) -> None:
    """``dashboard`` (with its token in ``dashboard.url``) now serves ``config``'s namespace."""
    _running[(config.url, config.namespace)] = dashboard


def forget(config: BrokerConfig) -> None:
    """The dashboard of ``config``'s namespace in this process stopped."""
    _running.pop((config.url, config.namespace), None)


def address_for(storage: Storage) -> str | None:
    """The address of a dashboard serving ``storage``'s namespace: one in this process
    (with its token), else one announced in the broker (without: a browser that opened the
    dashboard's URL once has the token as a cookie); None when none runs. Never raises."""
    own = _running.get((storage.config.url, storage.config.namespace))
    if own is not None:
        return own.url
    try:
        return feed.dashboard_address(storage)
    except Exception:
        return None


def provide(server: Callable[[BrokerConfig, int], Any]) -> None:
    """Say how this process serves a dashboard: ``server(config, port)`` starts one."""
    global _server
    _server = server


def serve_dashboard(config: BrokerConfig, port: int = 0):
    """Serve the live dashboard of ``config``'s broker in a thread of this process (on
    ``port``; 0: a free one); returns it started (its ``url`` carries the token)."""
    if _server is None:
        raise RuntimeError("no dashboard server was provided to rhtc.client.dashlink (import rhtc.client, "
                           "which provides the operator's dashboard, rhtc.client.ops.dashboard)")
    return _server(config, port)
