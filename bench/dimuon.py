"""``bench dimuon``: the dimuon analysis cold and warm, through redis-htcondor, through
dask.distributed (same function, same files, a worker-global cache of the same size) and
as a bare single-process loop, all in one run.

    bench dimuon --workers 2 --files 8 --events 1000000 --chunk-size 500000 --compression LZ4
"""
from __future__ import annotations

import os

import click

from .dimuon_dask import run_dask
from .dimuon_runs import (HEADER, Report, _bare, _check_physics, _median_run, _ours,
                                    read_into_page_cache, auto_chunk_size, row, CHUNKS_PER_WORKER, MAX_CHUNK)
from ..broker.wire.config import parse_size


@click.command("dimuon")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Workers (each system; at least 1).")
@click.option("--files", type=click.IntRange(min=1), default=8, show_default=True, help="Generated files.")
@click.option("--events", type=click.IntRange(min=1), default=1_000_000, show_default=True, help="Events per file.")
@click.option("--chunk-size", type=int, default=None,
              help=f"Entries per chunk [default: >= {CHUNKS_PER_WORKER} chunks per worker, at most {MAX_CHUNK:,}].")
@click.option("--compression", default="LZ4", show_default=True, help="LZMA, ZLIB, LZ4 or ZSTD.")
@click.option("--cache-size", default="4GB", show_default=True, help="Branch cache per worker (both systems).")
@click.option("--data-dir", default="data/generated", show_default=True)
@click.option("--broker", "broker_url", default=None,
              help="Use the workers already on this broker (a cluster) instead of starting them.")
@click.option("--dask/--no-dask", "with_dask", default=True, show_default=True)
@click.option("--dask-workers", type=click.IntRange(min=1), default=None, help="dask workers (default: --workers).")
@click.option("--dask-timeout", type=float, default=None,
              help="Seconds dask may take to start and to warm up [each 60 + 2 per worker] and for "
                   "each run [max(120, 20x ours)]; past them it is stopped and reported in one line.")
@click.option("--repeats", default=2, show_default=True,
              help="Runs of each system, alternating which goes first; medians are quoted "
                   "(--restart: warm runs, and restarts of every worker, of ours).")
@click.option("--xrootd", is_flag=True, help="Read the files over root:// from a local xrootd server "
                                             "through a TCP proxy that adds latency.")
@click.option("--latency-ms", default="0,5,20", show_default=True,
              help="With --xrootd: added round-trip latencies to measure, in ms.")
@click.option("--restart", is_flag=True,
              help="Warm after a restart: cold, warm, every worker replaced on the same node, rerun; "
                   "RAM cache vs RAM + the node's disk tier, per codec (--compression LZ4,LZMA by default).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Progress bars (stderr).")
