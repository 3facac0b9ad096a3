"""A cluster on this machine: a private broker and N worker processes.

    >>> from rhtc.client import LocalCluster, remote_map
    >>> with LocalCluster(n_workers=2) as cluster:
    ...     remote_map(str.upper, ["a", "b"], broker=cluster, progress=False)
    ['A', 'B']
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from rhtc.processes import stop_processes

from ..broker.wire.config import BrokerConfig, settings
from ..broker.embedded import EmbeddedBroker, die_with_parent
from ..broker.storage import Storage
from .arguments import positive_count
from .dashlink import serve_dashboard

_default: "LocalCluster | None" = None
_default_lock = threading.Lock()
_active: "list[LocalCluster]" = []     # the clusters of the open `with` blocks, innermost last


class _Launcher:
    """A thread that lives as long as the process and starts child processes for the
    threads that may not: a child started with ``die_with_parent`` dies with the *thread*
    that started it (Linux's parent-death signal follows the thread), so a cluster
    started from a thread pool or a notebook callback must not be started there."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn, *args):
        """``fn(*args)`` in the launcher thread (here if this is the main thread)."""
        if threading.current_thread() is threading.main_thread():
            return fn(*args)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="rhtc-launcher", daemon=True)
                self._thread.start()
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((done, fn, args))
        return done.result()

    def _serve(self) -> None:
        while True:
            done, fn, args = self._jobs.get()
            try:
                done.set_result(fn(*args))
            except BaseException as err:   # handed to the caller
                done.set_exception(err)


_launcher = _Launcher()


