"""Shared parts of the reliability and chaos tests: a toxiproxy between workers and Redis,
workers started under chosen names (and restarted under them), and the key-owner check
(waiting for a condition is tests/helpers.py's ``wait_until``).

Nothing is mocked: the proxy is a real toxiproxy server, the workers real
``python -m rhtc.worker`` processes, Redis a real redis-server. Every process started
here is stopped by pid.

Example::

    with Toxiproxy() as tp:
        proxy = tp.proxy("redis", upstream=f"127.0.0.1:{broker.port}")
        pool = NamedWorkers(broker.config, tmp_path)
        pool.start("w1", env=through(proxy, broker.config))
        proxy.add_toxic("timeout", timeout=300)      # replies stop; connections close in 0.3 s
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import redis

from rhtc.bench.chaospool import outliving, proxied_url, sigkill
from rhtc.bench.toxiproxy import Proxy
from rhtc.broker.wire.config import ENV_URL, BrokerConfig
from rhtc.broker.embedded import EmbeddedBroker
from rhtc.broker.storage import Storage
from tests.conftest import ROOT, Workers
from tests.helpers import wait_until

KEYS_PY = ROOT / "broker" / "wire" / "keys.py"


def through(proxy: Proxy, config: BrokerConfig) -> dict[str, str]:
    """Environment that makes a worker reach ``config``'s Redis through ``proxy``
    (same password, key and namespace; only host and port change)."""
    return {ENV_URL: proxied_url(config.url, proxy)}


def read_until(proc: subprocess.Popen, marker: str, timeout: float) -> str:
    """What ``proc`` (text stdout) printed up to and including the line holding ``marker``
    (or until it closed its output, or ``timeout`` s passed)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            break
    return "".join(lines)


