"""``bench chaos``: one map through a real fault-injecting proxy, against the same map
without faults.

Workers reach Redis through toxiproxy (the client does not). While the map runs, a
seeded injector cuts the workers' connections, drops Redis's replies, adds latency,
resets peers, and SIGKILLs workers and restarts them under the same names; one task
holds the GIL for three leases. Every result is checked: correct, delivered exactly
once, in order. Then a day of short maps (:mod:`bench.chaosday`): connections killed,
the broker out of memory for a while, the input file rewritten, between and during maps.
``tests/test_chaos.py`` runs the same scenarios and asserts on them.

    bench chaos --tasks 5000 --workers 4 --repeats 3 --day-maps 12

Example::

    (not run by the tests: minutes of faults; tests/test_chaos.py runs it)
    >>> run_chaos(tasks=500, workers=2, seed=1).ok                  # doctest: +SKIP
    True
"""
from __future__ import annotations

import collections
import ctypes
import dataclasses
import json
import os
import random
import statistics
import threading
import time

import click

from .chaosday import describe_day, run_day
from .chaospool import ChaosPool, outliving
from ..broker.protocol import task_name

FAULT_KINDS = ("cut", "lost replies", "latency", "reset peer", "sigkill + restart")
TASK_SECONDS = 0.001


def chaos_task(arg: tuple[int, int, str]) -> tuple[int, int]:
    """The map's function: ``(i, hold, marker)`` -> ``(i, i * i)``; with ``hold``, notes
    the run in the file ``marker`` and holds the GIL ``hold`` seconds (libc ``sleep``
    through ``ctypes.PyDLL`` does not release it)."""
    i, hold, marker = arg
    if hold:
        with open(marker, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        ctypes.PyDLL(None).sleep(int(hold))
        with open(marker, "a") as fh:
            fh.write("done\n")
    else:
        time.sleep(TASK_SECONDS)
    return i, i * i


def chaos_counted(arg: tuple[int, int, str]) -> collections.Counter:
    """:func:`chaos_task`'s result as ``Counter({i: 1})`` when it is right (``{-1 - i: 1}``
    when wrong): summed by a map that reduces (merged on the workers), each index must
    read 1, so a task counted twice or lost shows."""
    i = arg[0]
    return collections.Counter({i if chaos_task(arg) == (i, i * i) else -1 - i: 1})


@dataclasses.dataclass
class ChaosResult:
    """What one map under (or without) faults did, and what was checked."""

    seed: int
    tasks: int
    workers: int
    lease: float
    with_faults: bool
    seconds: float = 0.0
    faults: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    delivered: int = 0
    correct: int = 0
    gil_task: int | None = None
    gil_runs: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every result correct and in order, each delivered exactly once."""
        return not self.problems and self.correct == self.tasks == self.delivered


def _as_list(counts: collections.Counter, failures: list, tasks: int, problems: list[str]) -> list:
    """A merged map's counts as the list of results a plain map returns: ``(i, i * i)`` for
    a task counted exactly once, else what was seen (errors in their places)."""
    out: list = [(i, i * i) if counts.get(i) == 1 else f"counted {counts.get(i, 0)} times" for i in range(tasks)]
    for err in failures:
        out[err.index] = err
    extra = sorted(k for k in counts if not 0 <= k < tasks)
    if extra:
        problems.append(f"wrong results (or indices outside the map) were counted: {extra[:20]}")
    return out


class Injector(threading.Thread):
    """Injects faults at random (seeded) until stopped; counts them by kind. The first
    five are one of each kind, in a random order. Each network outage lasts under a
    quarter of a 2 s lease and outages are 0.3 s apart or more, so a worker that keeps
    heartbeating through them is never rightly taken for dead."""

    def __init__(self, pool: ChaosPool, rng: random.Random, spare: str, gil_marker: str):
        super().__init__(name="chaos-injector", daemon=True)
        self.pool, self.rng, self.spare, self.gil_marker = pool, rng, spare, gil_marker
        self.stop = threading.Event()
        self.counts: collections.Counter = collections.Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        kinds = list(FAULT_KINDS)
        self.rng.shuffle(kinds)
        try:
            while not self.stop.wait(self.rng.uniform(0.3, 0.8)):
                kind = kinds.pop() if kinds else self.rng.choice(FAULT_KINDS)
                if self._inject(kind):
                    self.counts[kind] += 1
        except BaseException as err:           # handed to the caller
            self.error = err

    def _inject(self, kind: str) -> bool:
        proxy, rng = self.pool.proxy, self.rng
        if kind == "cut":
            proxy.cut()
            self.stop.wait(rng.uniform(0.2, 0.5))
            proxy.restore()
        elif kind == "lost replies":            # replies stop; connections close after `timeout`
            toxic = proxy.add_toxic("timeout", stream="downstream", timeout=int(rng.uniform(100, 400)))
            self.stop.wait(rng.uniform(0.2, 0.5))
            proxy.remove_toxic(toxic)
        elif kind == "latency":
            toxic = proxy.add_toxic("latency", stream="downstream", latency=int(rng.uniform(10, 80)),
                                    jitter=10)
            self.stop.wait(rng.uniform(0.5, 2.0))
            proxy.remove_toxic(toxic)
        elif kind == "reset peer":
            toxic = proxy.add_toxic("reset_peer", stream="upstream", timeout=0)
            self.stop.wait(rng.uniform(0.05, 0.3))
            proxy.remove_toxic(toxic)
        else:
            # the worker running the GIL task is spared: that task tests the lease, not
            # the retry limit (no kill while it runs somewhere not yet known)
            spared = self.pool.running(self.spare)
            if not spared and self._gil_running():
                return False
            victims = sorted(n for n, p in self.pool.procs.items() if p.poll() is None and n not in spared)
            if not victims:
                return False
            name = rng.choice(victims)
            self.pool.kill(name)
            self.pool.start(name)
        return True

    def _gil_running(self) -> bool:
        try:
            with open(self.gil_marker) as fh:
                lines = fh.read().split()
        except FileNotFoundError:
            return False
        return lines.count("done") < len(lines) - lines.count("done")


def run_chaos(tasks: int = 5000, workers: int = 4, lease: float = 2.0, seed: int | None = None,
              faults: bool = True, timeout: float = 300.0, log_dir: str | None = None,
              merge: bool = False) -> ChaosResult:
    """Run one map of ``tasks`` tasks on ``workers`` workers behind toxiproxy, with faults
    injected at random (``seed``) or none, and check every result. ``merge``: the map
    reduces (:func:`chaos_counted`, merged on the workers) and every task must count once.

    One task (chosen by the seed) holds the GIL for three leases plus a second."""
    from ..client import RemoteError, submit
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    gil_task = rng.randrange(tasks)
    hold = int(3 * lease + 1)
    result = ChaosResult(seed, tasks, workers, lease, faults, gil_task=gil_task)
    with ChaosPool(workers, lease, log_dir) as pool:
        marker = os.path.join(pool.log_dir, f"gil-task-runs-{seed}")
        args = [(i, hold, marker) if i == gil_task else (i, 0, "") for i in range(tasks)]
        t0 = time.monotonic()
        # no backup copies of stragglers: the GIL task must run once, unless taken for dead
        h = submit(chaos_counted if merge else chaos_task, args, broker=pool.config, errors="return",
                   label="chaos", stragglers=None, reduce=True if merge else None)
        injector = Injector(pool, rng, task_name(h.map_id, gil_task), marker) if faults else None
        if injector is not None:
            injector.start()
        try:
            values = h.wait(timeout=timeout)
            if merge:
                values = _as_list(values or collections.Counter(), h.failures, tasks, result.problems)
        except TimeoutError as err:
            values = None
            result.problems.append(f"{err} (seed {seed}, worker logs in {pool.log_dir})")
            h.cancel()
        finally:
            if injector is not None:
                injector.stop.set()
                injector.join(30)
                pool.proxy.clear()
                pool.proxy.restore()
                result.faults = injector.counts
                if injector.error is not None:
                    result.problems.append(f"the fault injector failed: {injector.error!r}")
        result.seconds = time.monotonic() - t0
        result.delivered = h.progress()[0]
        left = outliving(pool.children_of_killed)
        if left:
            result.problems.append(f"task processes {left} outlived their SIGKILLed workers by 5 s")
        try:                  # every worker, restarted or not, serves again once faults stop
            pool.wait_live(list(pool.procs), timeout=3 * lease + 5)
        except TimeoutError as err:
            result.problems.append(str(err))
        if os.path.exists(marker):
            with open(marker) as fh:
                result.gil_runs = sum(line != "done" for line in fh.read().split())
        pool.keep_logs = bool(result.problems) or result.gil_runs != 1
    if result.gil_runs != 1:
        result.problems.append(f"the task holding the GIL {hold} s (index {gil_task}) ran "
                               f"{result.gil_runs} times: its worker was taken for dead")
    if values is not None:
        for i, v in enumerate(values):
            if v == (i, i * i):
                result.correct += 1
            elif len(result.problems) < 20:
                kind = "failed" if isinstance(v, RemoteError) else "wrong"
                result.problems.append(f"task {i} {kind}: {v!s:.300}")
    if result.delivered != tasks:
        result.problems.append(f"{result.delivered} results delivered for {tasks} tasks")
    return result


@click.command("chaos")
@click.option("--tasks", default=5000, show_default=True, help="Tasks in the map.")
@click.option("--workers", default=4, show_default=True, help="Worker processes.")
@click.option("--lease", default=2.0, show_default=True, help="RHTC_LEASE of the workers (s).")
@click.option("--repeats", default=3, show_default=True, help="Maps with faults, and as many without.")
@click.option("--seed", default=None, type=int, help="First seed (default: random); repeat k uses seed + k.")
@click.option("--day-maps", default=12, show_default=True,
              help="Short maps of the day (faults between them); 0 skips the day.")
@click.option("--oom-seconds", default=7.0, show_default=True, help="How long each OOM window of the day lasts (s).")
@click.option("--json", "json_path", default=None, help="Write the figures here.")
def chaos_command(tasks, workers, lease, repeats, seed, day_maps, oom_seconds, json_path):
    """One map through a fault-injecting proxy (cuts, lost replies, latency, resets,
    SIGKILL + restart, a task holding the GIL), against the same map without faults; then
    a day of short maps with connection kills, OOM windows and a rewritten file."""
    seed = random.randrange(1 << 30) if seed is None else seed
    calm, rough = [], []
    for k in range(repeats):
        calm.append(run_chaos(tasks, workers, lease, seed + k, faults=False))
        rough.append(run_chaos(tasks, workers, lease, seed + k, faults=True))
        click.echo(f"  repeat {k + 1}: without faults {calm[-1].seconds:.2f} s, with faults "
                   f"{rough[-1].seconds:.2f} s ({sum(rough[-1].faults.values())} faults, seed {seed + k})")
    faults = sum((r.faults for r in rough), collections.Counter())
    checked = sum(r.correct for r in calm + rough)
    delivered = sum(r.delivered for r in calm + rough)
    expected = 2 * repeats * tasks
    t_calm = statistics.median(r.seconds for r in calm)
    t_rough = statistics.median(r.seconds for r in rough)
    click.echo(f"chaos: {tasks} tasks, {workers} workers, lease {lease:g} s, {repeats} repeats, seeds "
               f"{seed}..{seed + repeats - 1}; one task holds the GIL {int(3 * lease + 1)} s")
    click.echo("faults injected: " + ", ".join(f"{k} {faults[k]}" for k in FAULT_KINDS)
               + f" (total {sum(faults.values())})")
    click.echo(f"results checked: {checked}/{expected} correct and in order, {delivered} delivered "
               f"for {expected} tasks (exactly once)")
    click.echo(f"median map time: without faults {t_calm:.2f} s, with faults {t_rough:.2f} s, "
               f"slowdown {t_rough / t_calm:.2f}x")
    day = None
    if day_maps:
        with ChaosPool(workers, lease) as pool:
            day = run_day(pool, maps=day_maps, seed=seed, oom_seconds=oom_seconds)
        for line in describe_day(day):
            click.echo(line)
    for r in calm + rough:
        for p in r.problems:
            click.echo(f"PROBLEM ({'faults' if r.with_faults else 'no faults'}, seed {r.seed}): {p}")
    for p in day.problems if day else []:
        click.echo(f"PROBLEM (day, seed {seed}): {p}")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"tasks": tasks, "workers": workers, "lease_s": lease, "seeds": [seed, seed + repeats - 1],
                       "faults": dict(faults), "checked": checked, "delivered": delivered, "expected": expected,
                       "seconds_without_faults": [r.seconds for r in calm],
                       "seconds_with_faults": [r.seconds for r in rough],
                       "slowdown": t_rough / t_calm,
                       "day": day and {"maps": day.maps, "tasks": day.tasks, "correct": day.correct,
                                       "delivered": day.delivered, "faults": dict(day.faults),
                                       "attempts_counted": day.attempts_counted, "stale_maps": day.stale_maps,
                                       "seconds": day.seconds}}, fh, indent=2)
    if checked != expected or delivered != expected or any(r.problems for r in calm + rough) \
            or (day is not None and not day.ok):
        raise SystemExit(1)
