"""``bench dimuon --restart``: warm after a restart, from the node's disk tier.

For each codec (LZ4, and LZMA, NanoAOD's default, where decompression dominates), side by
side in one run:

* the bare single-process loop, cold and warm (a RAM cache);
* dask.distributed (same function, a worker-global RAM cache), cold and warm;
* ours with the RAM cache only, cold and warm, and again after its workers are replaced
  (cold: a RAM cache dies with its worker);
* ours with the node's disk tier (``--disk-cache``: every worker of this machine shares
  one directory): cold, warm (RAM), then every worker stopped and new ones started under
  new names on the same node, and the run after the restart.

Ours runs warm ``--repeats`` times, and replaces every worker ``--repeats`` times (a rerun
after each): medians, as one run of 8 chunks on a shared machine is noisy. Printed per
run: the rate, bytes read from the files and from the disk tier. The targets
(issue 19): the run after the restart reads 0 bytes from the files, runs at >= 0.5x the
RAM-warm rate and >= 5x the cold rate for LZMA, and the disk tier costs the RAM-warm run
< 5 %.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import click

from .dimuon_dask import run_dask, warm_up
from .dimuon_runs import _bare, _mhz, _timed_map, read_into_page_cache


def _phase(out: dict, phase: str, chunks, broker, label: str, progress: bool) -> None:
    """One timed map; a phase run again keeps each run's time (``<phase>_runs_s``) and the
    seconds its tasks held a worker (``<phase>_task_runs_s``), their medians as
    ``<phase>_s`` and ``<phase>_task_s``, the most bytes from the files and files opened of
    any run, and how many tasks of all its runs were served from where
    (``<phase>_served``, by :attr:`~client.reports.rows.TaskRecord.source`: ``miss`` read
    the file, ``disk`` the node's disk tier, ``hit`` the worker's memory)."""
    h, result, took = _timed_map(chunks, broker, label, progress)
    tasks = h.record().tasks
    for runs, median, value in (("runs_s", "s", took), ("task_runs_s", "task_s", sum(t.duration for t in tasks))):
        out.setdefault(f"{phase}_{runs}", []).append(value)
        out[f"{phase}_{median}"] = statistics.median(out[f"{phase}_{runs}"])
    for source in ("file", "disk", "cache"):
        out[f"{phase}_bytes_{source}"] = sum(getattr(t, f"bytes_{source}") for t in tasks)
    out[f"{phase}_files_opened"] = sum(t.files_opened for t in tasks)
    for worst in ("bytes_file", "files_opened"):
        key = f"{phase}_{worst}"
        out[f"{key}_max"] = max(out.get(f"{key}_max", 0), out[key])
    served = out.setdefault(f"{phase}_served", {})
    for t in tasks:
        served[t.source] = served.get(t.source, 0) + 1
    out[f"{phase}_events"], out[f"{phase}_pairs"] = result["events"], result["pairs"]


def _ours(chunks, warm, workers: int, cache: str, disk: str | None, progress: bool, repeats: int = 1,
          restarts: int | None = None) -> dict:
    """cold, warm (``repeats`` runs), then ``restarts`` (default ``repeats``) times: every
    worker replaced (new names, same node) and a rerun; medians."""
    from rhtc import LocalCluster, remote_map
    from rhtc.processes import stop_processes
    out: dict = {}
    with LocalCluster(n_workers=workers, cache_size=cache, disk_cache=disk, name_prefix="first") as cluster:
        remote_map(warm_up, warm * workers * 3, broker=cluster, progress=False, routing=False)
        _phase(out, "cold", chunks, cluster, "cold", progress)
        if disk:
            out["disk_write_wait_s"] = _writes_settled(disk)
        for _ in range(repeats):
            _phase(out, "warm", chunks, cluster, "warm (RAM)", progress)
        for _ in range(repeats if restarts is None else restarts):
            stop_processes(cluster.procs)             # every worker leaves: walltime, eviction...
            cluster.procs.clear()
            t = time.perf_counter()
            cluster.add_workers(workers)              # new names, same node, same broker
            out["restart_s_to_serve"] = time.perf_counter() - t
            # the new processes import the analysis stack, as the first ones did before "cold"
            remote_map(warm_up, warm * workers * 3, broker=cluster, progress=False, routing=False)
            _phase(out, "restart", chunks, cluster, "after restart", progress)
    return out


def _writes_settled(directory: str, quiet: float = 1.5, limit: float = 120.0) -> float:
    """Wait until the workers' background writes to the disk tier have settled (its entry
    count unchanged for ``quiet`` s), so the warm run measures a steady state; returns the
    seconds waited (also printed: it is what the cold run still owed the disk)."""
    from ..worker.disk import DiskTier
    tier = DiskTier(directory, size_limit=10 ** 12, min_free=0)
    t0 = last_change = time.monotonic()
    seen = -1
    try:
        while time.monotonic() - t0 < limit:
            n = len(tier)
            if n != seen:
                seen, last_change = n, time.monotonic()
            elif time.monotonic() - last_change >= quiet:
                break
            time.sleep(0.1)
    finally:
        tier.close()
    return last_change - t0


def _row(name: str, r: dict, n: int) -> str:
    def rate(phase):
        return f"{_mhz(n, r[f'{phase}_s']):>9.2f}" if f"{phase}_s" in r else f"{'-':>9}"

    def mb(phase, source):
        key = f"{phase}_bytes_{source}_max" if f"{phase}_bytes_{source}_max" in r else f"{phase}_bytes_{source}"
        return f"{r[key] / 1e6:>10.1f}" if key in r else f"{'-':>10}"
    if "error" in r:
        return f"{name:34}{r['error']}"
    return (f"{name:34}{rate('cold')}{rate('warm')}{rate('restart')}"
            f"{mb('restart', 'file')}{mb('restart', 'disk')}")


HEADER = (f"{'':34}{'cold MHz':>9}{'warm MHz':>9}{'restart':>9}{'file MB':>10}{'disk MB':>10}"
          "\n" + f"{'':34}{'':>9}{'':>9}{'MHz':>9}{'(after restart)':>20}")


def codec_data(data_dir: str, codec: str, files: int, events: int, chunk_size: int | None, workers: int,
               progress: bool) -> tuple[list[str], list, list]:
    """The generated files of one codec under ``data_dir/<codec>`` (written unless already
    there, then read into the page cache), their chunks (``chunk_size`` entries, or
    :func:`~bench.dimuon_runs.auto_chunk_size`), and the warm-up chunks."""
    from rhtc import make_nanoaod, make_chunks
    from .dimuon_runs import auto_chunk_size
    paths = make_nanoaod(os.path.join(data_dir, codec.lower()), files=files, events=events,
                         compression=codec, progress=progress)
    read_into_page_cache(paths)
    chunks = make_chunks(paths, step=chunk_size or auto_chunk_size(files * events, workers))
    warm = make_chunks(make_nanoaod(os.path.join(data_dir, "warm-up"), files=1, events=2000,
                                    compression=codec, progress=False), step=2000)
    return paths, chunks, warm


def restart_command(codecs: list[str], workers: int, files: int, events: int, chunk_size: int | None,
                    cache_size: str, data_dir: str, with_dask: bool, progress: bool, repeats: int = 1) -> dict:
    from ..broker.wire.config import parse_size
    report: dict = {}
    for codec in codecs:
        paths, chunks, warm = codec_data(data_dir, codec, files, events, chunk_size, workers, progress)
        n = sum(c.num_entries for c in chunks)
        click.echo(f"\nbench dimuon --restart: {codec}, {len(paths)} files, {n:,} events, {len(chunks)} chunks; "
                   f"{workers} workers sharing one disk tier; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
                   f"ours: medians of "
                   f"{repeats} warm runs and of {repeats} restarts (file MB: the most of any)")
        click.echo(HEADER)
        rows: dict = {"bare": _bare(chunks, parse_size(cache_size), warm)}
        click.echo(_row("bare loop (1 process)", rows["bare"], n))
        if with_dask:
            rows["dask"] = run_dask(chunks, warm, workers=workers, cache_bytes=parse_size(cache_size),
                                    progress=progress)
            click.echo(_row(f"dask ({workers})", rows["dask"], n))
        rows["ram"] = _ours(chunks, warm, workers, cache_size, None, progress, repeats)
        click.echo(_row(f"redis-htcondor ({workers}), RAM only", rows["ram"], n))
        tier = tempfile.mkdtemp(prefix="rhtc-bench-disk-")
        try:
            rows["disk"] = _ours(chunks, warm, workers, cache_size, tier, progress, repeats)
        finally:
            shutil.rmtree(tier, ignore_errors=True)
        click.echo(_row(f"redis-htcondor ({workers}), RAM + disk", rows["disk"], n))
        d, r = rows["disk"], rows["ram"]
        ratios = {"restart_over_warm": d["warm_s"] / d["restart_s"], "restart_over_cold": d["cold_s"] / d["restart_s"],
                  "warm_disk_over_warm_ram": r["warm_s"] / d["warm_s"],
                  "restart_bytes_from_files": d["restart_bytes_file_max"],
                  "restart_files_opened": d["restart_files_opened_max"]}
        click.echo(f"after the restart: {ratios['restart_over_warm']:.2f}x the RAM-warm rate (target >= 0.5), "
                   f"{ratios['restart_over_cold']:.1f}x the cold rate (target >= 5 for LZMA), "
                   f"{ratios['restart_bytes_from_files']:,} bytes from the files (target 0), "
                   f"{ratios['restart_files_opened']} files opened (the most of {repeats} restarts); "
                   f"RAM-warm rate with the disk tier on: {ratios['warm_disk_over_warm_ram']:.2f}x without (target >= 0.95)")
        click.echo(f"load (1-minute average) at the end: {os.getloadavg()[0]:.1f}")
        report[codec] = dict(rows, ratios=ratios, events=n, chunks=len(chunks))
    return report
