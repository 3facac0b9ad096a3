"""``bench overhead``: what the queue itself costs, side by side with dask.distributed.

* round trip: one empty task at a time (``remote_map(noop, [i])``), N times, median;
* throughput: a map of many no-op tasks, median of a few repeats;
* with ``--sleep A:B``: tasks that sleep uniformly A-B s, and the timeline efficiency
  (the seed's 150-worker, 10,000-task test).

Both systems run N single-threaded worker processes on this machine, in the same run.
"""
from __future__ import annotations

import contextlib
import os
import random
import resource
import statistics
import time

import click

from . import profile, results
from .against import side_by_side
from .profile import Probe


def noop(x):
    return x


def nap(seconds):
    time.sleep(seconds)
    return seconds


def _measure(one, many, roundtrips: int, tasks: int, repeats: int, r=None) -> dict:
    """Round trip of ``one(i)`` (median, p90 of ``roundtrips``) and throughput of
    ``many(range(tasks))`` (median of ``repeats``), checking the answers; with the broker's
    client ``r``, the profile of each (:mod:`bench.profile`: the round trips' per round
    trip, the last big map's per task)."""
    rts = []
    with Probe(r) if r is not None else contextlib.nullcontext() as probe:
        for i in range(roundtrips):
            t = time.perf_counter()
            assert one(i) in (i, [i])
            rts.append(time.perf_counter() - t)
    out = {"profile_roundtrip": probe.per(roundtrips)} if probe else {}
    rates, cpu = [], []
    for _ in range(repeats):
        with Probe(r) if r is not None else contextlib.nullcontext() as probe:
            t, c = time.perf_counter(), time.process_time()
            res = many(range(tasks))
            rates.append(tasks / (time.perf_counter() - t))
            cpu.append((time.process_time() - c) / tasks)
        assert list(res) == list(range(tasks))
        if probe:
            out["profile_map"] = probe.per(tasks)
    return {"roundtrip_ms_median": statistics.median(rts) * 1e3,
            "roundtrip_ms_p90": sorted(rts)[int(0.9 * len(rts))] * 1e3,
            "tasks_per_s_median": statistics.median(rates),
            "client_cpu_us_per_task": statistics.median(cpu) * 1e6, **out}


def _ours(workers: int, roundtrips: int, tasks: int, repeats: int, sleep: tuple | None,
          timeline: str | None, record_path: str | None) -> dict:
    from rhtc import LocalCluster, last_map, remote_map
    out: dict = {}
    t0 = time.perf_counter()
    os.environ.setdefault("RHTC_PRELOAD", "none")  # (idle workers importing the analysis stack: not the queue's cost)
    with LocalCluster(n_workers=workers, cache_size="64MB") as cluster:
        out["startup_s"] = time.perf_counter() - t0
        remote_map(noop, range(workers * 4), broker=cluster, progress=False)   # warm up
        if sleep is None:
            from ..broker.storage import Storage
            r = Storage(cluster.config)
            out.update(_measure(lambda i: remote_map(noop, [i], broker=cluster, progress=False),
                                lambda xs: remote_map(noop, xs, broker=cluster, progress=False),
                                roundtrips, tasks, repeats, r))
            r.close()
            out["client_peak_rss_mb"] = _peak_rss_mb()
        else:
            rng = random.Random(1)
            args = [rng.uniform(*sleep) for _ in range(tasks)]
            t = time.perf_counter()
            res = remote_map(nap, args, broker=cluster, progress=True, label="nap")
            returned = time.time()
            out["wall_s"] = time.perf_counter() - t
            rec = last_map().record()
            out["last_result_to_return_ms"] = (returned - last_map().run.ledger.last_received()) * 1e3
            from ..client.reports.timeline import efficiency, plot_timeline
            eff = efficiency(rec)
            out["efficiency_wall"] = eff["efficiency_wall"]
            out["efficiency"] = eff["efficiency"]
            out["efficiency_to_end"] = eff["efficiency_to_end"]
            out["worker_efficiency_min"] = min(eff["per_worker"].values())
            out["worker_efficiency_median"] = statistics.median(eff["per_worker"].values())
            out["tail_s"] = eff["tail"]
            out["ideal_s"] = sum(args) / workers
            assert res == args
            if record_path:
                rec.save(record_path)
            if timeline:
                plot_timeline(rec, path=timeline)
    return out


