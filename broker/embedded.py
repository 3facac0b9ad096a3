"""A private ``redis-server`` for one session: loopback or a unix socket, random password,
no persistence, stopped when its owner exits (even if the owner is killed).

Example::

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> with EmbeddedBroker() as b:
    ...     b.config.url.startswith("redis://:")
    True
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis

from .wire.config import BrokerConfig, default_namespace, new_key
from rhtc.processes import stop_processes
from rhtc.errors import RhtcError

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (never 6379)."""
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


def find_redis_server() -> str:
    path = shutil.which("redis-server")
    if not path:
        raise FileNotFoundError(
            "redis-server is not on PATH: install it (`apt-get install redis-server`, "
            "`conda install redis`, `brew install redis`) or point at a running broker "
            "with broker='redis://...' / $RHTC_BROKER"
        )
    return path


class PortInUse(RuntimeError, RhtcError):
    """The broker's TCP port is taken; the message is one line saying what to do."""


def _port_in_use(host: str, port: int) -> str:
    return (f"port {port} on {host} is already in use (another broker or program listens there): "
            "pick another --port, or leave --port out for a free one")


def _check_port_free(host: str, port: int) -> None:
    """Raise PortInUse if something listens on ``host:port`` (before starting redis-server,
    which would only say so at the end of its log)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # as redis-server does
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise PortInUse(_port_in_use(host, port)) from None
            raise


class EmbeddedBroker:
    """Start a private redis-server; ``.config`` says how to reach it.

    Args:
        host: interface to bind; loopback by default. Binding anything else is
            refused unless ``allow_remote=True`` (workers on other nodes need it, and then
            the random password is all that protects the port).
        port: TCP port; a free one by default.
        unix_socket: use a unix socket (a path, or True for one in a private temp dir)
            instead of TCP.
        maxmemory: e.g. ``"2gb"``; Redis refuses writes beyond it instead of swapping.
        key: signing key for the session (random by default).
        maxclients: connections Redis accepts (``bench scale``'s thousands of light workers need more).
        appendonly: keep the data in an append-only file, as a production Redis with
            persistence does, so that :meth:`restart` with ``keep_data`` reloads it.
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 unix_socket: str | bool | None = None, maxmemory: str | None = None,
                 key: bytes | None = None, namespace: str | None = None,
                 allow_remote: bool = False, password: str | None = None, appendonly: bool = False,
                 maxclients: int = 4000):
        if host not in ("127.0.0.1", "localhost", "::1") and not allow_remote:
            raise ValueError(f"refusing to bind the broker to {host}: pass allow_remote=True "
                             "(rhtc broker --host ... --allow-remote) to accept workers from other nodes")
        self.host = host
        self.port = port
        self.unix_socket = unix_socket
        self.maxmemory = maxmemory
        self.appendonly = appendonly
        self.maxclients = maxclients
        self.password = password or secrets.token_urlsafe(24)
        self.key = key or new_key()
        self.namespace = namespace or default_namespace()
        self.proc: subprocess.Popen | None = None
        self._dir: str | None = None
        self.config: BrokerConfig | None = None

    def start(self, timeout: float = 10.0) -> "EmbeddedBroker":
        exe = find_redis_server()
        if self.port and not self.unix_socket and not self._dir:
            _check_port_free(self.host, self.port)
        if not self._dir:
            self._dir = tempfile.mkdtemp(prefix="rhtc-broker-")
            os.chmod(self._dir, 0o700)
        args = [exe, "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--dir", self._dir,
                "--requirepass", self.password, "--loglevel", "warning",
                "--logfile", os.path.join(self._dir, "redis.log"), "--daemonize", "no",
                "--maxclients", str(self.maxclients)]
        if self.maxmemory:
            args += ["--maxmemory", str(self.maxmemory), "--maxmemory-policy", "noeviction"]
        if self.unix_socket:
            path = self.unix_socket if isinstance(self.unix_socket, str) else \
                os.path.join(self._dir, "redis.sock")
            args += ["--port", "0", "--unixsocket", path, "--unixsocketperm", "700"]
            url = f"unix://:{self.password}@{path}"
            self.socket_path = path
        else:
            self.port = self.port or free_port(self.host)
            args += ["--bind", self.host, "--port", str(self.port)]
            url = f"redis://:{self.password}@{self.host}:{self.port}/0"
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=die_with_parent)
        self.config = BrokerConfig(url=url, key=self.key, namespace=self.namespace)
        atexit.register(self.stop)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = redis.Redis.from_url(self.config.url, socket_connect_timeout=1)
        try:
            while True:
                if self.proc.poll() is not None:
                    log = self.log_tail()
                    code = self.proc.returncode
                    self.stop()
                    if "Address already in use" in log and not self.unix_socket:
                        raise PortInUse(_port_in_use(self.host, self.port))
                    raise RuntimeError(f"redis-server exited at start (code {code}): {log}")
                try:
                    if client.ping():
                        return
                except redis.RedisError:         # not up yet; or another program answering there
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"redis-server did not answer within {timeout} s")
                time.sleep(0.02)
        finally:
            client.close()

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(os.path.join(self._dir, "redis.log")) as fh:
                return fh.read()[-n:]
        except OSError:
            return ""

    def restart(self, downtime: float = 0.0, keep_data: bool = False) -> None:
        """Stop the server and start it again at the same address with the same password
        (fault tests). By default it is killed and comes back empty; with ``keep_data`` (a
        broker started with ``appendonly=True``) it shuts down cleanly and reloads its data,
        keys whose expiry ran out meanwhile gone. It stays down ``downtime`` seconds.

            >>> with EmbeddedBroker(appendonly=True) as b:
            ...     b.restart(downtime=7.0, keep_data=True)
        """
        if keep_data and not self.appendonly:
            raise ValueError("restart(keep_data=True) needs a broker started with appendonly=True")
        if self.proc is not None:
            if keep_data:
                stop_processes([self.proc], grace=10)      # SIGTERM: Redis writes its file
            else:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if not keep_data:
            self.stop()
        time.sleep(downtime)
        self.start()

    # -- faults, for the fault tests and `bench chaos` ------------------------------------
    def _admin(self) -> redis.Redis:
        return redis.Redis.from_url(self.config.url, socket_connect_timeout=5)

    def kill_connections(self) -> int:
        """Close every client connection but the one doing it (``CLIENT KILL``: what a
        firewall or NAT dropping idle connections does to clients); returns how many.

            >>> with EmbeddedBroker() as b:
            ...     b.kill_connections()
            0
        """
        r = self._admin()
        try:
            me = r.client_id()
            ids = [int(c["id"]) for c in r.client_list() if int(c["id"]) != me]
            for cid in ids:
                r.client_kill_filter(_id=cid)
            return len(ids)
        finally:
            r.close()

    def refuse_writes(self, refuse: bool = True) -> None:
        """Make Redis refuse every write with OOM, as it does at ``maxmemory`` (a limit of
        1 byte), or (``refuse=False``) accept them again under this broker's own limit.

            >>> from rhtc.broker.storage import Storage
            >>> with EmbeddedBroker() as b:
            ...     b.refuse_writes(); Storage(b.config).r.set("x", 1)
            Traceback (most recent call last):
            ...
            rhtc.broker.errors.BrokerOutOfMemory: OOM command not allowed when used memory > 'maxmemory'.
        """
        r = self._admin()
        try:
            r.config_set("maxmemory", 1 if refuse else (self.maxmemory or 0))
        finally:
            r.close()

    def stop(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc], grace=5)
        self.proc = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
