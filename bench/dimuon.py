"""``bench dimuon``: the dimuon analysis cold and warm, through redis-htcondor, through
dask.distributed (same function, same files, a worker-global cache of the same size) and
as a bare single-process loop, all in one run.

    bench dimuon --workers 2 --files 8 --events 1000000 --chunk-size 500000 --compression LZ4
"""
from __future__ import annotations

import json
import logging
import os
import statistics
import time

import click

from rhtc.broker import context
from rhtc.client.reduce import combine
from rhtc.examples.dimuon import dimuon
from rhtc.worker.cache import BranchCache, parse_size
from rhtc.worker.memory import tune_malloc

_DASK_CACHE_BYTES = int(os.environ.get("RHTC_BENCH_CACHE", "4000000000"))


def warm_up(chunk):
    """Run the analysis once on a tiny file of its own, so that the cold run measures
    reading the data, not importing and first-use set-up of uproot, awkward and hist
    (both systems and the bare loop get the same warm-up)."""
    dimuon(chunk)
    time.sleep(0.05)                     # keep each worker busy long enough to get one
    return os.getpid()


def dask_dimuon(chunk):
    """The same analysis on a dask worker, with a process-global cache of the same size
    as ours, reached the same way (so dask gets its fair chance)."""
    if context.current is None:
        tune_malloc()                   # as our workers do
        context.current = context.TaskContext(worker=f"dask-{os.getpid()}",
                                              cache=BranchCache(_DASK_CACHE_BYTES))
    return dimuon(chunk)


def _page_cache(paths) -> None:
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(1 << 24):
                pass


def _bare(chunks, cache_bytes: int, warm: list) -> dict:
    """One process, one chunk after the other: cold (no cache), then with a cache, twice."""
    from rhtc.client.chunks import close_files
    close_files()                      # pay for opening the files, as the workers do
    tune_malloc()                      # as our workers do
    for c in warm:
        dimuon(c)
    out = {}
    t = time.perf_counter()
    total = None
    for c in chunks:
        total = combine(total, dimuon(c))
    out["cold_s"] = time.perf_counter() - t
    saved = context.current
    context.current = context.TaskContext(worker="bare", cache=BranchCache(cache_bytes))
    try:
        for c in chunks:
            dimuon(c)
        t = time.perf_counter()
        for c in chunks:
            dimuon(c)
        out["warm_s"] = time.perf_counter() - t
    finally:
        context.current = saved
    out["events"] = total["events"]
    out["pairs"] = total["pairs"]
    return out


def _ours(chunks, workers: int, cache: str, broker_url: str | None, warm: list) -> dict:
    from rhtc import LocalCluster, live_workers, remote_map, submit
    cluster = None
    if broker_url is None:
        t = time.perf_counter()
        cluster = LocalCluster(n_workers=workers, cache_size=cache).start()
        start_s = time.perf_counter() - t
        broker = cluster
    else:
        broker, start_s = broker_url, 0.0
    try:
        n_live = len(live_workers(broker))
        remote_map(warm_up, warm * n_live * 3, broker=broker, progress=False, routing=False)
        out = {"workers": n_live, "startup_s": start_s}
        for phase in ("cold", "warm"):
            t = time.perf_counter()
            h = submit(dimuon, chunks, broker=broker, reduce=True, label=f"dimuon {phase}")
            result = h.wait()
            out[f"{phase}_s"] = time.perf_counter() - t
            out[f"{phase}_bytes_file"] = sum(m.get("bytes_file", 0) for m in h.run.metas)
            out[f"{phase}_bytes_cache"] = sum(m.get("bytes_cache", 0) for m in h.run.metas)
            out[f"{phase}_routed"] = h.run.routed_to_workers
            out[f"{phase}_events"] = result["events"]
            out[f"{phase}_pairs"] = result["pairs"]
    finally:
        if cluster is not None:
            cluster.close()
    return out


def _dask(chunks, workers: int, warm: list) -> dict:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        return {"error": "dask.distributed is not installed (pip install 'redis-htcondor[bench]')"}
    t = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        out = {"workers": workers, "startup_s": time.perf_counter() - t}
        client.gather(client.map(warm_up, warm * workers * 3, pure=False))
        for phase in ("cold", "warm"):
            t = time.perf_counter()
            total = None
            for fut in as_completed(client.map(dask_dimuon, chunks, pure=False)):
                total = combine(total, fut.result())
            out[f"{phase}_s"] = time.perf_counter() - t
            out[f"{phase}_events"] = total["events"]
    return out


def _median_run(runs: list[dict]) -> dict:
    """The runs' figures, with cold and warm times replaced by their medians."""
    out = dict(runs[-1])
    for phase in ("cold_s", "warm_s"):
        if all(phase in r for r in runs):
            out[phase] = statistics.median(r[phase] for r in runs)
            out[phase.replace("_s", "_all_s")] = [r[phase] for r in runs]
    out["warm_bytes_file"] = max((r.get("warm_bytes_file", 0) for r in runs), default=0)
    return out


def _mhz(events: int, seconds: float) -> float:
    return events / seconds / 1e6 if seconds else float("nan")


