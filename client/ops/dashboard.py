"""``rhtc dashboard``: a live page of the broker (workers, maps, the task stream,
throughput) and ``/metrics`` for Prometheus.

A small tornado app (tornado comes with dask; the page is plain HTML and JavaScript served
from this package, so it works on a node without internet). The page polls ``api/state``
about once a second; the server reads the broker at most twice a second whoever asks
(:class:`~client.ops.dashstate.DashState`), only what the broker already holds, as JSON: it
never sends anything that runs code and never unpickles anything.

By default it binds 127.0.0.1 with a random token in the URL, as Jupyter does (the page
shows arguments and tracebacks). From a laptop: ``ssh -L 8787:127.0.0.1:8787 login-node``
and open the printed URL; behind ``jupyter-server-proxy`` every link is relative. The token
stays in the process that serves the page (and in the browser's cookie once it opened the
URL): the broker, which anyone with the Redis password reads, holds the address without
it, and the access log prints ``token=***``.

    >>> from rhtc import LocalCluster
    >>> with LocalCluster(2) as c, Dashboard(c.config) as d:
    ...     print(d.url)
    http://127.0.0.1:.../?token=...
"""
from __future__ import annotations

import asyncio
import hmac
import importlib.util
import json
import logging
import re
import secrets
import threading
from pathlib import Path

from ...broker import feed
from ...broker.wire.config import BrokerConfig
from ...broker.storage import Storage
from .. import dashlink
from ..dashlink import address_for  # noqa: F401 (where a dashboard serves a broker: asked here too)
from .dashstate import DashState

log = logging.getLogger("rhtc.client")

STATIC = Path(__file__).with_name("static")
COOKIE = "rhtc_dashboard_token"
_TOKEN_IN_URL = re.compile(r"(token=)[^&\s]*")
#: how often a running dashboard renews its address in the broker (s); it lives 3x that
ANNOUNCE_SECONDS = 10


def _log_request(handler) -> None:
    """tornado's access log line, with any token in the URL replaced by ``***``."""
    from tornado.log import access_log
    status = handler.get_status()
    say = access_log.info if status < 400 else (access_log.warning if status < 500 else access_log.error)
    req = handler.request
    say("%d %s %s (%s) %.2fms", status, req.method, _TOKEN_IN_URL.sub(r"\1***", req.uri), req.remote_ip,
        1000.0 * req.request_time())


def _app(state: DashState, token: str):
    import tornado.web

    class Base(tornado.web.RequestHandler):
        def prepare(self):
            given = (self.get_query_argument("token", None) or self.get_cookie(COOKIE)
                     or self.request.headers.get("Authorization", "").partition(" ")[2])
            if not given or not hmac.compare_digest(given.encode(), token.encode()):
                self.set_status(403)
                self.set_header("Content-Type", "text/plain; charset=utf-8")
                self.finish("403: wrong or missing token. Open the URL that `rhtc dashboard` printed "
                            "(it ends in ?token=...; the broker keeps the address without it), or pass the token as ?token= or 'Authorization: "
                            "Bearer <token>' (Prometheus: authorization.credentials).\n")
                return
            if self.get_query_argument("token", None):
                self.set_cookie(COOKIE, token, httponly=True, samesite="Strict")

        def set_default_headers(self):
            self.set_header("Cache-Control", "no-store")
            self.set_header("X-Content-Type-Options", "nosniff")
            self.set_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; "
                            "connect-src 'self'; frame-ancestors 'self'")

    class Page(Base):
        def get(self):
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.write((STATIC / "dashboard.html").read_bytes())

    class Asset(Base):
        TYPES = {".js": "application/javascript", ".css": "text/css"}

        def get(self, name):
            path = STATIC / name
            if path.suffix not in self.TYPES or not path.is_file():
                raise tornado.web.HTTPError(404)
            self.set_header("Content-Type", self.TYPES[path.suffix] + "; charset=utf-8")
            self.write(path.read_bytes())

    class State(Base):
        def get(self):
            since = int(self.get_query_argument("since", "0") or 0)
            snap = state.snapshot()
            body = dict(snap, tasks=state.tasks_since(since))
            self.set_header("Content-Type", "application/json")
            self.write(json.dumps(body, default=str))

    class Metrics(Base):
        def get(self):
            try:
                from .dashmetrics import CONTENT_TYPE, render
            except ImportError as err:
                self.set_status(501)
                self.finish(f"/metrics needs prometheus-client ({err}): pip install 'redis-htcondor[dashboard]'\n")
                return
            self.set_header("Content-Type", CONTENT_TYPE)
            self.write(render(state))

    return tornado.web.Application([
        (r"/", Page), (r"/static/([a-z]+\.(?:js|css))", Asset), (r"/api/state", State), (r"/metrics", Metrics),
    ], log_function=_log_request)


