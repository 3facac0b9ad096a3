"""Fixtures: a real redis-server on a free port, real worker processes.

Nothing here is mocked; every process a test starts is stopped by pid.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rhtc.broker.embedded import EmbeddedBroker
from rhtc.broker.storage import Storage
from rhtc.processes import stop_processes

from tests.samples import NANOAOD, ROOT, needs_nanoaod  # noqa: F401  (re-exported to the tests)
# The real pools, session-wide: defined here once, so every test module shares one HTCondor
# pool and one Slurm cluster (a module importing them itself would start a second pool).
from tests.pools.fixtures import (condor_env_pack, condor_pool, pool_analyst, pool_broker,  # noqa: F401
                                  slurm_pool)

# every map the tests run checks, when it ends, that its task containers agree (client/engine/invariants.py)
os.environ.setdefault("RHTC_CHECK_INVARIANTS", "1")


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch, tmp_path_factory):
    """Tests never pick up the developer's own broker config or environment."""
    for var in ("RHTC_BROKER", "RHTC_KEY", "RHTC_KEY_FILE", "RHTC_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RHTC_CONFIG", str(tmp_path_factory.mktemp("cfg") / "none.json"))


@pytest.fixture
def broker():
    """A private redis-server (random port, password) for one test."""
    b = EmbeddedBroker().start()
    yield b
    b.stop()


@pytest.fixture
def storage(broker):
    s = Storage(broker.config)
    yield s
    s.close()


class Workers:
    """Real `python -m rhtc.worker` processes attached to a broker; stopped by pid."""

    def __init__(self, config, tmp: Path):
        self.config, self.tmp, self.procs, self._n = config, tmp, {}, 0

    def start(self, n: int = 1, wait: bool = True, extra: tuple = (), env: dict | None = None,
              names: list[str] | None = None) -> list[str]:
        """Start ``n`` workers (or one per name in ``names``); a name started again keeps
        the old process under ``<name>#<k>`` in :attr:`procs` (and its log)."""
        wanted = list(names) if names else []
        names = []
        for i in range(len(wanted) or n):
            self._n += 1
            name = wanted[i] if wanted else f"tw{self._n}-{os.getpid()}"
            if name in self.procs:
                self.procs[f"{name}#{self._n}"] = self.procs.pop(name)
            log = open(self.tmp / f"{name}.log", "ab")
            e = dict(os.environ, **self.config.env(), **(env or {}))
            p = subprocess.Popen([sys.executable, "-m", "rhtc.worker", "--name", name, *extra],
                                 env=e, stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))
            log.close()
            self.procs[name] = p
            names.append(name)
        if wait:
            self.wait_live(names)
        return names

    def wait_live(self, names, timeout: float = 30.0) -> None:
        s = Storage(self.config)
        deadline = time.monotonic() + timeout
        try:
            while True:
                live = {w["name"] for w in s.live_workers()}
                if set(names) <= live:
                    return
                for n in names:
                    if self.procs[n].poll() is not None:
                        raise RuntimeError(f"worker {n} died at start:\n{self.log(n)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"workers {names} did not register")
                time.sleep(0.05)
        finally:
            s.close()

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def signal(self, name: str, sig=signal.SIGTERM) -> None:
        self.procs[name].send_signal(sig)

    def stop_all(self) -> None:
        stop_processes(self.procs.values())


@pytest.fixture
def workers(broker, tmp_path):
    w = Workers(broker.config, tmp_path)
    yield w
    w.stop_all()


def map_keys(storage: Storage) -> list[str]:
    """Keys of maps (not of workers) under the namespace."""
    from rhtc.broker.keys import MAP_DATA
    prefixes = tuple(getattr(storage.keys, name)("") for name in ("map", *MAP_DATA))
    return sorted(k.decode() for k in storage.r.scan_iter(match=f"{storage.keys.ns}:*")
                  if k.decode().startswith(prefixes))