def _peak_rss_mb() -> float:
    """This process's peak resident memory so far (MB): the client's, as dask runs after."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _bare_redis(roundtrips: int) -> dict:
    """The floors (:mod:`bench.floor`): one round trip through a bare Redis list queue, and
    through the least a queue with our guarantees does (token fetched, token in the frame)."""
    from ..broker.embedded import EmbeddedBroker
    from .floor import TOKEN_MODES, bare_round_trips, guarded_round_trips
    from ..broker.storage import Storage
    with EmbeddedBroker() as b:
        r = Storage(b.config)
        with Probe(r) as probe:
            rts = bare_round_trips(b.config, roundtrips, warmup=0)
        guarded = {mode: statistics.median(guarded_round_trips(b.config, roundtrips, token=mode)) * 1e3
                   for mode in TOKEN_MODES}
        r.close()
    return {"roundtrip_ms_median": statistics.median(rts) * 1e3, "profile_roundtrip": probe.per(roundtrips),
            "guarded_ms_median": guarded}


def _dask(workers: int, roundtrips: int, tasks: int, repeats: int, sleep: tuple | None) -> dict:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        return {"error": "dask.distributed is not installed (pip install 'redis-htcondor[bench]')"}
    out: dict = {}
    t0 = time.perf_counter()
    import logging
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        out["startup_s"] = time.perf_counter() - t0
        client.gather(client.map(noop, range(workers * 4), pure=False))
        if sleep is None:
            out.update(_measure(lambda i: client.submit(noop, i, pure=False).result(),
                                lambda xs: client.gather(client.map(noop, xs, pure=False)),
                                roundtrips, tasks, repeats))
        else:
            rng = random.Random(1)
            args = [rng.uniform(*sleep) for _ in range(tasks)]
            t = time.perf_counter()
            client.gather(client.map(nap, args, pure=False))
            out["wall_s"] = time.perf_counter() - t
            out["ideal_s"] = sum(args) / workers
    return out


def _ratio(a, b):
    return (a / b) if a and b else float("nan")


@click.command("overhead")
@click.option("--workers", default=2, show_default=True, help="Worker processes (each system).")
@click.option("--roundtrips", default=300, show_default=True, help="Sequential one-task maps.")
@click.option("--tasks", default=5000, show_default=True, help="Tasks in the throughput map.")
@click.option("--repeats", default=3, show_default=True, help="Throughput repeats (median).")
@click.option("--sleep", default=None, help="A:B - tasks sleep uniformly A-B s (efficiency test).")
@click.option("--dask/--no-dask", "with_dask", default=None, help="Also run dask (default: yes, unless --sleep).")
@click.option("--timeline", default=None, help="With --sleep: write the timeline PNG here.")
@click.option("--record", "record_path", default=None, help="With --sleep: save the run record (JSON).")
@click.option("--compare-leases", is_flag=True,
              help="Also run ours with leases off (RHTC_LEASES=0) to measure what they cost.")
@click.option("--against", "against", default=None, metavar="REF",
              help="Also run the code of this git revision, in turns with this checkout's, and compare "
                   "(no dask; --rounds runs each).")
@click.option("--rounds", default=2, show_default=True, help="With --against: runs of each side.")
@click.option("--json", "json_path", default=None, help="Write the figures here.")
def overhead_command(workers, roundtrips, tasks, repeats, sleep, with_dask, timeline, record_path,
                     compare_leases, against, rounds, json_path):
    """Queue overhead: round trip and no-op throughput, ours beside dask's."""
    sl = tuple(float(x) for x in sleep.split(":")) if sleep else None
    if sl is not None and (len(sl) != 2 or sl[0] > sl[1] or sl[0] < 0):
        raise click.BadParameter("use --sleep A:B with 0 <= A <= B, e.g. 0.2:0.4")
    if against:
        if sl is not None:
            raise click.BadParameter("--against compares the no-op figures: leave --sleep out")
        args = ["overhead", "--workers", str(workers), "--roundtrips", str(roundtrips), "--tasks", str(tasks),
                "--repeats", str(repeats), "--no-dask"]
        result = compare(against, args, rounds)
        if json_path:
            results.write(json_path, "overhead", result)
        return
    with_dask = (sl is None) if with_dask is None else with_dask
    click.echo(f"bench overhead: {workers} workers, {os.cpu_count()} cores", err=True)
    ours = _ours(workers, roundtrips, tasks, repeats, sl, timeline, record_path)
    theirs = _dask(workers, roundtrips, tasks, repeats, sl) if with_dask else {}
    result = {"workers": workers, "tasks": tasks, "sleep": sleep, "ours": ours, "dask": theirs}
    if sl is None:
        result["bare_redis"] = _bare_redis(roundtrips)
    if compare_leases and sl is None:
        from ..broker.wire.config import Settings
        leases = Settings.env_name("leases")
        os.environ[leases] = "0"                   # inherited by the workers started next
        try:
            bare = _ours(workers, roundtrips, tasks, repeats, None, None, None)
        finally:
            del os.environ[leases]
        # a second run with leases, after the no-lease run, so that drift shows up in both orders
        again = _ours(workers, roundtrips, tasks, repeats, None, None, None)
        with_l_rt = statistics.median([ours["roundtrip_ms_median"], again["roundtrip_ms_median"]])
        with_l_tp = statistics.median([ours["tasks_per_s_median"], again["tasks_per_s_median"]])
        result["no_leases"] = bare
        result["lease_cost"] = {"roundtrip": with_l_rt / bare["roundtrip_ms_median"] - 1,
                                "throughput": 1 - with_l_tp / bare["tasks_per_s_median"]}
        click.echo(f"leases cost: round trip {result['lease_cost']['roundtrip'] * 100:+.1f}% "
                   f"({with_l_rt:.3f} vs {bare['roundtrip_ms_median']:.3f} ms), throughput "
                   f"{result['lease_cost']['throughput'] * 100:+.1f}% ({with_l_tp:,.0f} vs "
                   f"{bare['tasks_per_s_median']:,.0f} tasks/s)")
    if sl is None:
        click.echo(f"{'':24}{'redis-htcondor':>16}{'dask':>12}{'ratio':>10}")
        click.echo(f"{'round trip median (ms)':24}{ours['roundtrip_ms_median']:>16.3f}"
                   f"{theirs.get('roundtrip_ms_median', float('nan')):>12.3f}"
                   f"{_ratio(theirs.get('roundtrip_ms_median'), ours['roundtrip_ms_median']):>9.1f}x")
        click.echo(f"{'round trip p90 (ms)':24}{ours['roundtrip_ms_p90']:>16.3f}"
                   f"{theirs.get('roundtrip_ms_p90', float('nan')):>12.3f}")
        click.echo(f"{'bare Redis queue (floor)':24}{result['bare_redis']['roundtrip_ms_median']:>16.3f}"
                   "   ms round trip: LPUSH/BRPOP/RPUSH/BLPOP, nothing else")
        for mode, ms in result["bare_redis"]["guarded_ms_median"].items():
            click.echo(f"{'guarded floor, ' + mode:24}{ms:>16.3f}   ms round trip: signed, leased, a liveness "
                       f"token {'read by the lease' if mode == 'fetched' else 'in the frame'}; no map")
        click.echo(f"{'no-op tasks/s (median)':24}{ours['tasks_per_s_median']:>16,.0f}"
                   f"{theirs.get('tasks_per_s_median', float('nan')):>12,.0f}"
                   f"{_ratio(ours['tasks_per_s_median'], theirs.get('tasks_per_s_median')):>9.1f}x")
        click.echo(f"{'client CPU per task (us)':24}{ours['client_cpu_us_per_task']:>16.1f}"
                   f"{theirs.get('client_cpu_us_per_task', float('nan')):>12.1f}"
                   "   (the client process's CPU time / tasks: what the map costs the notebook)")
        click.echo(f"{'client peak RSS (MB)':24}{ours['client_peak_rss_mb']:>16,.0f}"
                   f"   ({tasks:,} tasks a map, results held in a list)")
        for line in profile.table({"round trip": ours.get("profile_roundtrip"),
                                   "bare queue": result["bare_redis"].get("profile_roundtrip"),
                                   f"{tasks:,}-task map": ours.get("profile_map")}):
            click.echo(line)
        result["roundtrip_speedup_vs_dask"] = _ratio(theirs.get("roundtrip_ms_median"), ours["roundtrip_ms_median"])
        result["throughput_ratio_vs_dask"] = _ratio(ours["tasks_per_s_median"], theirs.get("tasks_per_s_median"))
    else:
        click.echo(f"{tasks} tasks sleeping {sleep} s on {workers} workers: wall {ours['wall_s']:.1f} s "
                   f"(ideal {ours['ideal_s']:.1f} s)")
        click.echo(f"efficiency by the wall clock (busy / (workers x submission to last result)): "
                   f"{ours['efficiency_wall'] * 100:.2f}%")
        click.echo(f"mean efficiency per worker (timeline): {ours['efficiency'] * 100:.2f}%   per worker: min "
                   f"{ours['worker_efficiency_min'] * 100:.2f}%, median {ours['worker_efficiency_median'] * 100:.2f}%")
        click.echo(f"efficiency counting each worker's wait after its last task until the map's end: "
                   f"{ours['efficiency_to_end'] * 100:.2f}%")
        click.echo(f"tail (95% -> 100% done): {ours['tail_s']:.2f} s   last result -> remote_map "
                   f"returned: {ours['last_result_to_return_ms']:.1f} ms")
        if theirs.get("wall_s"):
            click.echo(f"dask wall {theirs['wall_s']:.1f} s  (ours/dask {ours['wall_s'] / theirs['wall_s']:.2f})")
        if timeline:
            click.echo(f"timeline: {timeline}")
    if json_path:
        results.write(json_path, "overhead", result)
    return result


