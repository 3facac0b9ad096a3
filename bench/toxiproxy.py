"""A real fault-injecting TCP proxy between two of our parts: Shopify's toxiproxy.

The chaos tests put it between workers and Redis, and ``bench dimuon --xrootd`` and ``bench
affinity`` between workers and the xrootd server (this kernel has no netem). Toxiproxy's toxics cover what
a real network does to us: ``latency`` (with jitter), ``timeout`` (data stops, the
connection stays open), ``reset_peer`` (TCP RST), ``slicer`` and ``limit_data`` (a reply
cut after N bytes), ``bandwidth``.

The server is one Go binary. :func:`toxiproxy_binary` finds ``toxiproxy-server`` on PATH,
else builds it once with ``go install`` into rhtc's cache (about 30 s; ``$RHTC_CACHE``
points that cache elsewhere), and says what to do when Go is missing. Processes that need
it at the same time (parallel test workers, two benchmarks) build it once: the build holds
a file lock, and the binary appears under its name only when it is whole.

Example::

    (not run by the tests: it builds toxiproxy; the fault tests run it)
    >>> with Toxiproxy() as tp:                                        # doctest: +SKIP
    ...     redis_proxy = tp.proxy("redis", upstream="127.0.0.1:6390")
    ...     redis_proxy.add_toxic("latency", latency=20)      # +20 ms on every reply
    ...     redis_proxy.cut()                                  # drop every connection
    ...     redis_proxy.restore()
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..broker.wire.config import cache_dir
from rhtc.processes import stop_processes
from rhtc.errors import RhtcError

TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
TOXIPROXY_VERSION = "v2.5.0"


class ToxiproxyUnavailable(RuntimeError, RhtcError):
    """The toxiproxy server could not be found, built or started; the message says why."""


def toxiproxy_binary() -> Path:
    """Path of a toxiproxy server binary, built with ``go install`` on first use."""
    on_path = shutil.which("toxiproxy-server")
    if on_path:
        return Path(on_path)
    tools = cache_dir() / "tools" / f"toxiproxy-{TOXIPROXY_VERSION}"
    binary = tools / "bin" / "server"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise ToxiproxyUnavailable(
            "toxiproxy-server is not on PATH and there is no Go toolchain to build it: install Go "
            f"(https://go.dev/dl) or put a toxiproxy-server binary on PATH ({TOXIPROXY_MODULE})")
    tools.mkdir(parents=True, exist_ok=True)
    with open(tools / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # another process building it: wait, then use its binary
        if binary.is_file():
            return binary
        return _build(go, tools, binary)


def _build(go: str, tools: Path, binary: Path) -> Path:
    """``go install`` into a directory of its own, then rename the binary into place (whole)."""
    building = tools / f"bin.building-{os.getpid()}"
    env = {**os.environ, "GOBIN": str(building), "GOPATH": str(tools / "gopath"),
           "GOCACHE": str(tools / "gocache"), "GOFLAGS": "-modcacherw"}
    try:
        proc = subprocess.run([go, "install", f"{TOXIPROXY_MODULE}@{TOXIPROXY_VERSION}"], env=env,
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not (building / "server").is_file():
            raise ToxiproxyUnavailable(f"go install {TOXIPROXY_MODULE}@{TOXIPROXY_VERSION} failed "
                                       f"(exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
        binary.parent.mkdir(exist_ok=True)
        os.replace(building / "server", binary)
    finally:
        for path in (building, tools / "gocache", tools / "gopath"):
            shutil.rmtree(path, ignore_errors=True)
    return binary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Proxy:
    """One listening port of the toxiproxy server that forwards to ``upstream``."""

    def __init__(self, server: "Toxiproxy", name: str, listen: str, upstream: str):
        self.server, self.name, self.listen, self.upstream = server, name, listen, upstream
        self.host, port = listen.rsplit(":", 1)
        self.port = int(port)
        self._toxics = 0

    def add_toxic(self, kind: str, *, stream: str = "downstream", toxicity: float = 1.0,
                  name: str | None = None, **attributes) -> str:
        """Add a toxic (``latency``, ``timeout``, ``reset_peer``, ``slicer``, ``limit_data``,
        ``bandwidth``...) with its attributes; returns its name for :meth:`remove_toxic`.

        ``stream="downstream"`` acts on replies (upstream to client), ``"upstream"`` on requests.
        """
        self._toxics += 1
        name = name or f"{kind}_{stream}_{self._toxics}"
        self.server._call("POST", f"/proxies/{self.name}/toxics",
                          {"name": name, "type": kind, "stream": stream, "toxicity": toxicity,
                           "attributes": attributes})
        return name

    def remove_toxic(self, name: str) -> None:
        self.server._call("DELETE", f"/proxies/{self.name}/toxics/{name}")

    def toxics(self) -> list[dict]:
        """The toxics in place, as the server lists them (name, type, stream, attributes...)."""
        return self.server._call("GET", f"/proxies/{self.name}/toxics") or []

    def clear(self) -> None:
        """Remove every toxic."""
        for toxic in self.toxics():
            self.remove_toxic(toxic["name"])

    def bytes_sent(self, direction: str = "downstream") -> int:
        """Bytes this proxy has passed on since it was made: ``"downstream"`` to its clients
        (the replies), ``"upstream"`` to its upstream. Read from the server's metrics, which a
        server started with ``Toxiproxy(metrics=True)`` keeps."""
        if not self.server.metrics:
            raise ToxiproxyUnavailable(f"proxy {self.name}: the toxiproxy server counts bytes only when "
                                       "started with Toxiproxy(metrics=True) (its -proxy-metrics flag)")
        text = self.server._call("GET", "/metrics") or ""
        labels = (f'direction="{direction}"', f'proxy="{self.name}"')
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in str(text).splitlines()
                   if line.startswith("toxiproxy_proxy_sent_bytes_total{") and all(x in line for x in labels))

    def cut(self) -> None:
        """Close every connection through the proxy and refuse new ones (until :meth:`restore`)."""
        self.server._call("POST", f"/proxies/{self.name}", {"enabled": False})

    def restore(self) -> None:
        """Accept connections again."""
        self.server._call("POST", f"/proxies/{self.name}", {"enabled": True})

    @property
    def url_hostport(self) -> str:
        return f"{self.host}:{self.port}"


class Toxiproxy:
    """A toxiproxy server on a free loopback port, stopped (by its pid) on close. With
    ``metrics=True`` it counts the bytes through each proxy (:meth:`Proxy.bytes_sent`;
    toxiproxy 2.5 or later)."""

    def __init__(self, host: str = "127.0.0.1", start_timeout: float = 20.0, metrics: bool = False):
        self.host, self.start_timeout, self.metrics = host, start_timeout, metrics
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Toxiproxy":
        binary = toxiproxy_binary()
        self.port = free_port(self.host)
        self.proc = subprocess.Popen([str(binary), "-host", self.host, "-port", str(self.port),
                                      *(["-proxy-metrics"] if self.metrics else [])],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")[-800:] if self.proc.stderr else ""
                raise ToxiproxyUnavailable(f"{binary} exited with {self.proc.returncode}: {err}")
            try:
                self._call("GET", "/version")
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.05)
        self.close()
        raise ToxiproxyUnavailable(f"{binary} did not answer on {self.host}:{self.port} "
                                   f"within {self.start_timeout:.0f} s")

    def proxy(self, name: str, upstream: str, listen_port: int | None = None) -> Proxy:
        """A new proxy listening on a free port (or ``listen_port``) that forwards to ``upstream``."""
        listen = f"{self.host}:{listen_port or free_port(self.host)}"
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream,
                                        "enabled": True})
        return Proxy(self, name, listen, upstream)

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://{self.host}:{self.port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def close(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc])
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def __enter__(self) -> "Toxiproxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
