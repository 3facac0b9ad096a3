"""Light workers: hundreds of protocol-true workers in a few processes, for benches and
tests (never for users).

A light worker is a real worker's two halves through the real code: a
:class:`~worker.supervisor.Supervisor` (its name and incarnation, heartbeat and published
status, reaping, lease reconciliation: :meth:`Supervisor.beat`) and a
:class:`~worker.main.TaskProcess` loop (takes tasks, leases them, verifies frames and the
map's liveness token, waits for its lease reply on a new map, signs and hands in results),
sharing a :class:`~worker.shared.SharedState`. Only the user's work is not real:
:func:`light_task` sleeps the given seconds and returns an incompressible array of the
given size (made and packed once per process and size, by :func:`memo_dumps`; each result
is still framed and signed on its own), so the bench measures the broker and the client,
not the workers' pickling.

A light process holds many: its main thread beats for all its supervisors (each at its
own phase of the heartbeat period), and a forked child runs all their task loops, one
thread each, as a real worker's task process runs beside its supervisor. Each worker keeps
its own name, incarnation, queue, lease, fast-lane connection (its blocking pop) and
status; the workers of a process share one redis-py client for the rare commands. The
task halves of a pool together weigh a fraction of one ordinary process (:func:`yield_cpu`):
on a small machine, a thousand task threads waking at once would otherwise starve the
supervisors, the broker and the client (their heartbeats missed, the map's token
unrenewed).
Killing the process kills its workers as a lost node would: their names expire and their
tasks run again elsewhere.

    (starts processes: see tests/scenarios/test_bench_scale.py)
    >>> with LightPool(config, workers=200, processes=2) as pool:      # doctest: +SKIP
    ...     remote_map(light_task, [(1.0, 10_000)] * 400, broker=config)
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
import logging
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psutil

from ..broker.wire import protocol
from ..broker.wire.config import BrokerConfig, settings
from ..broker.embedded import die_with_parent
from ..broker.errors import BrokerTrouble
from ..broker.storage import Storage, connect
from ..worker.functions import Functions
from ..worker.main import TaskProcess
from ..worker.children import die_with
from ..worker.supervisor import Supervisor
from .priority import join_tasks_group

log = logging.getLogger("rhtc.bench")

SHARED_LOAD_WAIT = 1.0     # seconds a light worker waits for another's load of a map's function
START_GAP = 0.005          # seconds between two task loops' first connections (and two processes: x 20)

_payloads: dict[int, np.ndarray] = {}
_packed: dict[int, tuple[object, bytes]] = {}


def light_task(spec: tuple) -> np.ndarray | tuple:
    """The light workers' task: sleep ``spec[0]`` seconds, return ``spec[1]`` bytes of
    incompressible float64s (the same array object for every task of that size in a
    process): adding two of them is what combining two histograms costs. With a third
    item ``tag``, return ``(tag, array)`` (tests check the order of results with it).

    >>> light_task((0.0, 80)).nbytes, light_task((0.0, 80, 7))[0]
    (80, 7)
    """
    seconds, nbytes = spec[0], spec[1]
    if seconds > 0:
        time.sleep(seconds)
    value = _payload(nbytes)
    return (spec[2], value) if len(spec) > 2 else value


class Filled:
    """What :func:`light_fill` returns: a stand-in for a filled histogram set of ``nbytes``
    that counts the tasks folded into it. It travels as what it stands for (pickled, it is
    the process's incompressible array of that size, so every hand-in, merge and read moves
    ``nbytes``), but in memory it is two numbers: adding two is free, and a thousand light
    workers each holding a partial of 8 MB hold 8 MB in all, not 8 GB, so ``bench scale``
    can run 1,000 workers x 8 MB on one machine. What it leaves out is the arithmetic of a
    real fold (8 MB of float64s added: a few ms per partial).

    >>> import pickle
    >>> a = light_fill((0.0, 800)) + light_fill((0.0, 800))
    >>> b = pickle.loads(pickle.dumps(a))
    >>> b.count, b.nbytes, len(pickle.dumps(a)) > 800
    (2, 800, True)
    """

    __slots__ = ("nbytes", "count")

    def __init__(self, nbytes: int, count: int = 1):
        self.nbytes, self.count = nbytes, count

    def __add__(self, other: "Filled") -> "Filled":
        if not isinstance(other, Filled) or other.nbytes != self.nbytes:
            return NotImplemented
        return Filled(self.nbytes, self.count + other.count)

    def __deepcopy__(self, memo) -> "Filled":
        return Filled(self.nbytes, self.count)

    def __reduce__(self):
        return _filled, (self.count, _payload(self.nbytes))


def _filled(count: int, contents: np.ndarray) -> Filled:
    return Filled(contents.nbytes, count)           # (the contents travelled; they are dropped here)


def _payload(nbytes: int) -> np.ndarray:
    value = _payloads.get(nbytes)
    if value is None:
        value = _payloads[nbytes] = np.random.default_rng(nbytes).random(max(1, nbytes // 8))
    return value


def light_fill(spec: tuple) -> Filled:
    """:func:`light_task`, returning a :class:`Filled` of ``spec[1]`` bytes (the bench's
    reduced cells: the workers' merge, or the client's, folds them)."""
    if spec[0] > 0:
        time.sleep(spec[0])
    return Filled(_payload(spec[1]).nbytes)


def memo_dumps(value) -> bytes:
    """:func:`broker.wire.protocol.dumps`, packed once for :func:`light_task`'s arrays.

    >>> a = light_task((0.0, 800)); memo_dumps(a) is memo_dumps(a)
    True
    """
    if isinstance(value, np.ndarray) and _payloads.get(value.nbytes) is value:
        got = _packed.get(value.nbytes)
        if got is None or got[0] is not value:
            got = _packed[value.nbytes] = (value, protocol.dumps(value))
        return got[1]
    return protocol.dumps(value)


def _run_task_loops(config: BrokerConfig, workers: list[tuple], st, parent: int, halves: int) -> None:
    """The light process's task half (forked, as a worker's task process is): one
    :class:`TaskProcess` loop per worker, each in a thread, until SIGTERM; ``halves``: how
    many task halves the pool has (their weights add up: :func:`yield_cpu`)."""
    die_with(parent)                     # SIGKILL when the beating half dies, as a task process
    yield_cpu(halves)
    threading.stack_size(1 << 20)
    client = connect(config, max_connections=2 * len(workers) + 32)    # a fast lane each, and the rest
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)           # the beating half decides
    loops, loaded, loading = [], collections.OrderedDict(), {}
    for name, incarnation, shared in workers:
        tp = TaskProcess(config, name, incarnation, shared, cache_bytes=1 << 20, max_batch=64, settings_=st,
                         storage=Storage(config, st, client=client))
        tp.dumps = memo_dumps
        tp.functions = ProcessFunctions(tp.storage, name, tp.key, loaded, loading)
        loops.append(tp)
        threading.Thread(target=_serve_loop, args=(tp,), name=f"light-{name}", daemon=True).start()
        time.sleep(START_GAP)            # a few hundred connections at once overflow the broker's backlog
    stop.wait()
    for tp in loops:
        tp.stopping = True
        tp.wake()                        # the idle loops' blocking pops end now
    time.sleep(1.5)                      # their results go in
    os._exit(0)


#: the kernel's CFS weight of each nice level from -20 to 19 (sched_prio_to_weight)
NICE_WEIGHTS = (88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
                9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277,
                1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
                110, 87, 70, 56, 45, 36, 29, 23, 18, 15)
#: what all the task halves of a pool weigh together, against one ordinary process (1024)
TASK_HALVES_WEIGHT = 256


def nice_for(halves: int) -> int:
    """The nice level of each of ``halves`` task halves so that together they weigh
    :data:`TASK_HALVES_WEIGHT`: the nearest, on the kernel's geometric scale.

    >>> nice_for(1), nice_for(2), nice_for(10), nice_for(100)
    (6, 9, 17, 19)
    """
    share = TASK_HALVES_WEIGHT / max(1, halves)
    levels = range(0, 20)
    return min(levels, key=lambda n: abs(math.log(NICE_WEIGHTS[20 + n] / share)))


def yield_cpu(halves: int = 1) -> None:
    """Weigh this process (a task half, one of ``halves``) so that the task halves of a pool
    together weigh a fraction of one ordinary process, however many processes and threads
    they are: a thousand task threads waking at once do not starve the supervisors'
    heartbeats, Redis or the client that the bench measures.

    Inside the bench's own cpu group (:mod:`bench.priority`, root) they join its task group
    (an eighth of one of the bench's threads).
    Elsewhere each goes into a scheduling group of its own (a Linux autogroup; else plain
    nice) at :func:`nice_for` its share: there, any other busy process on the machine
    outweighs them, and a thousand workers have waited minutes for their first task
    (docs/scale.md, "The ramp on a shared machine")."""
    os.setsid()
    if join_tasks_group():
        return
    nice = nice_for(halves)
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(nice))
    except OSError:
        pass
    os.nice(nice)


class ProcessFunctions(Functions):
    """The map functions of a light process's workers, loaded once for all of them.

    A real worker is a process of its own: it fetches, checks and unpickles a map's function
    on its own core in a few ms. A hundred light workers in one process, woken at once by a
    new map, did it a hundred times under one GIL, every one of them delayed to the end of
    it: on a quiet machine, ``bench scale --workers 1000 --seconds 10 --sizes 1MB,10kB --waves 1``
    printed a first-task median of 1.06 s for the pool's first map and 0.19 s for the next
    (the same function). So the first of them to load it loads it for all; the others wait
    for that, up to :data:`SHARED_LOAD_WAIT` s, then load it themselves (never a convoy
    behind one stalled call)."""

    def __init__(self, storage, name: str, key: bytes, loaded: collections.OrderedDict,
                 loading: dict[str, threading.Event]):
        super().__init__(storage, name, key)
        self.loaded, self.loading = loaded, loading

    _claim = threading.Lock()         # (one per process: the light process's task half)

    def get(self, fn_hash: str, map_id: str):
        fn = self.loaded.get(fn_hash)
        if fn is not None:
            return fn
        with self._claim:
            done = self.loading.get(fn_hash)
            mine = done is None
            if mine:
                done = self.loading[fn_hash] = threading.Event()
        if not mine:
            done.wait(SHARED_LOAD_WAIT)
            fn = self.loaded.get(fn_hash)
            return fn if fn is not None else super().get(fn_hash, map_id)
        try:
            return super().get(fn_hash, map_id)
        finally:
            with self._claim:
                self.loading.pop(fn_hash, None)
            done.set()


def _serve_loop(tp: TaskProcess) -> None:
    try:
        tp.serve()
    except BaseException:         # noqa: B036 - say why a light worker stopped taking tasks
        log.exception("light worker %s: its task loop stopped", tp.name)


def serve(config: BrokerConfig, names: list[str], halves: int = 1) -> int:
    """Run the light workers ``names`` until SIGTERM (this process is one of the pool's
    ``halves`` light processes). This process is their supervisors
    (claims every name, then beats for all, each at its own phase of the heartbeat
    period); a forked child runs their task loops, so that, as with real workers, liveness
    never waits for the threads that run tasks. On SIGTERM the child stops and every
    worker hands back (retires) what it holds."""
    st = dataclasses.replace(settings(), malloc_tuning=False)
    client = connect(config, max_connections=len(names) + 32)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sups = [Supervisor(config, name=name, settings_=st, storage=Storage(config, st, client=client))
            for name in names]
    for sup in sups:
        sup.claim()
    child = multiprocessing.get_context("fork").Process(
        target=_run_task_loops, args=(config, [(s.name, s.incarnation, s.shared) for s in sups], st, os.getpid(), halves),
        name="light-tasks", daemon=False)
    child.start()
    period = st.heartbeat
    start = time.monotonic()
    due = [(start + period * i / len(sups), i) for i in range(len(sups))]   # a heap
    while not stop.is_set() and due and child.exitcode is None:
        at, i = heapq.heappop(due)
        if stop.wait(max(0.0, at - time.monotonic())):
            break
        try:
            if not sups[i].beat():
                log.warning("light worker %s lost its name; it stops beating", names[i])
                continue
        except BrokerTrouble as err:
            log.warning("light worker %s: heartbeat failed (%s); retrying", names[i], err)
        heapq.heappush(due, (at + sups[i].beat_every, i))
    if child.exitcode is not None and not stop.is_set():
        log.warning("light workers: the task loops' process died with exit code %s", child.exitcode)
    child.terminate()
    child.join(5)
    if child.exitcode is None:
        child.kill()
        child.join()
    for sup in sups:
        try:
            sup.storage.lease.retire(sup.name)
        except BrokerTrouble as err:
            log.warning("light worker %s could not hand back its tasks (%s): they are requeued when its "
                        "name expires", sup.name, err)
    return 0


class LightPool:
    """``workers`` light workers in ``processes`` processes on this machine, against
    ``config``'s broker; a context manager that waits until all have registered (their
    heartbeat published) and stops them on exit."""

    def __init__(self, config: BrokerConfig, workers: int, processes: int = 2, prefix: str = "light",
                 start_timeout: float = 120.0):
        self.config, self.n, self.prefix = config, workers, prefix
        self.start_timeout = start_timeout
        self.nproc = max(1, min(processes, workers))
        self.procs: list[subprocess.Popen] = []
        self.names: list[list[str]] = []
        self.log_dir = tempfile.mkdtemp(prefix="rhtc-light-")
        self.registered_s: float | None = None

    def start(self) -> "LightPool":
        env = dict(os.environ, **self.config.env())
        env.pop("RHTC_CONFIG", None)
        t0 = time.perf_counter()
        for p in range(self.nproc):
            names = [f"{self.prefix}{p}-{i}" for i in range(p, self.n, self.nproc)]
            self.names.append(names)
            with open(os.path.join(self.log_dir, f"p{p}.log"), "ab") as logf:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "rhtc.bench.lightworkers", str(self.nproc), *names], env=env, stdout=logf,
                    stderr=subprocess.STDOUT, preexec_fn=die_with_parent, process_group=0))
            time.sleep(START_GAP * 20)
        try:
            self.wait_registered(self.n)
        except BaseException:
            self.close()
            raise
        self.registered_s = time.perf_counter() - t0
        return self

    def wait_registered(self, n: int) -> None:
        """Block until ``n`` light workers of this pool have published a heartbeat."""
        s = Storage(self.config)
        deadline = time.monotonic() + self.start_timeout
        try:
            while True:
                live = [w for w in s.pool.live_workers(queue_depths=False) if w["name"].startswith(self.prefix)]
                if len(live) >= n:
                    return
                dead = [p for p in self.procs if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    why = f"exited with code {dead[0].returncode}" if dead else \
                        f"only {len(live)} of {n} registered within {self.start_timeout:.0f} s"
                    raise RuntimeError(f"light workers: {why}; logs in {self.log_dir}:\n{self.log_tail()}")
                time.sleep(0.1)
        finally:
            s.close()

    def log_tail(self) -> str:
        out = []
        for p in range(len(self.procs)):
            try:
                with open(os.path.join(self.log_dir, f"p{p}.log"), errors="replace") as fh:
                    out.append(fh.read()[-1500:])
            except OSError:
                pass
        return "\n".join(out)

    def cpu_seconds(self) -> float:
        """CPU time used so far by the light processes and their task halves."""
        total = 0.0
        for p in self.procs:
            try:
                proc = psutil.Process(p.pid)
                for q in [proc, *proc.children()]:
                    t = q.cpu_times()
                    total += t.user + t.system
            except psutil.Error:
                continue
        return total

    def kill(self, p: int) -> list[str]:
        """SIGKILL light process ``p`` (a node lost; its task half dies with it, as a
        worker's task process does); returns its workers' names."""
        os.killpg(self.procs[p].pid, signal.SIGKILL)
        self.procs[p].wait()
        return self.names[p]

    def close(self, grace: float = 15.0) -> None:
        """SIGTERM every light process (each hands back its workers' tasks), SIGKILL it and
        its task half after ``grace``."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)     # (its task half dies with it)
            except ProcessLookupError:
                pass
            p.wait()
        self.procs = []
        if not os.path.isdir(self.log_dir):
            return
        for f in os.listdir(self.log_dir):
            os.unlink(os.path.join(self.log_dir, f))
        os.rmdir(self.log_dir)

    def __enter__(self) -> "LightPool":
        return self if self.procs else self.start()

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from rhtc.bench import lightworkers          # not __main__'s copy: light_task's arrays live there
    sys.exit(lightworkers.serve(BrokerConfig.resolve(), sys.argv[2:], halves=int(sys.argv[1])))