#: this bench's own files: the same on both sides of --against (only the code under test differs)
HARNESS = ("bench/overhead.py", "bench/profile.py", "bench/against.py", "bench/floor.py")
#: what --against compares: (label, how to read it from a run's figures, format)
COMPARED = [
    ("round trip median (ms)", lambda r: r["ours"]["roundtrip_ms_median"], ".3f"),
    ("bare queue round trip (ms)", lambda r: r["bare_redis"]["roundtrip_ms_median"], ".3f"),
    ("round trip / bare queue", lambda r: r["ours"]["roundtrip_ms_median"] / r["bare_redis"]["roundtrip_ms_median"], ".2f"),
] + [(f"guarded floor, {mode} (ms)", (lambda m: lambda r: r["bare_redis"]["guarded_ms_median"][m])(mode), ".3f")
     for mode in ("fetched", "in-frame")] + [
    ("guarded floor, in-frame / bare queue", lambda r: r["bare_redis"]["guarded_ms_median"]["in-frame"]
     / r["bare_redis"]["roundtrip_ms_median"], ".2f"),
    ("no-op tasks/s", lambda r: r["ours"]["tasks_per_s_median"], ",.0f"),
    ("client CPU per task (us)", lambda r: r["ours"]["client_cpu_us_per_task"], ".1f"),
    ("client peak RSS (MB)", lambda r: r["ours"]["client_peak_rss_mb"], ",.0f"),
] + [(f"{where}: {label}", (lambda k, p: lambda r: r["ours"][p][k])(key, prof), ".1f")
     for where, prof in (("round trip", "profile_roundtrip"), ("map, per task", "profile_map"))
     for key, label in profile.FIELDS.items()]


def compare(ref: str, args: list[str], rounds: int) -> dict:
    """Run ``bench overhead`` here and at ``ref`` in turns; print medians side by side."""
    ours, theirs = side_by_side(ref, args, rounds, overlay=HARNESS)
    click.echo(f"bench overhead {' '.join(args[1:])}: this checkout against {ref}, {rounds} runs each "
               "in turns, medians")
    click.echo(f"{'':44}{'this checkout':>14}{ref[:12]:>14}{'ratio':>8}")
    out = {"ref": ref, "args": args, "ours": ours, "theirs": theirs, "medians": {}}
    for label, read, fmt in COMPARED:
        a, b = (_median_of(read, runs) for runs in (ours, theirs))
        out["medians"][label] = [a, b]
        cell = lambda v: f"{'n/a':>14}" if v is None else f"{v:>14{fmt}}"      # noqa: E731
        click.echo(f"{label:44}{cell(a)}{cell(b)}{_ratio(a, b):>7.2f}x")
    return out


def _median_of(read, runs: list[dict]):
    got = []
    for r in runs:
        try:
            got.append(read(r))
        except (KeyError, TypeError, ZeroDivisionError):
            pass
    return statistics.median(got) if got else None