@click.option("--json", "json_path", default="bench-dimuon.json", show_default=True)
def dimuon_command(workers, files, events, chunk_size, compression, cache_size, data_dir, broker_url,
                   with_dask, dask_workers, dask_timeout, repeats, xrootd, latency_ms, restart, progress, json_path):
    """Dimuon analysis cold and warm: ours vs dask vs the bare single-process loop."""
    if restart:
        from .dimuon_restart import restart_command
        codecs = [c.strip() for c in (compression if compression != "LZ4" else "LZ4,LZMA").split(",") if c.strip()]
        data = restart_command(codecs, workers, files, events, chunk_size, cache_size, data_dir, with_dask, progress,
                               repeats)
        if json_path:
            Report(json_path, restart=data).save()
        return data
    from ..client.synthetic import make_data
    from rhtc import make_chunks
    cache_bytes = parse_size(cache_size)
    dask_workers = dask_workers or workers
    paths = make_data(data_dir, files=files, events=events, compression=compression, progress=progress)
    read_into_page_cache(paths)
    chunk_size = chunk_size or auto_chunk_size(files * events, max(workers, dask_workers if with_dask else 0))
    chunks = make_chunks(paths, step=chunk_size)
    warm = make_chunks(make_data(os.path.join(data_dir, "warm-up"), files=1, events=2000,
                                 compression=compression, progress=False), step=2000)
    n_events = sum(c.num_entries for c in chunks)
    click.echo(f"bench dimuon: {len(paths)} {compression} files, {n_events:,} events, {len(chunks)} chunks "
               f"of {chunk_size:,} ({len(chunks) / workers:.1f} per worker); {workers} workers"
               f"{f' (dask: {dask_workers})' if with_dask and dask_workers != workers else ''}; "
               f"{os.cpu_count()} cores; files in the page cache", err=True)
    report = Report(json_path, files=len(paths), events=n_events, chunk_size=chunk_size,
                    chunks_per_worker=len(chunks) / workers, compression=compression, cores=os.cpu_count())
    if xrootd:
        from .dimuon_xrootd import run_latencies
        return run_latencies(report, paths, os.path.abspath(data_dir), chunks, warm,
                             [float(x) for x in latency_ms.split(",") if x.strip()], workers=workers,
                             dask_workers=dask_workers if with_dask else 0, cache_size=cache_size,
                             dask_timeout=dask_timeout, progress=progress)
    click.echo(HEADER)
    bare = _bare(chunks, cache_bytes, warm)
    report.add("bare", "bare loop (1 process)", bare, n_events)
    runs_ours, runs_dask = [], []
    for r in range(repeats):     # alternate the order: whoever runs first on a fresh VM pays more
        for system in (("ours", "dask") if r % 2 == 0 else ("dask", "ours")):
            tag = f" run {r + 1}" if repeats > 1 else ""
            if system == "ours":
                runs_ours.append(_ours(chunks, workers, cache_size, broker_url, warm, progress))
                report.add("ours" if r == 0 else f"ours_{r + 1}", f"redis-htcondor ({workers}){tag}",
                           runs_ours[-1], n_events)
            elif with_dask:
                ours_cold = next((x["cold_s"] for x in runs_ours if "cold_s" in x), None)
                runs_dask.append(run_dask(chunks, warm, workers=dask_workers, cache_bytes=cache_bytes,
                                          start_bound=dask_timeout, progress=progress,
                                          run_bound=dask_timeout or max(120.0, 20 * (ours_cold or 30.0))))
                report.add("dask" if r == 0 else f"dask_{r + 1}", f"dask ({dask_workers}){tag}",
                           runs_dask[-1], n_events)
    ours, theirs = _median_run(runs_ours), _median_run(runs_dask)
    _check_physics({"ours": ours, "dask": theirs}, n_events, bare["pairs"])
    summary = _summary(bare, ours, theirs, len(chunks))
    if repeats > 1:
        click.echo(f"\nmedians of {repeats} runs:\n{HEADER}")
        for name, r in (("bare loop (1 process)", bare), (f"redis-htcondor ({workers})", ours),
                        (f"dask ({dask_workers})", theirs)):
            if r:
                click.echo(row(name, r, n_events))
    report.data.update(ours=ours, dask=theirs, summary=summary)
    report.save()
    if json_path:
        click.echo(f"figures: {json_path}", err=True)
    return report.data


def _summary(bare: dict, ours: dict, theirs: dict, n_chunks: int) -> dict:
    if "cold_s" not in ours:
        click.echo(f"redis-htcondor: {ours.get('error', 'no figures')}")
        return {}
    summary = {"cold_vs_bare": bare["cold_s"] / ours["cold_s"], "warm_vs_cold": ours["cold_s"] / ours["warm_s"],
               "warm_bytes_from_file": ours["warm_bytes_file"],
               "warm_chunks_routed_to_their_worker": ours["warm_routed"]}
    click.echo(f"ours cold rate / bare cold rate: {summary['cold_vs_bare']:.2f}x   "
               f"ours warm/cold speedup: {summary['warm_vs_cold']:.1f}x   "
               f"warm run read {ours['warm_bytes_file']:,} bytes from files, "
               f"{ours['warm_routed']}/{n_chunks} chunks routed to the worker holding them")
    if "cold_s" in theirs and "warm_s" in theirs:
        summary["runtime_ratio_cold_ours_over_dask"] = ours["cold_s"] / theirs["cold_s"]
        summary["runtime_ratio_warm_ours_over_dask"] = ours["warm_s"] / theirs["warm_s"]
        click.echo(f"runtime ours/dask: cold {summary['runtime_ratio_cold_ours_over_dask']:.2f}, "
                   f"warm {summary['runtime_ratio_warm_ours_over_dask']:.2f}")
    elif theirs:
        click.echo(f"dask: {theirs.get('error', 'no figures')}")
    return summary