class NamedWorkers(Workers):
    """:class:`tests.conftest.Workers` whose processes get the names the test chooses,
    so that a killed worker can be restarted under its name (as HTCondor does)."""

    def start_named(self, name: str, env: dict | None = None, wait: bool = True,
                    extra: tuple = ()) -> str:
        """Start ``python -m rhtc.worker --name name``; a previous process of that name
        (killed by the test) is kept in ``self.old`` so that it is still reaped."""
        if name in self.procs:
            self.old = getattr(self, "old", []) + [self.procs[name]]
        log = open(self.tmp / f"{name}.log", "ab")
        e = {**os.environ, **self.config.env(), **(env or {})}
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "rhtc.worker", "--name", name, *extra],
                                            env=e, stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))
        log.close()
        if wait:
            self.wait_live([name])
        return name

    def kill(self, name: str) -> None:
        """SIGKILL a worker (its main process) and wait for it to be gone; what it had
        started (a task process) is watched by :meth:`outliving`."""
        self.watched = getattr(self, "watched", []) + sigkill(self.procs[name])

    def outliving(self, grace: float = 5.0) -> list[int]:
        """Pids of processes started by SIGKILLed workers still alive ``grace`` seconds on
        (they are killed, by pid)."""
        left, self.watched = outliving(getattr(self, "watched", []), grace), []
        return left

    def stop_all(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL) and anything they started, by pid."""
        procs = [*getattr(self, "old", []), *self.procs.values()]
        children = []
        for p in procs:
            try:
                children += psutil.Process(p.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        for p in getattr(self, "old", []):
            if p.poll() is None:
                p.kill()
            p.wait()
        super().stop_all()
        outliving(children + getattr(self, "watched", []), grace=5)


def live_names(storage: Storage) -> set[str]:
    return {w["name"] for w in storage.pool.live_workers(queue_depths=False)}


# -- Redis refusing our commands ---------------------------------------------------------
class Refusal:
    """Make a real redis-server refuse our commands the way it does in production."""

    def __init__(self, broker: EmbeddedBroker, tmp_path):
        self.broker, self.tmp = broker, tmp_path
        self.r = redis.Redis.from_url(broker.config.url)
        self.side: list = []

    def begin(self, kind: str) -> None:
        getattr(self, f"_begin_{kind.lower()}")()

    def end(self, kind: str) -> None:
        getattr(self, f"_end_{kind.lower()}")()
        for thing in self.side:
            if hasattr(thing, "join"):
                thing.join(15)
            else:
                thing.stop()
        self.r.close()

    #: how each refusal reads once redis-py has parsed it
    SIGNS = {"BUSY": "BUSY", "READONLY": "ReadOnlyError", "MISCONF": "MISCONF", "LOADING": "BusyLoadingError"}

    def probe(self) -> str:
        """The error a plain read or write gets now ('' if none). (A replica that is
        loading answers writes READONLY and reads LOADING.)"""
        try:
            self.r.exists("rhtc-probe")
            self.r.set("rhtc-probe", 1)
            self.r.delete("rhtc-probe")
            return ""
        except redis.RedisError as err:
            return f"{type(err).__name__}: {err}"

    # BUSY: a script that runs until SCRIPT KILL
    def _begin_busy(self):
        self.r.config_set("busy-reply-threshold", 100)
        loop = redis.Redis.from_url(self.broker.config.url)
        t = threading.Thread(target=_swallow, args=(loop.eval, 'while true do end', 0), daemon=True)
        t.start()
        self.side.append(t)

    def _end_busy(self):
        self.r.script_kill()

    # READONLY: the server becomes a replica of a master that does not exist
    def _begin_readonly(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        self.r.execute_command("REPLICAOF", "127.0.0.1", dead)

    def _end_readonly(self):
        self.r.execute_command("REPLICAOF", "NO", "ONE")

    # MISCONF: a background save fails (its directory is gone) and save rules are set
    def _begin_misconf(self):
        self.dir = self.r.config_get("dir")["dir"]
        self.r.config_set("save", "3600 1")
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)
        self.r.bgsave()

    def _end_misconf(self):
        self.r.config_set("save", "")                      # no save rules: writes resume
        os.makedirs(self.dir, mode=0o700, exist_ok=True)    # for the broker's own clean-up

    # LOADING: a full resync from a master with many keys, loaded slowly
    def _begin_loading(self):
        master = EmbeddedBroker().start()
        self.side.append(master)
        m = redis.Redis.from_url(master.config.url)
        m.config_set("repl-diskless-sync-delay", 0)
        pipe = m.pipeline(transaction=False)
        for i in range(50_000):
            pipe.set(f"filler:{i}", "x" * 20)
            if i % 10_000 == 9_999:
                pipe.execute()
        m.close()
        self.r.config_set("masterauth", master.password)
        self.r.config_set("key-load-delay", 40)             # microseconds per key: a few s
        self.r.config_set("loading-process-events-interval-bytes", 1024)
        self.r.execute_command("REPLICAOF", "127.0.0.1", master.port)

    def _end_loading(self):
        wait_until(lambda: self.r.info("persistence")["loading"] == 0, 60, "the load to end")
        self.r.execute_command("REPLICAOF", "NO", "ONE")
        self.r.config_set("key-load-delay", 0)
        self.r.flushall()                                   # the master's filler


def _swallow(fn, *args):
    try:
        fn(*args)
    except redis.RedisError:
        pass


# -- every key has an owner or an expiry ---------------------------------------------
def documented_patterns(keys_py: Path = KEYS_PY) -> list[re.Pattern]:
    """The key patterns of broker/wire/keys.py's table, as regexes with named groups
    ``worker`` and ``map`` where the key belongs to a worker or a map."""
    text = keys_py.read_text()
    out = []
    for literal in re.findall(r"``(\{ns\}[^`]*)``", text):
        rx = re.escape(literal.strip()).replace(re.escape("{ns}"), "")
        rx = rx.replace(re.escape("{worker}"), "(?P<worker>.+)").replace(re.escape("{map}"), "(?P<map>[0-9A-Za-z]+)")
        rx = re.sub(r"\\\{[a-z_]+\\\}", ".+", rx)
        out.append(re.compile(rx + "$"))
    return out


def unowned_keys(storage: Storage) -> list[str]:
    """Keys under the namespace without an expiry that belong to nobody alive: not a
    documented key, or a worker's key while that worker is not registered, or a map's
    key while that map is over."""
    ns = storage.keys.ns
    patterns = documented_patterns()
    registered = {m.decode() for m in storage.r.smembers(storage.keys.workers)}
    bad = []
    for raw in storage.r.scan_iter(match=f"{ns}:*", count=1000):
        key = raw.decode(errors="replace")
        if storage.r.pttl(raw) != -1:          # expires (or just vanished): owned by time
            continue
        rest = key[len(ns):]
        match = next((m for m in (p.match(rest) for p in patterns) if m), None)
        if match is None:
            bad.append(f"{key} (not in broker/wire/keys.py's table, no expiry)")
            continue
        groups = match.groupdict()
        if groups.get("worker") is not None and groups["worker"] not in registered:
            bad.append(f"{key} (worker {groups['worker']} is not registered, no expiry)")
        elif groups.get("map") is not None and not storage.r.exists(storage.keys.map(groups["map"])):
            bad.append(f"{key} (map {groups['map']} is over, no expiry)")
    return sorted(bad)


def dead_map_entries(storage: Storage) -> list[str]:
    """Map ids in the maps registry whose map is over (its key expired or was deleted)."""
    ids = [m.decode() for m in storage.r.zrange(storage.keys.maps, 0, -1)]
    return [m for m in ids if not storage.r.exists(storage.keys.map(m))]


def assert_every_key_owned(storage: Storage, within: float = 15.0) -> None:
    """Every key has an expiry or a live owner, and the maps registry names no map that
    is over, at some moment within ``within`` seconds (reapers run once a second)."""
    def bad() -> list[str]:
        return unowned_keys(storage) + [f"{storage.keys.maps} entry {m} (map is over)"
                                        for m in dead_map_entries(storage)]
    wait_until(lambda: not bad(), within,
               lambda: "every key with an owner or an expiry (not yet:\n  " + "\n  ".join(bad()) + ")", interval=0.5)