@click.command("dimuon")
@click.option("--workers", default=2, show_default=True, help="Workers (each system).")
@click.option("--files", default=8, show_default=True, help="Generated files.")
@click.option("--events", default=1_000_000, show_default=True, help="Events per file.")
@click.option("--chunk-size", default=500_000, show_default=True, help="Entries per chunk.")
@click.option("--compression", default="LZ4", show_default=True, help="LZMA, ZLIB, LZ4 or ZSTD.")
@click.option("--cache-size", default="4GB", show_default=True, help="Branch cache per worker (both systems).")
@click.option("--data-dir", default="data/generated", show_default=True)
@click.option("--broker", "broker_url", default=None,
              help="Use the workers already on this broker (a cluster) instead of starting them.")
@click.option("--dask/--no-dask", "with_dask", default=True, show_default=True)
@click.option("--dask-workers", type=int, default=None, help="dask workers (default: --workers).")
@click.option("--repeats", default=2, show_default=True,
              help="Runs of each system, alternating which goes first; medians are quoted.")
@click.option("--json", "json_path", default="bench-dimuon.json", show_default=True)
def dimuon_command(workers, files, events, chunk_size, compression, cache_size, data_dir, broker_url,
                   with_dask, dask_workers, repeats, json_path):
    """Dimuon analysis cold and warm: ours vs dask vs the bare single-process loop."""
    from rhtc.bench.datagen import make_data
    from rhtc import make_chunks
    global _DASK_CACHE_BYTES
    _DASK_CACHE_BYTES = parse_size(cache_size)
    os.environ["RHTC_BENCH_CACHE"] = str(_DASK_CACHE_BYTES)     # inherited by dask's workers
    paths = make_data(data_dir, files=files, events=events, compression=compression)
    _page_cache(paths)
    chunks = make_chunks(paths, step=chunk_size)
    warm = make_chunks(make_data(os.path.join(data_dir, "warm-up"), files=1, events=2000,
                                 compression=compression, progress=False), step=2000)
    n_events = sum(c.num_entries for c in chunks)
    click.echo(f"bench dimuon: {len(paths)} {compression} files, {n_events:,} events, {len(chunks)} chunks "
               f"of {chunk_size:,}; {workers} workers; {os.cpu_count()} cores; files in the page cache",
               err=True)
    bare = _bare(chunks, _DASK_CACHE_BYTES, warm)
    runs_ours, runs_dask = [], []
    for r in range(repeats):     # alternate the order: whoever runs first on a fresh VM pays more
        order = ("ours", "dask") if r % 2 == 0 else ("dask", "ours")
        for system in order:
            if system == "ours":
                runs_ours.append(_ours(chunks, workers, cache_size, broker_url, warm))
            elif with_dask:
                runs_dask.append(_dask(chunks, dask_workers or workers, warm))
    ours, theirs = _median_run(runs_ours), (_median_run(runs_dask) if runs_dask else {})
    assert ours["cold_events"] == ours["warm_events"] == bare["events"] == n_events
    assert ours["cold_pairs"] == bare["pairs"], "different physics from the same files"
    if theirs.get("cold_events") is not None:
        assert theirs["cold_events"] == n_events

    rows = [("bare loop (1 process)", bare), (f"redis-htcondor ({ours['workers']})", ours)]
    if "cold_s" in theirs:
        rows.append((f"dask ({theirs['workers']})", theirs))
    click.echo(f"{'':26}{'cold s':>8}{'cold MHz':>10}{'warm s':>8}{'warm MHz':>10}{'warm/cold':>10}")
    for name, r in rows:
        click.echo(f"{name:26}{r['cold_s']:>8.2f}{_mhz(n_events, r['cold_s']):>10.2f}{r['warm_s']:>8.2f}"
                   f"{_mhz(n_events, r['warm_s']):>10.2f}{r['cold_s'] / r['warm_s']:>9.1f}x")
    summary = {
        "cold_vs_bare": bare["cold_s"] / ours["cold_s"],
        "warm_vs_cold": ours["cold_s"] / ours["warm_s"],
        "warm_bytes_from_file": ours["warm_bytes_file"],
        "warm_chunks_routed_to_their_worker": ours["warm_routed"],
    }
    click.echo(f"ours cold rate / bare cold rate: {summary['cold_vs_bare']:.2f}x   "
               f"ours warm/cold speedup: {summary['warm_vs_cold']:.1f}x   "
               f"warm run read {ours['warm_bytes_file']:,} bytes from files, "
               f"{ours['warm_routed']}/{len(chunks)} chunks routed to the worker holding them")
    if "cold_s" in theirs:
        summary["runtime_ratio_cold_ours_over_dask"] = ours["cold_s"] / theirs["cold_s"]
        summary["runtime_ratio_warm_ours_over_dask"] = ours["warm_s"] / theirs["warm_s"]
        click.echo(f"runtime ours/dask: cold {summary['runtime_ratio_cold_ours_over_dask']:.2f}, "
                   f"warm {summary['runtime_ratio_warm_ours_over_dask']:.2f}")
    result = {"files": len(paths), "events": n_events, "chunk_size": chunk_size, "compression": compression,
              "cores": os.cpu_count(), "bare": bare, "ours": ours, "dask": theirs, "summary": summary}
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(result, fh, indent=2)
        click.echo(f"figures: {json_path}", err=True)
    return result
