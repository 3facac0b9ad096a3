"""The pool ``bench chaos`` and the fault tests break: a private broker, a toxiproxy in
front of it, and named workers that reach Redis only through the proxy; SIGKILL of a
worker with what it started, and the check that nothing outlives it.
"""
from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import psutil

from .toxiproxy import Proxy, Toxiproxy
from ..broker.wire.config import ENV_URL
from ..broker.embedded import EmbeddedBroker, die_with_parent
from rhtc.processes import stop_processes
from ..broker.storage import Storage

def proxied_url(url: str, proxy: Proxy) -> str:
    """``url`` (same password and database) pointed at ``proxy`` instead of Redis.

    >>> class P: host, port = "127.0.0.1", 7000
    >>> proxied_url("redis://:pw@127.0.0.1:6390/0", P)
    'redis://:pw@127.0.0.1:7000/0'
    """
    parts = urlsplit(url)
    auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{auth}{proxy.host}:{proxy.port}"))


def sigkill(proc: subprocess.Popen) -> list[psutil.Process]:
    """SIGKILL a worker's main process and wait for it; return the processes it had
    started (its task process), which must follow it: see :func:`outliving`.

    >>> p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    >>> sigkill(p), p.returncode
    ([], -9)
    """
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return children


def outliving(children: list[psutil.Process], grace: float = 5.0) -> list[int]:
    """Wait up to ``grace`` seconds for ``children`` of killed workers to exit; kill the
    ones that do not (by pid) and return their pids, for the caller to report."""
    _, alive = psutil.wait_procs(children, timeout=grace)
    for child in alive:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    return [c.pid for c in alive]


class _Launcher:
    """Starts processes from one thread that lives as long as this process (the parent-death
    signal follows the *thread* that started a child; the injector thread ends early)."""

    _jobs: "queue.Queue | None" = None
    _lock = threading.Lock()

    @classmethod
    def popen(cls, *args, **kwargs) -> subprocess.Popen:
        with cls._lock:
            if cls._jobs is None:
                cls._jobs = queue.Queue()
                threading.Thread(target=cls._serve, name="chaos-launcher", daemon=True).start()
        done: queue.Queue = queue.Queue()
        cls._jobs.put((args, kwargs, done))
        ok, value = done.get()
        if not ok:
            raise value
        return value

    @classmethod
    def _serve(cls) -> None:
        while True:
            args, kwargs, done = cls._jobs.get()
            try:
                done.put((True, subprocess.Popen(*args, preexec_fn=die_with_parent, **kwargs)))
            except BaseException as err:        # handed to the caller
                done.put((False, err))


class ChaosPool:
    """A private broker, a toxiproxy in front of it, and named workers that reach Redis
    only through the proxy. Stops everything it started, by pid."""

    def __init__(self, n_workers: int, lease: float, log_dir: str | None = None):
        self.n_workers, self.lease = n_workers, lease
        self.own_dir = log_dir is None           # removed on exit unless `keep_logs`
        self.keep_logs = False
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="rhtc-chaos-")
        self.procs: dict[str, subprocess.Popen] = {}
        self.dead: list[subprocess.Popen] = []
        self.children_of_killed: list[psutil.Process] = []
        self.broker = self.toxi = self.proxy = self.storage = None

    def __enter__(self) -> "ChaosPool":
        try:
            self.broker = EmbeddedBroker().start()
            self.toxi = Toxiproxy().start()
            self.proxy = self.toxi.proxy("redis", upstream=f"127.0.0.1:{self.broker.port}")
            self.storage = Storage(self.broker.config)
            for i in range(self.n_workers):
                self.start(f"chaos-{i}")
            self.wait_live(list(self.procs), timeout=60)
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def config(self):
        return self.broker.config

    def worker_env(self) -> dict[str, str]:
        env = dict(os.environ, **self.config.env(), RHTC_LEASE=str(self.lease))
        env[ENV_URL] = proxied_url(self.config.url, self.proxy)
        env.pop("RHTC_CONFIG", None)
        return env

    def start(self, name: str) -> None:
        """Start (or restart, after a SIGKILL) the worker called ``name``."""
        if name in self.procs:
            self.dead.append(self.procs[name])
        with open(os.path.join(self.log_dir, f"{name}.log"), "ab") as log:
            self.procs[name] = _Launcher.popen(
                [sys.executable, "-m", "rhtc.worker", "--name", name], env=self.worker_env(),
                stdout=log, stderr=subprocess.STDOUT)

    def kill(self, name: str) -> None:
        self.children_of_killed += sigkill(self.procs[name])

    def wait_live(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            missing = set(names) - {w["name"] for w in self.storage.pool.live_workers(queue_depths=False)}
            if not missing:
                return
            if time.monotonic() > deadline:
                states = ", ".join(f"{n} ({'running' if self.procs[n].poll() is None else f'exited {self.procs[n].returncode}'})"
                                   for n in sorted(missing))
                raise TimeoutError(f"chaos workers not live within {timeout:.0f} s: {states} (logs in {self.log_dir})")
            time.sleep(0.05)

    def running(self, label: str) -> set[str]:
        """Names of the workers whose status says they run task ``label``."""
        try:
            return {w["name"] for w in self.storage.pool.live_workers(queue_depths=False)
                    if w.get("task") == label}
        except Exception:
            return set()

    def __exit__(self, *exc) -> None:
        stop_processes([*self.procs.values(), *self.dead])
        if self.storage is not None:
            self.storage.close()
        if self.toxi is not None:
            self.toxi.close()
        if self.broker is not None:
            self.broker.stop()
        if self.own_dir and not self.keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)
