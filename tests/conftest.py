"""Fixtures: a real redis-server on a free port, real worker processes; and the tiers.

Nothing here is mocked; every process a test starts is stopped by pid.

Two tiers (the Makefile's targets; tests/README.md says where a test goes):

* ``make test-quick`` (``pytest -m quick``): **the tests under tests/unit/**, which need no
  process, and a few end-to-end smoke tests marked ``@pytest.mark.quick`` by hand. The tier
  is the folder (:func:`pytest_collection_modifyitems`): a unit test that requests one of
  :data:`PROCESS_FIXTURES` is refused at collection, and one that starts a redis-server or a
  worker itself fails (:func:`_unit_guard`); a unit test that builds data for seconds is
  marked ``heavy`` and runs in the full suite only. Outside tests/unit/ (and tests/docs/), a
  test that requests none of those fixtures is refused too: move it to tests/unit/, or,
  when it starts processes itself, mark it ``heavy``.
* ``make test`` (``pytest -q``, what CI runs): everything, the pools and chaos included.

``make test`` runs in four pytest-xdist workers (pyproject's ``addopts``), ``make test-quick`` in
one per core (``-n 0``: in this process alone); the tests that must share a worker (the pools, a slow module fixture) are grouped by
:mod:`tests.parallel`.

Workers are stopped at teardown without waiting out their idle poll (:meth:`Workers.stop_all`):
that wait, a second per test, was most of what a test's own broker and workers cost.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import redis

from rhtc.broker.embedded import EmbeddedBroker
from rhtc.broker.storage import Storage
from rhtc.processes import stop_processes

from tests.samples import NANOAOD, ROOT, needs_nanoaod  # noqa: F401  (re-exported to the tests)
from tests.parallel import POOL_FIXTURE_GROUPS, group_of, pytest_xdist_make_scheduler  # noqa: F401  (the hook)
# The real pools, session-wide: defined here once, so every test module shares one HTCondor
# pool and one Slurm cluster (a module importing them itself would start a second pool).
from tests.pools.fixtures import (condor_env_pack, condor_pool, pool_analyst, pool_broker,  # noqa: F401
                                  slurm_pool)

# every map the tests run checks, when it ends, that its task containers agree (client/engine/invariants.py)
os.environ.setdefault("RHTC_CHECK_INVARIANTS", "1")

# -- the tiers ------------------------------------------------------------------------------
#: fixtures that start a redis-server, worker processes, a pool or another server: a test
#: that requests one (itself or through another fixture) runs in the full suite only
PROCESS_FIXTURES = frozenset({
    "broker", "storage", "workers",                                   # here
    "condor_pool", "slurm_pool", "pool_broker", "condor_env_pack", "pool_analyst",   # tests/pools
    "aof_broker", "toxiproxy", "pool", "served", "server", "xrootd_server", "chrome",
})
#: markers that keep a test out of the quick tier (pytest.ini_options.markers says what each means)
FULL_ONLY = ("slow", "pool", "heavy")
_UNIT = pytest.StashKey[bool]()


#: where the tests that need no process live (the quick tier, by location), and the folders
#: whose tests are exempt from the location rule (the documentation's examples)
UNIT, FREE = "tests/unit/", ("tests/docs/",)


def _where(item) -> str:
    """The test's path from the repository root, with forward slashes (``tests/unit/...``)."""
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)        # before ``-m`` deselects: the marker must be there by then
def pytest_collection_modifyitems(config, items):
    """The tier is the folder: every test under tests/unit/ is in the quick tier (unless it is
    ``heavy``), and needs no process; a test elsewhere needs one. Refuse a test that needs a
    pool outside its group (tests/parallel.py)."""
    wrong = []
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        where = _where(item)
        for pool in POOL_FIXTURE_GROUPS.keys() & set(fixtures):
            if group_of(item.nodeid) != POOL_FIXTURE_GROUPS[pool]:      # the machine's one pool of its kind:
                raise pytest.UsageError(                                # one xdist worker holds it
                    f"{item.nodeid} uses {pool}: put its module in POOL_MODULES (or the test in TEST_GROUPS) "
                    f"of tests/parallel.py with the group {POOL_FIXTURE_GROUPS[pool]!r}, so that it runs in "
                    "the worker that holds it")
        needs = sorted(PROCESS_FIXTURES.intersection(fixtures))
        if where.startswith(UNIT):
            if needs or item.get_closest_marker("slow") or item.get_closest_marker("pool"):
                wrong.append(f"{item.nodeid} is under {UNIT} but needs "
                             f"{', '.join(needs) or 'the slow or pool tier'}: move it to tests/integration/ "
                             "(a real redis-server) or tests/scenarios/ (workers, pools, servers)")
            elif not item.get_closest_marker("heavy"):
                item.add_marker(pytest.mark.quick)
                item.stash[_UNIT] = True
        elif not needs and not where.startswith(FREE) and not any(
                item.get_closest_marker(m) for m in (*FULL_ONLY, "quick")):
            wrong.append(f"{item.nodeid} needs no broker, worker, pool or server fixture: move it to "
                         f"{UNIT}<folder>/test_<module>.py, or, if it starts processes itself, mark it "
                         "@pytest.mark.heavy")
    if wrong:
        raise pytest.UsageError("tests in the wrong tier (tests/README.md):\n  " + "\n  ".join(wrong))


