"""``bench scale``: one Redis and one client against hundreds to thousands of light
workers (:mod:`bench.lightworkers`: the real protocol, sleeping tasks, results of a given
size), over a grid of worker counts x task durations x result sizes.

Each cell is one ``remote_map`` of ``waves`` tasks per worker. Printed per cell: tasks/s;
the timeline's efficiencies (:mod:`client.reports.efficiency`), by the wall clock first
(busy task time / (workers x the map's submission to its last result): the ramp and the
tail count; a note when fewer workers took part than the pool has, as the figure counts
only those) and then per worker (each from its first task to its last); the dispatch
delay (a task queued -> taken: its start minus the later of the map's submission and the
end of the worker's previous task), median and p99,
and apart: each worker's first task after the submission (median, p99 and max, the ramp;
and how many workers got no task of the map) and the steady state's p99 (every task but each worker's first); the broker's CPU per task and its share of one core (INFO used_cpu_sys + used_cpu_user
over the map); the client's CPU share and where its main thread's CPU went
(:mod:`bench.cpushare`); Redis's memory peak (sampled); how long results waited between
their task's end and the client taking them (p99; "the client keeps up" when under one
task duration); and the time from the last result to ``remote_map`` returning, and from the last task's end;
the frames and bytes the client read of the results, and the tree of partials' depth. The
reduced cells return :class:`~bench.lightworkers.Filled` stand-ins (they travel as their
size, fold for free, and count the tasks folded in: each cell checks every task counted
once), so 1,000 light workers' partials fit in memory. Per worker
count: the time to register all workers and the broker's CPU share with them idle
(heartbeats alone).

A cell whose results could pass ``--memory-budget`` in all (tasks x result size, or workers x
result size when the workers merge: when the client falls behind they wait in Redis; twice
that when they are kept as a list) is
skipped and says so. Redis is not capped: at ``maxmemory`` the workers' retries of
refused 8 MB hand-ins would be what the bench measures.
"""
from __future__ import annotations

import math
import os
import statistics
import threading
import time

import click
import psutil

from . import results, scalecurve
from ..broker.wire.config import parse_size
from ..broker.embedded import EmbeddedBroker
from ..broker.storage import Storage
from ..client import last_map, remote_map
from ..client.reports.efficiency import efficiency
from rhtc.errors import RhtcError
from .against import side_by_side
from .ceiling import ceiling_lines, size_text as _size_text
from .cpushare import CATEGORIES, CpuShare
from .busy import busy_processes
from .exclusive import one_at_a_time
from .lightworkers import LightPool, light_fill, light_task
from .priority import BENCH_SHARES, TASKS_SHARES, Share

# the broker's CPU with every worker idle is read over IDLE_SECONDS, whole cycles of an idle
# worker's beats (2 s), waits (5 s) and quiet takes (10 s: worker/main.py), once they have
# settled SETTLE_SECONDS after registering (their first takes, reaps and waits)
IDLE_SECONDS = 10.0
SETTLE_SECONDS = 6.0


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def dispatch_delays(record) -> tuple[list[float], list[float]]:
    """Per task: its start minus the later of the map's submission and the end of the
    previous task on its worker (how long a free worker and a queued task waited for each
    other); as (each worker's first task: the map's ramp, which also loads its function
    and waits for its liveness token; the others: the steady state).

    >>> from rhtc.client.reports.record import RunRecord
    >>> rec = RunRecord(start=100.0, end=110.0)
    >>> rec.add_task({"index": 0, "worker": "a", "start": 100.5, "stop": 105})
    >>> rec.add_task({"index": 1, "worker": "a", "start": 105.25, "stop": 110})
    >>> dispatch_delays(rec)
    ([0.5], [0.25])
    """
    by_worker: dict[str, list] = {}
    for t in record.tasks:
        by_worker.setdefault(t.worker, []).append(t)
    first, later = [], []
    for tasks in by_worker.values():
        tasks.sort(key=lambda t: t.start)
        free = record.start
        for k, t in enumerate(tasks):
            (later if k else first).append(max(0.0, t.start - max(free, record.start)))
            free = t.stop
    return first, later


