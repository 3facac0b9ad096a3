"""``bench chaos``: one map through a real fault-injecting proxy, against the same map
without faults.

Workers reach Redis through toxiproxy (the client does not). While the map runs, an
injector fires the seed's plan of faults (:mod:`bench.chaosfaults`), each once the map
has received so many results: it cuts the workers' connections, drops Redis's replies,
adds latency, resets peers, and SIGKILLs workers and restarts them under the same names;
the map's last task waits until the whole plan has fired, so every planned fault hits a
running map. One task holds the GIL for three leases. Every result is checked: correct, delivered exactly
once, in order. Then a day of short maps (:mod:`bench.chaosday`): connections killed,
the broker out of memory for a while, the input file rewritten, between and during maps.
``tests/scenarios/test_exactly_once_under_chaos.py`` runs the same scenarios and asserts on them.

    bench chaos --tasks 5000 --workers 4 --repeats 3 --day-maps 12

Example::

    (not run by the tests: minutes of faults; tests/scenarios/test_exactly_once_under_chaos.py runs it)
    >>> run_chaos(tasks=500, workers=2, seed=1).ok                  # doctest: +SKIP
    True
"""
from __future__ import annotations

import collections
import ctypes
import dataclasses
import os
import random
import statistics
import time

import click

from . import results
from .chaosday import describe_day, run_day
from .chaosfaults import FAULT_KINDS, Injector, plan_faults, wait_at_gate
from .chaospool import ChaosPool, outliving
from ..broker.wire.protocol import task_name

TASK_SECONDS = 0.001


def chaos_task(arg: tuple[int, int, str, str]) -> tuple[int, int]:
    """The map's function: ``(i, hold, marker, gate)`` -> ``(i, i * i)``; with ``hold``,
    notes the run in the file ``marker`` and holds the GIL ``hold`` seconds (libc ``sleep``
    through ``ctypes.PyDLL`` does not release it); with ``gate``, waits until the fault
    injector has fired its whole plan (:func:`bench.chaosfaults.wait_at_gate`)."""
    i, hold, marker, gate = arg
    if gate:
        wait_at_gate(gate)
    if hold:
        with open(marker, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        ctypes.PyDLL(None).sleep(int(hold))
        with open(marker, "a") as fh:
            fh.write("done\n")
    else:
        time.sleep(TASK_SECONDS)
    return i, i * i


def chaos_counted(arg: tuple[int, int, str, str]) -> collections.Counter:
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
    planned: collections.Counter = dataclasses.field(default_factory=collections.Counter)
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


def run_chaos(tasks: int = 5000, workers: int = 4, lease: float = 2.0, seed: int | None = None,
              faults: bool = True, timeout: float = 300.0, log_dir: str | None = None,
              merge: bool = False, extra_faults: int = 25) -> ChaosResult:
    """Run one map of ``tasks`` tasks on ``workers`` workers behind toxiproxy, with the
    faults the ``seed`` plans (:func:`bench.chaosfaults.plan_faults`: one of each kind and
    ``extra_faults`` more, fired on the map's progress; its last task waits until all have
    fired) or none, and check every result. ``merge``: the map reduces
    (:func:`chaos_counted`, merged on the workers) and every task must count once.

    One task (chosen by the seed) holds the GIL for three leases plus a second."""
    from ..client import RemoteError, submit
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    plan = plan_faults(seed, tasks, extra_faults) if faults else []
    gil_task = rng.randrange(tasks - 1)             # the last task is the gate
    hold = int(3 * lease + 1)
    result = ChaosResult(seed, tasks, workers, lease, faults, gil_task=gil_task,
                         planned=collections.Counter(f.kind for f in plan))
    with ChaosPool(workers, lease, log_dir) as pool:
        marker = os.path.join(pool.log_dir, f"gil-task-runs-{seed}")
        gate = os.path.join(pool.log_dir, f"faults-done-{seed}") if faults else ""
        args = [(i, hold if i == gil_task else 0, marker if i == gil_task else "", gate if i == tasks - 1 else "")
                for i in range(tasks)]
        t0 = time.monotonic()
        # no backup copies of stragglers: the GIL task must run once, unless taken for dead
        h = submit(chaos_counted if merge else chaos_task, args, broker=pool.config, errors="return",
                   label="chaos", stragglers=None, reduce=True if merge else None)
        injector = None
        if faults:
            spared = {task_name(h.map_id, gil_task): marker, task_name(h.map_id, tasks - 1): gate + ".runs"}
            injector = Injector(pool, plan, lambda: h.progress()[0], gate, spared)
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
    if result.faults != result.planned:
        result.problems.append(f"faults injected {dict(result.faults)}, planned {dict(result.planned)}: "
                               "the map ended before its plan (it should wait at its gate)")
    return result


@click.command("chaos")
@click.option("--tasks", default=5000, show_default=True, help="Tasks in the map.")
@click.option("--workers", default=4, show_default=True, help="Worker processes.")
@click.option("--lease", default=2.0, show_default=True, help="RHTC_LEASE of the workers (s).")
@click.option("--repeats", default=3, show_default=True, help="Maps with faults, and as many without.")
@click.option("--seed", default=None, type=int, help="First seed (default: random); repeat k uses seed + k.")
@click.option("--extra-faults", default=25, show_default=True,
              help="Faults drawn at random after one of each kind, per map with faults.")
@click.option("--day-maps", default=12, show_default=True,
              help="Short maps of the day (faults between them); 0 skips the day.")
@click.option("--oom-seconds", default=7.0, show_default=True, help="How long each OOM window of the day lasts (s).")
@click.option("--json", "json_path", default=None, help="Write the figures here.")
def chaos_command(tasks, workers, lease, repeats, seed, extra_faults, day_maps, oom_seconds, json_path):
    """One map through a fault-injecting proxy (cuts, lost replies, latency, resets,
    SIGKILL + restart, a task holding the GIL), against the same map without faults; then
    a day of short maps with connection kills, OOM windows and a rewritten file."""
    seed = random.randrange(1 << 30) if seed is None else seed
    calm, rough = [], []
    for k in range(repeats):
        calm.append(run_chaos(tasks, workers, lease, seed + k, faults=False))
        rough.append(run_chaos(tasks, workers, lease, seed + k, faults=True, extra_faults=extra_faults))
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
        results.write(json_path, "chaos", {"tasks": tasks, "workers": workers, "lease_s": lease, "seeds": [seed, seed + repeats - 1],
                       "faults": dict(faults), "checked": checked, "delivered": delivered, "expected": expected,
                       "seconds_without_faults": [r.seconds for r in calm],
                       "seconds_with_faults": [r.seconds for r in rough],
                       "slowdown": t_rough / t_calm,
                       "day": day and {"maps": day.maps, "tasks": day.tasks, "correct": day.correct,
                                       "delivered": day.delivered, "faults": dict(day.faults),
                                       "attempts_counted": day.attempts_counted, "stale_maps": day.stale_maps,
                                       "seconds": day.seconds}})
    if checked != expected or delivered != expected or any(r.problems for r in calm + rough) \
            or (day is not None and not day.ok):
        raise SystemExit(1)