class LocalCluster:
    """Start an embedded broker (unless ``broker`` is given) and ``n_workers`` workers.

    Args:
        n_workers: worker processes, at least 1 (default: CPU count).
        cache_size: each worker's branch cache cap, e.g. ``"2GB"``.
        disk_cache: a directory for the node's disk tier under the branch cache, shared
            by these workers (and any other on this machine pointing at it): a worker
            started later is warm from it. Off by default.
        disk_cache_size: its cap, e.g. ``"20GB"`` (default 20 GB).
        broker: an existing BrokerConfig to attach the workers to instead.
        log_dir: where worker logs go (default: a temp dir, removed on close).
        dashboard: serve the live dashboard of the broker in a thread of this process
            (``True``: on a free port of 127.0.0.1; an int: on that port); its address is
            ``dashboard_link`` and shows in the repr, as dask's ``Client`` does. Off by
            default (it needs the ``dashboard`` extra; ``rhtc dashboard`` serves any broker).

    Inside ``with LocalCluster(...):`` the calls that are given no ``broker=``
    (``remote_map``, ``submit``, ``imap_unordered``, ``make_chunks(remote=True)``) run on
    this cluster, as dask's ``Client`` becomes the default; after the block the previous
    default comes back.
    """

    def __init__(self, n_workers: int | None = None, *, cache_size: str | None = None,
                 broker: BrokerConfig | None = None, log_dir: str | None = None,
                 start_timeout: float = 120.0, name_prefix: str = "local", dashboard: bool | int = False,
                 disk_cache: str | None = None, disk_cache_size: str | None = None):
        settings()      # an RHTC_* setting out of its range is refused here, before a broker or worker starts
        if n_workers is not None:
            positive_count("n_workers", n_workers, "worker processes to start; None for one per CPU")
        self.n_workers = n_workers or os.cpu_count() or 1
        self.cache_size = cache_size
        self.disk_cache, self.disk_cache_size = disk_cache, disk_cache_size
        self.embedded: EmbeddedBroker | None = None
        self._given = broker
        self.config: BrokerConfig | None = broker
        self.procs: list[subprocess.Popen] = []
        self.log_dir = log_dir
        self._own_log_dir = False          # a temp dir of ours, removed on close
        self.start_timeout = start_timeout
        self.name_prefix = name_prefix
        self._serial = 0
        self._logs = []
        self._want_dashboard = dashboard
        self.dashboard = None

    def start(self) -> "LocalCluster":
        if self.config is None:
            self.embedded = _launcher.run(EmbeddedBroker().start)
            self.config = self.embedded.config
        if self.log_dir is None:
            self.log_dir, self._own_log_dir = tempfile.mkdtemp(prefix="rhtc-workers-"), True
        atexit.register(self.close)
        if self._want_dashboard is not False and self.dashboard is None:
            port = 0 if self._want_dashboard is True else int(self._want_dashboard)
            self.dashboard = serve_dashboard(self.config, port)
        self.add_workers(self.n_workers)
        return self

    @property
    def dashboard_link(self) -> str | None:
        """The address of this cluster's dashboard (with its token), if it serves one."""
        return self.dashboard.url if self.dashboard is not None else None

    def add_workers(self, n: int, wait: bool = True) -> list[subprocess.Popen]:
        """Start ``n`` more worker processes and wait until they heartbeat."""
        positive_count("n", n, "how many more worker processes to start")
        env = dict(os.environ, **self.config.env())
        env.pop("RHTC_CONFIG", None)
        new = []
        for _ in range(n):
            self._serial += 1
            name = f"{self.name_prefix}{self._serial}-{os.getpid()}"
            cmd = [sys.executable, "-m", "rhtc.worker", "--name", name]
            if self.cache_size:
                cmd += ["--cache-size", str(self.cache_size)]
            if self.disk_cache:
                cmd += ["--disk-cache", str(self.disk_cache)]
            if self.disk_cache_size:
                cmd += ["--disk-cache-size", str(self.disk_cache_size)]
            logf = open(os.path.join(self.log_dir, f"{name}.log"), "ab")
            self._logs.append(logf)
            p = _launcher.run(lambda: subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                                       preexec_fn=die_with_parent))
            p.worker_name = name
            new.append(p)
        self.procs += new
        if wait:
            self.wait_for_workers(len(self.alive()))
        return new

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Block until ``n`` workers heartbeat (raises with their logs if they die)."""
        s = Storage(self.config)
        deadline = time.monotonic() + (timeout or self.start_timeout)
        try:
            while True:
                live = {w["name"] for w in s.pool.live_workers(queue_depths=False)}
                mine = [p for p in self.procs if p.worker_name in live]
                if len(mine) >= n:
                    return
                dead = [p for p in self.procs if p.poll() is not None and p.returncode != 0]
                if dead:
                    raise RuntimeError(f"worker {dead[0].worker_name} exited with code "
                                       f"{dead[0].returncode} at start:\n{self.worker_log(dead[0].worker_name)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {len(mine)} of {n} local workers registered within "
                                       f"{timeout or self.start_timeout} s; logs in {self.log_dir}")
                time.sleep(0.05)
        finally:
            s.close()

    def worker_log(self, name: str) -> str:
        try:
            with open(os.path.join(self.log_dir, f"{name}.log")) as fh:
                return fh.read()[-3000:]
        except OSError:
            return ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.alive()]

    def close(self, timeout: float = 10.0) -> None:
        """SIGTERM every worker (they hand back their tasks), then stop the broker."""
        with _default_lock:
            if self in _active:
                _active.remove(self)
        stop_processes(self.procs, grace=timeout)
        self.procs = []
        if self.dashboard is not None:
            self.dashboard.stop()
            self.dashboard = None
        for f in self._logs:
            f.close()
        self._logs = []
        if self._own_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir, self._own_log_dir = None, False
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
            self.config = self._given

    def __enter__(self) -> "LocalCluster":
        self.start()
        with _default_lock:
            _active.append(self)       # the default of the calls inside the block
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        link = f", dashboard {self.dashboard_link}" if self.dashboard is not None else ""
        return f"<LocalCluster {len(self.alive())} workers, broker {self.config!r}{link}>"


def active_cluster() -> LocalCluster | None:
    """The cluster of the innermost open ``with LocalCluster()`` block (any thread's), or None."""
    with _default_lock:
        return _active[-1] if _active else None


def default_cluster() -> LocalCluster:
    """The session's local cluster, started on first use (one worker per CPU). It lives
    as long as the Python process, whichever thread first asked for it."""
    global _default
    with _default_lock:
        if _default is None or _default.config is None:
            _default = LocalCluster().start()
        return _default