class QuickTierViolation(RuntimeError):
    """A test under tests/unit/ started a redis-server or a worker itself."""


def _heavy_process(args) -> str | None:
    """What a command line starts, if it is what a unit test must not start."""
    argv = [os.fsdecode(a) for a in ([args] if isinstance(args, (str, bytes, os.PathLike)) else args)]
    if argv and argv[0].strip() and os.path.basename(argv[0].split()[0]) == "redis-server":
        return "a redis-server"
    if any(a == "-m" and b in ("rhtc.worker", "rhtc.worker.cli") for a, b in zip(argv, argv[1:])):
        return "a worker process"
    return None


@pytest.fixture(autouse=True)
def _unit_guard(request, monkeypatch):
    """A test under tests/unit/ (the quick tier) that starts a redis-server or a worker itself
    fails at once, naming the fix, in every run."""
    if request.node.stash.get(_UNIT, False):
        execute_child = subprocess.Popen._execute_child

        def guarded(self, args, *rest, **kw):
            what = _heavy_process(args)
            if what:
                raise QuickTierViolation(
                    f"{request.node.nodeid} is a unit test (tests/unit/: the quick tier), but it starts "
                    f"{what}: move it to tests/integration/ or tests/scenarios/ and use the broker/workers "
                    "fixtures (tests/README.md)")
            return execute_child(self, args, *rest, **kw)
        monkeypatch.setattr(subprocess.Popen, "_execute_child", guarded)
    yield


_last_test = ["(none yet)"]


def _ctrl_c_state() -> str | None:
    """What keeps Ctrl-C from raising KeyboardInterrupt in this thread: another SIGINT
    handler, or SIGINT blocked; None when it would raise."""
    handler = signal.getsignal(signal.SIGINT)
    if handler is not signal.default_int_handler:
        return f"SIGINT's handler is {handler!r}"
    if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return "SIGINT is blocked (pthread_sigmask)"
    return None


def _restore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def pytest_configure(config):
    """The tests press Ctrl-C as an analyst at a terminal does, so SIGINT gets Python's own
    handler in every test process. A shell without job control starts a background command
    (``cmd &``: CI's runner, nohup) with SIGINT ignored, and Python then leaves it ignored:
    in CI every xdist worker started so, and a Ctrl-C test passed only in a worker where an
    earlier test (nbclient's event loop) happened to put Python's handler back."""
    _restore_ctrl_c()


_prebuild: list[threading.Thread] = []


def pytest_sessionstart(session):
    """The full suite's main process (the xdist controller) builds the toxiproxy server in
    the background at once, on a machine that has none yet (CI: from empty caches): the
    first test to need it used to build it inside its own timeout (``go install``, about a
    minute on a busy machine: a 60 s test timed out in CI). A test that needs it before the
    build is done waits for it (bench/toxiproxy.py's build lock). The quick tier needs none."""
    paths = [a for a in session.config.invocation_params.args if not str(a).startswith("-") and os.path.exists(a)]
    whole = all(Path(a).resolve() == ROOT / "tests" for a in paths)     # (not one module run by hand)
    if hasattr(session.config, "workerinput") or os.environ.get("RHTC_TEST_TIER") == "quick" or not whole:
        return
    from rhtc.bench import toxiproxy

    def build():
        try:
            toxiproxy.toxiproxy_binary()
        except Exception:            # (the tests that need it say why, with the same error)
            pass
    _prebuild.append(threading.Thread(target=build, name="toxiproxy build", daemon=True))
    _prebuild[0].start()


def pytest_unconfigure(config):
    for thread in _prebuild:         # (never leave the build running: its go process would outlive us)
        thread.join()