class Dashboard:
    """The dashboard server of one broker namespace, in a thread of this process.

    Args:
        broker: the broker's :class:`BrokerConfig` (or anything with a ``config``).
        host: interface to listen on (127.0.0.1: reach it through an SSH tunnel).
        port: TCP port (0: a free one).
        token: the token the URL carries (default: a new random one).
    """

    def __init__(self, broker, host: str = "127.0.0.1", port: int = 0, token: str | None = None):
        self.config: BrokerConfig = getattr(broker, "config", broker)
        self.host, self.port = host, port
        self.token = token or secrets.token_urlsafe(24)
        self.storage = Storage(self.config, socket_timeout=10)
        self.state = DashState(self.storage)
        self._thread: threading.Thread | None = None
        self._loop = None
        self._error: BaseException | None = None

    @property
    def address(self) -> str:
        """The page's address without the token: what the broker holds for other processes."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"http://{host}:{self.port}/"

    @property
    def url(self) -> str:
        """The address with the token: only this process knows it (print it, open it)."""
        return f"{self.address}?token={self.token}"

    def start(self) -> "Dashboard":
        """Serve in a daemon thread; returns once it listens."""
        if importlib.util.find_spec("tornado") is None:
            raise ImportError("the dashboard needs tornado, which is not installed: "
                              "pip install 'redis-htcondor[dashboard]'")
        self.storage.ping()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), name="rhtc-dashboard", daemon=True)
        self._thread.start()
        started.wait(30)
        if self._error is not None:
            raise self._error
        dashlink.register(self.config, self)
        return self

    def _serve(self, started: threading.Event) -> None:
        from tornado.httpserver import HTTPServer
        from tornado.ioloop import IOLoop, PeriodicCallback
        from tornado.netutil import bind_sockets
        asyncio.set_event_loop(asyncio.new_event_loop())
        try:
            sockets = bind_sockets(self.port, address=self.host)
            self.port = sockets[0].getsockname()[1]
            server = HTTPServer(_app(self.state, self.token))
            server.add_sockets(sockets)
            self._loop = IOLoop.current()
            announce = PeriodicCallback(self._announce, ANNOUNCE_SECONDS * 1000)
            self._announce()
            announce.start()
        except BaseException as err:           # e.g. the port is taken: said by start()
            self._error = OSError(f"the dashboard cannot listen on {self.host}:{self.port}: {err}. "
                                  "Pick another --port (or 0 for a free one)")
            started.set()
            return
        started.set()
        self._loop.start()
        announce.stop()
        server.stop()
        self._loop.close(all_fds=True)

    def _announce(self) -> None:
        try:
            feed.announce_dashboard(self.storage, self.address, ttl=3 * ANNOUNCE_SECONDS)
        except Exception as err:                # the broker is away: the page says so
            log.debug("dashboard: could not announce its address: %s", err)

    def stop(self) -> None:
        """Stop serving and remove the address from the broker."""
        dashlink.forget(self.config)
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.add_callback(self._loop.stop)
            self._thread.join(10)
        try:
            feed.withdraw_dashboard(self.storage, self.address)
        except Exception:
            pass
        self.storage.close()

    def __enter__(self) -> "Dashboard":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Dashboard {self.address} of {self.config!r}>"


def serve(config: BrokerConfig, port: int = 0) -> Dashboard:
    """Serve the dashboard of ``config``'s broker on 127.0.0.1:``port`` in a thread of this
    process (what ``LocalCluster(dashboard=...)`` starts, through :mod:`client.dashlink`)."""
    return Dashboard(config, port=port).start()
