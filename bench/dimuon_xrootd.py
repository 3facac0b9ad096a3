"""``bench dimuon --xrootd --latency-ms 0,5,20``: the dimuon analysis over ``root://`` from
a real xrootd server, read through a toxiproxy that adds a round-trip latency, cold and
warm, for ours, dask (same remote reads, its worker-global cache) and the bare loop.

The cache's worth grows with the distance to the data: a cold run pays the round trips,
a warm run (served from the workers' caches) pays none. At each latency a fresh set of
workers (both systems) starts with empty caches; the same chunks (same file UUIDs) are
read through the proxy. Our cold run on the local files is measured first, as the
yardstick for "cold over root:// at 0 ms is at least 0.8 of local cold".

    bench dimuon --xrootd --latency-ms 0,5,20 --workers 2 --files 4 --events 500000
"""
from __future__ import annotations

import contextlib
import dataclasses
import os

import click

from .dimuon_runs import HEADER, Report, _bare, _check_physics, _ours, row
from .dimuon_dask import run_dask
from ..broker.wire.config import parse_size


def run_latencies(report: Report, paths: list[str], data_dir: str, local_chunks: list, warm: list,
                  latencies: list[float], *, workers: int, dask_workers: int, cache_size: str,
                  dask_timeout: float | None, progress: bool) -> dict:
    """Start an xrootd server on ``data_dir`` and a latency proxy before it; measure each
    system at each latency, printing and saving each figure as it is measured."""
    from ..client.data.chunks import close_files
    cache_bytes = parse_size(cache_size)
    n_events = sum(c.num_entries for c in local_chunks)
    click.echo(HEADER)
    local = _ours(local_chunks, workers, cache_size, None, warm, progress)
    report.add("ours_local", f"ours ({workers}), local files", local, n_events)
    out = {"ours_local": local, "latencies": {}}
    with served_through_proxy(data_dir, local_chunks) as (proxy, url, chunks):
        for ms in latencies:
            proxy.clear()
            if ms:
                proxy.add_toxic("latency", latency=int(ms))          # on every reply: +ms per round trip
            click.echo(f"-- +{ms:g} ms round trip to {url} (xrootd {proxy.upstream} via toxiproxy)")
            close_files()                                            # the bare loop opens them afresh
            at: dict = {}
            at["bare"] = _bare(chunks, cache_bytes, warm)
            report.data.setdefault("latencies", {})[f"{ms:g}"] = at
            report.save()
            click.echo(row("bare loop (1 process)", at["bare"], n_events))
            at["ours"] = _ours(chunks, workers, cache_size, None, warm, progress)
            report.save()
            click.echo(row(f"redis-htcondor ({workers})", at["ours"], n_events))
            if dask_workers:
                at["dask"] = run_dask(chunks, warm, workers=dask_workers, cache_bytes=cache_bytes,
                                      start_bound=dask_timeout, progress=progress,
                                      run_bound=dask_timeout or max(120.0, 20 * at["ours"].get("cold_s", 30.0)))
                report.save()
                click.echo(row(f"dask ({dask_workers})", at["dask"], n_events))
            _check_physics({k: v for k, v in at.items() if k != "bare"}, n_events, at["bare"]["pairs"])
            out["latencies"][f"{ms:g}"] = at
    _closing_note(report, out, n_events)
    return report.data


@contextlib.contextmanager
def served_through_proxy(data_dir: str, local_chunks: list, *, metrics: bool = False):
    """A real xrootd server on ``data_dir`` and a toxiproxy before it: yields the proxy, its
    ``root://`` address, and ``local_chunks`` (files under ``data_dir``) as the same chunks
    read through it (same entries, same file UUIDs). ``metrics``: the proxy counts the
    bytes it passes (:meth:`Proxy.bytes_sent`). Both servers are stopped, by pid, on exit."""
    from .toxiproxy import Toxiproxy
    from .xrootd_server import XRootDServer
    with XRootDServer(data_dir) as server, Toxiproxy(metrics=metrics) as tp:
        proxy = tp.proxy("xrootd", upstream=f"127.0.0.1:{server.port}")
        url = f"root://127.0.0.1:{proxy.port}/"
        yield proxy, url, [dataclasses.replace(c, file=url + "/" + os.path.relpath(c.file, data_dir))
                           for c in local_chunks]


def _closing_note(report: Report, out: dict, n_events: int) -> None:
    """Warm/cold ratios by latency, and the two targets, met or not."""
    click.echo("\nwarm/cold by added latency: " + "   ".join(
        f"+{ms} ms: " + ", ".join(f"{name} {r['cold_s'] / r['warm_s']:.1f}x" for name, r in at.items()
                                   if "cold_s" in r and "warm_s" in r)
        for ms, at in out["latencies"].items()))
    targets = {}
    local, zero = out["ours_local"], out["latencies"].get("0", {}).get("ours", {})
    if "cold_s" in local and "cold_s" in zero:
        targets["cold_root_0ms_over_local"] = local["cold_s"] / zero["cold_s"]
        click.echo(f"target: cold over root:// at +0 ms / local cold = {targets['cold_root_0ms_over_local']:.2f} "
                   f"(target >= 0.8: {'met' if targets['cold_root_0ms_over_local'] >= 0.8 else 'NOT met'})")
    far = out["latencies"].get("20", {}).get("ours", {})
    if "cold_s" in far and "warm_s" in far:
        targets["warm_over_cold_20ms"] = far["cold_s"] / far["warm_s"]
        click.echo(f"target: ours warm/cold at +20 ms = {targets['warm_over_cold_20ms']:.1f}x "
                   f"(target >= 20x: {'met' if targets['warm_over_cold_20ms'] >= 20 else 'NOT met'})")
    report.data["targets"] = targets
    report.save()
    if report.json_path:
        click.echo(f"figures: {report.json_path}", err=True)