@pytest.fixture(autouse=True)
def _ctrl_c_stays_python_s(request):
    """Ctrl-C must raise KeyboardInterrupt in the analyst's process whatever ran before: a test
    (or a fixture's teardown) that leaves SIGINT handled otherwise, or blocked, fails naming
    itself, and Ctrl-C is put back (two tests that press Ctrl-C failed in CI, in one worker)."""
    before = _ctrl_c_state()
    if before:
        _restore_ctrl_c()
        pytest.fail(f"{before} when {request.node.nodeid} started: the test before it in this process "
                    f"({_last_test[0]}) or a fixture's teardown left it so", pytrace=False)
    yield
    _last_test[0] = request.node.nodeid
    after = _ctrl_c_state()
    if after:
        _restore_ctrl_c()
        pytest.fail(f"{request.node.nodeid} left it so: {after}; Ctrl-C would no longer raise "
                    "KeyboardInterrupt in this process", pytrace=False)


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
    """Real `python -m rhtc.worker` processes attached to a broker; stopped by pid.

    They run the tests' small functions, so they import no analysis stack ahead of them
    (``RHTC_PRELOAD=none``, unless the test's environment or ``env`` names one): the
    preload's imports were ~0.3 s of CPU per worker, some 400 times a run. The preload
    itself is tested where it is the subject (``scenarios/test_preload_before_the_first_task.py``),
    and the workers of ``LocalCluster``, the pools and the benches keep it on."""

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
            e.setdefault("RHTC_PRELOAD", "none")      # (see the class's docstring)
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
                live = {w["name"] for w in s.pool.live_workers()}
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

    def stop_all(self, grace: float = 10.0) -> None:
        """SIGTERM every worker (by pid), wait up to ``grace`` s, SIGKILL what is left.

        An idle worker ends its blocking pop on SIGTERM (it unblocks its own connection);
        one that could not (a frozen one, an unblock lost) notices at the pop's timeout:
        meanwhile its blocked connections are unblocked here (``CLIENT UNBLOCK ... TIMEOUT``,
        as if the pop had timed out), so that it stops in a tenth of that. Only the workers'
        own connections are unblocked (found by pid), never the test's."""
        procs = list(self.procs.values())
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                p.send_signal(signal.SIGCONT)           # a frozen worker acts on its SIGTERM
                p.terminate()
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        if alive:
            self._unblock_until_gone(alive, deadline)
        stop_processes(procs, grace=max(0.0, deadline - time.monotonic()))

    def _unblock_until_gone(self, procs, deadline: float) -> None:
        try:
            r = redis.Redis.from_url(self.config.url, socket_timeout=2, socket_connect_timeout=2)
            port = r.connection_pool.connection_kwargs.get("port")
        except Exception:
            return
        try:
            while port and time.monotonic() < deadline and any(p.poll() is None for p in procs):
                ours = _local_ports_to(procs, port)
                try:
                    for c in r.client_list() if ours else ():
                        if "b" in c.get("flags", "") and int(c["addr"].rsplit(":", 1)[1]) in ours:
                            r.execute_command("CLIENT", "UNBLOCK", c["id"], "TIMEOUT")
                except (redis.RedisError, ValueError, KeyError, IndexError):
                    return                               # the broker is gone: wait as before
                time.sleep(0.02)
        finally:
            r.close()


def _local_ports_to(procs, port: int) -> set[int]:
    """Local ports of the TCP connections that ``procs`` and their children hold to ``port``."""
    ports = set()
    for p in procs:
        try:
            top = psutil.Process(p.pid)
            family = [top, *top.children(recursive=True)]
        except psutil.Error:
            continue
        for q in family:
            try:
                ports.update(c.laddr.port for c in q.net_connections(kind="tcp")
                             if c.raddr and c.raddr.port == port)
            except psutil.Error:
                pass
    return ports


@pytest.fixture
def workers(broker, tmp_path):
    w = Workers(broker.config, tmp_path)
    yield w
    w.stop_all()


@pytest.fixture
def on_a_worker():
    """This process as a worker's task process: ``start(limit)`` gives it a context with a
    real branch cache of ``limit`` bytes (call it again for a fresh worker) and returns the
    cache. The context is put back and the open files are closed at the end."""
    from rhtc import context
    from rhtc.client.data.openfiles import close_files
    from rhtc.worker.cache import BranchCache

    saved = context.current

    def start(limit: int = 1 << 30) -> BranchCache:
        close_files()
        context.current = context.TaskContext(worker="here", cache=BranchCache(limit))
        return context.current.cache

    yield start
    context.current = saved
    close_files()


def map_keys(storage: Storage) -> list[str]:
    """Keys of maps (not of workers) under the namespace."""
    from rhtc.broker.wire.keys import MAP_DATA
    prefixes = tuple(getattr(storage.keys, name)("") for name in ("map", *MAP_DATA))
    return sorted(k.decode() for k in storage.r.scan_iter(match=f"{storage.keys.ns}:*")
                  if k.decode().startswith(prefixes))