class BrokerWatch:
    """The broker's CPU seconds and memory while a block runs (memory sampled every 0.1 s)."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> "BrokerWatch":
        self.cpu0, self.peak, _ = self.storage.server_load()
        self.t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        s = Storage(self.storage.config)
        try:
            while not self._stop.wait(0.1):
                self.peak = max(self.peak, s.server_load()[1])
        finally:
            s.close()
        self.own_cpu = time.thread_time()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        cpu1, mem, self.clients = self.storage.server_load()
        self.peak = max(self.peak, mem)
        self.cpu = cpu1 - self.cpu0
        self.wall = time.perf_counter() - self.t0


def _machine_busy() -> float:
    """Seconds of CPU the whole machine has been busy (every process, every core)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def run_cell(config, storage: Storage, pool: LightPool, seconds: float, nbytes: int, waves: int,
             reduce: bool, merge: bool = True) -> dict:
    """One map of ``waves`` light tasks per worker of ``pool``; its figures."""
    workers = pool.n
    n = waves * workers
    busy0, light0 = _machine_busy(), pool.cpu_seconds()
    with BrokerWatch(storage) as broker, CpuShare() as client:
        value = remote_map(light_fill if reduce else light_task, [(seconds, nbytes)] * n, broker=config,
                           reduce=reduce or None, merge=merge, progress=False)
        returned = time.time()
    busy, light = _machine_busy() - busy0, pool.cpu_seconds() - light0
    handle = last_map()
    rec = handle.record()
    if reduce:                            # every task folded in exactly once
        assert value.count == n and value.nbytes == (nbytes // 8) * 8, f"{value.count} tasks folded of {n}"
    else:
        assert sum(v.nbytes for v in value) == (nbytes // 8) * 8 * n, "a result is missing or doubled"
    waits = [m["received"] - m["stop"] for m in handle.run.ledger.metas() if "received" in m and "stop" in m]
    first, later = dispatch_delays(rec)
    delays = first + later
    eff = efficiency(rec)
    shares = client.shares()
    return {
        "workers": workers, "seconds": seconds, "bytes": nbytes, "tasks": n, "wall_s": broker.wall,
        "tasks_per_s": n / broker.wall, "efficiency_wall": eff["efficiency_wall"], "efficiency": eff["efficiency"],
        "workers_took_part": len(eff["per_worker"]), "busy_s": eff["busy"], "map_wall_s": eff["wall"],
        "dispatch_ms_median": statistics.median(delays) * 1e3, "dispatch_ms_p99": _quantile(delays, 0.99) * 1e3,
        "ramp_ms": max(first) * 1e3,
        # each worker's first task, after the map's submission (a worker that got none: not counted here)
        "first_task_ms_median": statistics.median(first) * 1e3, "first_task_ms_p99": _quantile(first, 0.99) * 1e3,
        "first_task_ms_max": max(first) * 1e3, "workers_without_a_task": workers - len(first),
        "steady_dispatch_ms_p99": _quantile(later, 0.99) * 1e3 if later else float("nan"),
        "redis_cpu_us_per_task": broker.cpu / n * 1e6, "redis_cpu_share": broker.cpu / broker.wall,
        "redis_peak_mb": broker.peak / 2**20, "redis_clients": broker.clients,
        "client_cpu_share": client.process_cpu / client.wall,
        "client_main_cpu_share": client.main_cpu / client.wall,
        "client_cpu_us_per_task": client.process_cpu / n * 1e6,
        "client_where": shares,
        "result_wait_s_p99": _quantile(waits, 0.99), "result_wait_s_max": max(waits, default=float("nan")),
        "last_result_to_return_ms": (returned - handle.run.ledger.last_received()) * 1e3,
        "last_end_to_return_s": returned - max(t.stop for t in rec.tasks),
        "frames_read": handle.run.frames_read, "mb_read": handle.run.bytes_read / 1e6,
        "tree_depth": handle.run.tree_depth,
        "machine_busy_cores": busy / broker.wall, "light_workers_cores": light / broker.wall,
    }


def _cell(config, storage: Storage, pool: LightPool, seconds: float, nbytes: int, waves: int, reduce: bool,
          merge: bool, budget: int) -> dict:
    """:func:`run_cell`, or why not: skipped over the memory budget, or failed."""
    n = pool.n
    head = {"workers": n, "seconds": seconds, "bytes": nbytes, "merge": merge}
    # results that may wait in Redis: one partial per worker with the merge
    flight = (1 if merge else waves) * n * nbytes * (1 if reduce else 2)
    if flight > budget:
        return dict(head, skipped=f"{flight / 1e9:.1f} GB of results could wait, over the budget of "
                                  f"{budget / 1e9:.1f} GB (--memory-budget)")
    try:
        return dict(run_cell(config, storage, pool, seconds, nbytes, waves, reduce, merge), merge=merge)
    except RhtcError as err:       # say it, keep the workers' logs, go on
        return dict(head, failed=str(err).splitlines()[0][:300], worker_logs=pool.log_tail())


def idle_broker_share(storage: Storage, seconds: float | None = None) -> float:
    """The broker's CPU share (of one core) over ``seconds`` (:data:`IDLE_SECONDS`) with the
    workers idle (after :data:`SETTLE_SECONDS`)."""
    seconds = seconds or IDLE_SECONDS
    time.sleep(SETTLE_SECONDS)
    cpu0 = storage.server_load()[0]
    time.sleep(seconds)
    return (storage.server_load()[0] - cpu0) / seconds


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _sizes(text: str) -> list[int]:
    return [parse_size(x) for x in text.split(",") if x]


def _merge_text(r: dict) -> str:
    return "" if r.get("merge") is None else ("merge" if r["merge"] else "alone")


HEADER = (f"{'workers':>7} {'task':>5} {'result':>7} {'':>5} {'tasks/s':>8} {'wall eff':>8} {'eff':>7} "
          f"{'disp med':>8} {'disp p99':>8} {'1st med':>7} {'1st p99':>7} {'1st max':>7} {'no task':>7} {'steady99':>8} {'redis us/t':>10} {'redis':>6} {'client':>6} {'verify':>6} {'decode':>6} "
          f"{'combine':>7} {'I/O':>5} {'books':>5} {'redis MB':>8} {'wait p99':>8} {'return':>7} {'end>ret':>7} "
          f"{'frames':>6} {'MB read':>7} {'depth':>5} {'busy':>5} {'light':>5}")


def format_row(r: dict) -> str:
    """One line of the table (times in ms unless marked)."""
    head = f"{r['workers']:>7} {r['seconds']:>4g}s {_size_text(r['bytes']):>7} {_merge_text(r):>5}"
    if "skipped" in r or "failed" in r:
        return f"{head}  skipped: {r['skipped']}" if "skipped" in r else f"{head}  FAILED: {r['failed']}"
    w = r["client_where"]
    return (f"{head} {r['tasks_per_s']:>8.1f} {r['efficiency_wall'] * 100:>7.2f}% {r['efficiency'] * 100:>6.2f}% "
            f"{r['dispatch_ms_median']:>8.1f} "
            f"{r['dispatch_ms_p99']:>8.1f} {r['first_task_ms_median']:>7.0f} {r['first_task_ms_p99']:>7.0f} "
            f"{r['first_task_ms_max']:>7.0f} {r['workers_without_a_task']:>7} {r['steady_dispatch_ms_p99']:>8.1f} "
            f"{r['redis_cpu_us_per_task']:>10.0f} {r['redis_cpu_share'] * 100:>5.1f}% "
            f"{r['client_cpu_share'] * 100:>5.1f}% " + " ".join(
                f"{w[k] * 100:>{n}.0f}%" for k, n in zip(CATEGORIES, (5, 5, 6, 4, 4)))
            + f" {r['redis_peak_mb']:>8.0f} {r['result_wait_s_p99']:>7.2f}s {r['last_result_to_return_ms']:>6.1f}"
            f" {r['last_end_to_return_s']:>6.2f}s {r['frames_read']:>6} {r['mb_read']:>7.0f} {r['tree_depth']:>5}"
            f" {r['machine_busy_cores']:>5.2f} {r['light_workers_cores']:>5.2f}"
            + (f"  (wall eff counts the {r['workers_took_part']} of {r['workers']} workers that took part)"
               if r.get("workers_took_part", r["workers"]) < r["workers"] else ""))


@click.command("scale")
@click.option("--workers", "workers_text", default="100,300,1000,3000", show_default=True,
              help="Light worker counts, comma-separated.")
@click.option("--seconds", "seconds_text", default="1,10", show_default=True, help="Task durations (s).")
@click.option("--sizes", "sizes_text", default="10kB,1MB,8MB", show_default=True, help="Result sizes.")
@click.option("--waves", default=3, show_default=True, help="Tasks per worker in each map.")
@click.option("--processes", default=0, help="Light worker processes (default: one per 100 workers, at least 2).")
@click.option("--memory-budget", default="4GB", show_default=True,
              help="Skip cells whose results could pass this in all (they wait in Redis when the client lags).")
@click.option("--reduce/--no-reduce", "reduce", default=True, show_default=True,
              help="remote_map(..., reduce=True): results combined with + (else kept as a list).")
@click.option("--merge/--no-merge", default=True, show_default=True,
              help="With --reduce: the workers merge their results first (remote_map's merge=).")
@click.option("--both", is_flag=True,
              help="With --reduce: run each cell twice, the merge on and then off, side by side.")
@click.option("--json", "json_path", default=None, help="Write the figures here.")
@click.option("--ceiling-of", "ceiling_of", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Only print the paper ceiling of figures saved with --json.")
@click.option("--against", default=None, metavar="REF",
              help="Also run the code of this git revision, in turns with this checkout's, and compare "
                   "(--seconds '' measures only the idle pools).")
@click.option("--rounds", default=1, show_default=True, help="With --against: runs of each side.")
@click.option("--curve", is_flag=True,
              help=f"The scaling curve (bench/scalecurve.py): unless given, --workers {scalecurve.WORKERS} "
                   f"--seconds {scalecurve.SECONDS} --sizes {scalecurve.SIZES} and each cell's tasks per worker so "
                   f"that it ideally lasts {scalecurve.CELL_SECONDS:g} s; a verdict per flattened cell, the "
                   f"bend-backs, and --plot.")
@click.option("--plot", "plot_path", default="scale-curve.png", show_default=True,
              help="With --curve or --curve-of: draw the curve into this PNG.")
@click.option("--curve-of", "curve_of", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Only print the table and verdicts of, and draw, a curve saved with --curve --json.")
@click.option("--cpu-group", "cpu_group", type=click.Choice(["own", "none", "both"]), default="own",
              show_default=True,
              help="own: the bench in a cpu group of its own that outweighs the machine's other work "
                   "(bench/priority.py; root and cgroup v1); none: as any process (other busy processes slow the "
                   "light workers' ramp); both: the whole grid once each way, in turns, side by side.")
@click.option("--busy", default=0, show_default=True,
              help="Keep this many other processes busy on the machine meanwhile (a stand-in for another job).")
@click.option("--series", default=None, help="With --json: the setting these figures belong to (the benchmarks "
                                             "page shows the newest result of each series).")
def scale_command(workers_text, seconds_text, sizes_text, waves, processes, memory_budget, reduce, merge,
                  both, json_path, ceiling_of, against, rounds, curve, plot_path, curve_of, cpu_group, busy,
                  series):
    """One Redis, one client, many light workers: throughput, efficiency, costs."""
    if ceiling_of:
        click.echo("\n".join(ceiling_lines(results.load(ceiling_of))))
        return None
    if curve_of:
        return scalecurve.conclude(results.read(curve_of), plot_path)
    with one_at_a_time(say=lambda line: click.echo(line, err=True)), busy_processes(busy):
        return _scale(workers_text, seconds_text, sizes_text, waves, processes, memory_budget, reduce, merge,
                      both, json_path, against, rounds, curve, plot_path, cpu_group, busy, series)


def _scale(workers_text, seconds_text, sizes_text, waves, processes, memory_budget, reduce, merge, both,
           json_path, against, rounds, curve, plot_path, cpu_group, busy, series):
    """The bench itself, alone on the machine (:func:`bench.exclusive.one_at_a_time`)."""
    if against:
        args = ["scale", "--workers", workers_text, "--seconds", seconds_text, "--sizes", sizes_text,
                "--waves", str(waves), "--processes", str(processes), "--memory-budget", memory_budget,
                "--reduce" if reduce else "--no-reduce", "--merge" if merge else "--no-merge",
                "--cpu-group", cpu_group]
        ours, theirs = side_by_side(against, args, rounds, overlay=(  # (how it reads)
            "bench/scale.py", "bench/scalecurve.py", "bench/ceiling.py", "bench/results.py", "bench/exclusive.py",
            "bench/priority.py", "bench/busy.py"))
        out = {"ref": against, "args": args, "ours": ours, "theirs": theirs}
        click.echo("\n".join(compare_lines(against, ours, theirs)))
        if json_path:
            results.write(json_path, "scale", out, series=series)
        return out
    if curve:
        workers_text, seconds_text, sizes_text, waves = scalecurve.grid(
            click.get_current_context(), workers_text, seconds_text, sizes_text, waves)
    counts, durations, sizes = _ints(workers_text), _floats(seconds_text), _sizes(sizes_text)
    waves_of = {s: waves or scalecurve.waves_for(s) for s in durations}     # (the curve's: by duration)
    budget = parse_size(memory_budget)
    merge = merge and reduce
    out: dict = {"cores": os.cpu_count(), "waves": waves or {f"{s:g}": w for s, w in waves_of.items()},
                 "reduce": reduce, "merge": merge, "memory_budget": budget, "busy_processes": busy,
                 "machine_share": {}, "pools": [], "cells": []}
    click.echo(f"bench scale: {os.cpu_count()} cores, {out['waves']} tasks per worker, reduce={reduce}, "
               f"merge={merge}, memory budget {budget / 1e9:.1f} GB", err=True)
    for group in (("own", "none") if cpu_group == "both" else (cpu_group,)):
        with Share(enabled=group == "own") as share, EmbeddedBroker(maxclients=max(4000, 3 * max(counts) + 100)) as b:
            out["machine_share"][group] = share_text(share)
            click.echo(f"the machine ({group}): {out['machine_share'][group]}{busy_text(busy)}", err=True)
            storage = Storage(b.config)
            click.echo(scalecurve.LEGEND if curve else
                       "times in ms; wall eff: busy task time / (workers x the map's wall time, submission to last "
                       "result); eff: per worker, each from its first task to its last (leaves out the ramp and the "
                       "tail); disp: dispatch delay (queued -> taken); "
                       "1st: each worker's first task started after the map's submission (median, p99, max: the "
                       "ramp); no task: workers that got none in the map; steady99: "
                       "the dispatch p99 of the tasks after each worker's first; "
                       "redis: CPU share of one core; client: process CPU share, then where its main thread's "
                       "CPU went; wait: a result's end -> taken by the client; return: last result -> "
                       "remote_map returned; end>ret: the last task's end -> remote_map returned; frames, MB read: "
                       "what the client read of the map's results; depth: the deepest partial's level in the "
                       "tree of partials (1: a worker's own tasks, 0: none merged); busy: cores the whole machine "
                       "used (others' too), light: cores the light workers used")
            click.echo(scalecurve.HEADER if curve else HEADER)
            for n in counts:
                nproc = processes or max(2, math.ceil(n / 100))
                try:
                    pool = LightPool(b.config, n, processes=nproc, prefix=f"w{n}-", start_timeout=300).start()
                except RuntimeError as err:
                    out["pools"].append({"workers": n, "processes": nproc, "cpu_group": group,
                                         "failed": str(err)[:3000]})
                    click.echo(f"-- {n} workers in {nproc} processes: FAILED to register: {str(err).splitlines()[0]}")
                    continue
                with pool:
                    idle = idle_broker_share(storage)
                    pool_row = {"workers": n, "processes": nproc, "register_s": pool.registered_s,
                                "redis_idle_share": idle, "cpu_group": group}
                    out["pools"].append(pool_row)
                    click.echo(f"-- {n} workers in {nproc} processes: registered in {pool.registered_s:.2f} s; "
                               f"Redis idle (heartbeats only): {idle * 100:.1f}% of a core")
                    for seconds in durations:
                        for nbytes in sizes:
                            for merging in ((True, False) if both and reduce else (merge,)):
                                row = _cell(b.config, storage, pool, seconds, nbytes, waves_of[seconds], reduce,
                                            merging, budget)
                                row["cpu_group"] = group
                                out["cells"].append(row)
                                click.echo((scalecurve.format_row if curve and "tasks" in row else format_row)(row))
            storage.close()
    if any("tasks" in c for c in out["cells"]):
        out["ceiling"] = ceiling_lines(out)
        click.echo("\n".join(["", "on paper (bench/ceiling.py):", *out["ceiling"]]))
    if curve:
        scalecurve.annotate(out)                    # (its verdicts go into the JSON)
    if cpu_group == "both":
        out["groups_compared"] = group_lines(out["cells"])
        click.echo("\n".join(["", *out["groups_compared"]]))
    if json_path:
        results.write(json_path, "scale", out, series=series or (scalecurve.SERIES if curve else None))
    if curve:
        scalecurve.conclude(results.envelope("scale", out, series=scalecurve.SERIES), plot_path)
    return out


def share_text(share: Share) -> str:
    """What the bench's figures owe to the rest of the machine (:mod:`bench.priority`)."""
    if share.active:
        return (f"the bench in a cpu group of its own ({BENCH_SHARES} shares against 1024 per other process group; "
                f"the light workers' task halves {TASKS_SHARES} within it)")
    return f"the bench shares the machine as any process does: {share.why_not}"


def busy_text(busy: int) -> str:
    return f"; {busy} other busy process(es) on the machine meanwhile (--busy)" if busy else ""


def group_lines(cells: list[dict]) -> list[str]:
    """Each cell with the bench in its own cpu group and without, side by side: the ramp
    (each worker's first task), the workers that got none, tasks/s.

    >>> c = {"workers": 2, "seconds": 1.0, "bytes": 10_000, "merge": True, "tasks": 2, "tasks_per_s": 1.0,
    ...      "first_task_ms_median": 5.0, "first_task_ms_max": 9.0, "workers_without_a_task": 0}
    >>> for line in group_lines([dict(c, cpu_group="own"), dict(c, cpu_group="none", first_task_ms_max=90.0)]):
    ...     print(line)
    the ramp in its own cpu group (own) and as any process (none): each worker's first task, ms
    cell                            median own  median none     max own    max none  no task own/none  tasks/s own/none
    2 x 1s x 10 kB                         5.0          5.0         9.0        90.0               0/0         1.00/1.00
    """
    by = {}
    for c in cells:
        by.setdefault((c["workers"], c["seconds"], c["bytes"], c.get("merge")), {})[c.get("cpu_group")] = c
    lines = ["the ramp in its own cpu group (own) and as any process (none): each worker's first task, ms",
             f"{'cell':30}{'median own':>12}{'median none':>13}{'max own':>12}{'max none':>12}"
             f"{'no task own/none':>18}{'tasks/s own/none':>18}"]
    for (n, sec, size, _), pair in by.items():
        own, none = pair.get("own", {}), pair.get("none", {})

        def f(c, key, fmt="{:.1f}"):
            return fmt.format(c[key]) if key in c else "failed"
        lines.append(f"{f'{n} x {sec:g}s x {_size_text(size)}':30}{f(own, 'first_task_ms_median'):>12}"
                     f"{f(none, 'first_task_ms_median'):>13}{f(own, 'first_task_ms_max'):>12}"
                     f"{f(none, 'first_task_ms_max'):>12}"
                     f"{f(own, 'workers_without_a_task', '{}') + '/' + f(none, 'workers_without_a_task', '{}'):>18}"
                     f"{f(own, 'tasks_per_s', '{:.2f}') + '/' + f(none, 'tasks_per_s', '{:.2f}'):>18}")
    return lines


def compare_lines(ref: str, ours: list[dict], theirs: list[dict]) -> list[str]:
    """Medians of this checkout's runs and ``ref``'s: the broker's share with each pool idle,
    and each cell's rate, efficiency, broker cost per task and ramp (each worker's first task)."""
    def med(runs, pick):
        got = [v for v in (pick(r) for r in runs) if v is not None]
        return statistics.median(got) if got else float("nan")

    def pool(n):
        return lambda r: next((p.get("redis_idle_share") for p in r["pools"] if p["workers"] == n), None)

    def cell(c, key):
        return lambda r: next((x.get(key) for x in r["cells"] if (x["workers"], x["seconds"], x["bytes"]) == c), None)

    lines = [f"this checkout against {ref} ({len(ours)} run(s) each, in turns; medians)",
             f"{'':44}{'this checkout':>14}{ref[:12]:>14}"]
    for n in sorted({p["workers"] for r in ours for p in r["pools"]}):
        a, b = med(ours, pool(n)), med(theirs, pool(n))
        lines.append(f"{f'{n} idle workers: Redis, % of a core':44}{a * 100:>14.1f}{b * 100:>14.1f}")
    for c in sorted({(x["workers"], x["seconds"], x["bytes"]) for r in ours for x in r["cells"] if "tasks" in x}):
        for key, label, scale in (("tasks_per_s", "tasks/s", 1), ("efficiency_wall", "wall eff %", 100),
                                  ("efficiency", "eff per worker %", 100), ("redis_cpu_us_per_task", "redis us/task", 1),
                                  ("first_task_ms_median", "1st task ms, median", 1),
                                  ("first_task_ms_max", "1st task ms, max", 1),
                                  ("workers_without_a_task", "workers without a task", 1)):
            a, b = med(ours, cell(c, key)), med(theirs, cell(c, key))
            lines.append(f"{f'{c[0]} x {c[1]:g}s x {_size_text(c[2])}: {label}':44}{a * scale:>14.2f}{b * scale:>14.2f}")
    return lines
