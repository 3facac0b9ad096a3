"""``bench affinity``: the seed's read velocity (MB of input per second per core) of the
dimuon analysis, from four places its data can be, side by side in one run:

1. **cold, storage element**: ``root://`` from a real xrootd server through a toxiproxy
   whose ``bandwidth`` toxic gives each connection ``--se-rate`` MB/s (each worker holds one
   connection to the server, so it is a core's share of a shared storage element), plus
   ``--se-latency-ms`` per round trip;
2. **cold, local file**: the same files on this machine's disk (in the page cache);
3. **node disk tier**: every worker replaced (stopped; new ones, RAM empty, on the same
   disk-tier directory) after a cold run filled the tier;
4. **warm, RAM**: the same chunks again on the workers that read them.

The seed ("Smartsubmit Benchmarking") sent jobs to the nodes whose disks held their files
and measured ~24 MB/s per core from local disks against ~19 MB/s from the shared
filesystem: jobs bound by decompression, not by I/O. Our node disk tier keeps the columns
already decompressed, so tiers 3 and 4 skip what bound the seed's jobs.

**Input MB** is the same figure for every tier: the compressed bytes, in the files, of the
branches the analysis reads (:data:`examples.dimuon.BRANCHES`), summed over the files (the
chunks cover them whole). **Per core**: over the seconds the tasks held a worker (one
core each; the seed's per-job figure), and over the wall time of the map times the
workers. Each tier says where its tasks were served from, by the workers' own counts
(:attr:`~client.reports.rows.TaskRecord.source`): the file, the node's disk tier or RAM.

Each repeat starts three local clusters (the order turns from repeat to repeat): one reads
over ``root://`` (tier 1), one reads the local files cold then warm (2, 4), one fills a disk
tier cold, then has every worker replaced and runs again (3). Medians of ``--repeats``.

    bench affinity --workers 2 --files 4 --events 500000 --se-rate 25 --repeats 3
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile

import click

from . import results
from .dimuon_restart import _ours, codec_data
from .dimuon_runs import CHUNKS_PER_WORKER, MAX_CHUNK
from ..client.synthetic.dimuon import compressed_bytes
from ..examples.dimuon import BRANCHES

#: tier -> (the cluster run that measures it, its phase there, its label)
TIERS = {
    "se": ("se", "cold", "cold, storage element (root://)"),
    "local": ("local", "cold", "cold, local file"),
    "disk": ("disk", "restart", "node disk tier, workers replaced"),
    "ram": ("local", "warm", "warm, RAM"),
}
#: where a task was served from (TaskRecord.source) -> its column in the table
SERVED = {"miss": "file", "disk": "disk", "hit": "RAM", "partial": "part"}
INPUT = ("compressed bytes, in the files, of the branches the analysis reads ({branches}), "
         "summed over the files: the same for every tier")
PER_CORE = ("input MB over the seconds the tasks held a worker (one core each); "
            "wall: over the map's wall time x the workers")


@click.command("affinity")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Workers (one core each).")
@click.option("--files", type=click.IntRange(min=1), default=4, show_default=True, help="Generated files.")
@click.option("--events", type=click.IntRange(min=1), default=500_000, show_default=True, help="Events per file.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None,
              help=f"Entries per chunk [default: >= {CHUNKS_PER_WORKER} chunks per worker, at most {MAX_CHUNK:,}].")
@click.option("--compression", default="LZMA", show_default=True,
              help="LZMA (NanoAOD's, the seed's files), ZLIB, LZ4 or ZSTD.")
@click.option("--cache-size", default="4GB", show_default=True, help="Branch cache per worker.")
@click.option("--data-dir", default="data/generated", show_default=True,
              help="The files go under DATA_DIR/<compression> (as bench dimuon --restart's).")
@click.option("--se-rate", type=click.FloatRange(min=0.001), default=25.0, show_default=True,
              help="Storage element: MB/s per connection (toxiproxy's bandwidth toxic), a core's share.")
@click.option("--se-latency-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Storage element: added round-trip latency (toxiproxy's latency toxic).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs of every tier (fresh clusters each); medians are quoted.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Progress bars (stderr).")
@click.option("--json", "json_path", default="bench-affinity.json", show_default=True)
def affinity_command(workers, files, events, chunk_size, compression, cache_size, data_dir, se_rate,
                     se_latency_ms, repeats, progress, json_path):
    """Read velocity (MB of input per second per core) from a storage element, a local
    file, the node disk tier and RAM; where each tier's tasks were served from."""
    from .dimuon_xrootd import served_through_proxy
    from .toxiproxy import ToxiproxyUnavailable
    from .xrootd_server import XRootDUnavailable
    paths, chunks, warm = codec_data(data_dir, compression, files, events, chunk_size, workers, progress)
    input_mb = sum(compressed_bytes(p, BRANCHES) for p in paths) / 1e6
    n_events = sum(c.num_entries for c in chunks)
    data = {"files": len(paths), "events": n_events, "chunks": len(chunks), "chunk_size": chunks[0].num_entries,
            "compression": compression, "workers": workers, "cores": os.cpu_count(), "repeats": repeats,
            "input_mb": input_mb, "input": INPUT.format(branches=", ".join(BRANCHES)), "per_core": PER_CORE,
            "se": {"rate_mb_s": se_rate, "latency_ms": se_latency_ms},
            "load_at_start": os.getloadavg()[0]}        # (a shared machine: how busy it was)
    click.echo(f"bench affinity: {len(paths)} {compression} files, {n_events:,} events, {len(chunks)} chunks; "
               f"{workers} workers; {os.cpu_count()} cores, load {data['load_at_start']:.1f}; medians of {repeats}",
               err=True)
    try:
        with served_through_proxy(os.path.dirname(os.path.abspath(paths[0])), chunks, metrics=True) \
                as (proxy, url, se_chunks):
            proxy.add_toxic("bandwidth", rate=round(se_rate * 1000))     # KB/s, per connection
            if se_latency_ms:
                proxy.add_toxic("latency", latency=round(se_latency_ms))
            data["se"].update(url=url, toxics=proxy.toxics())
            runs: list[dict] = []
            for r in range(repeats):
                runs.append(_repeat(r, proxy, se_chunks, chunks, warm, workers, cache_size, progress))
                data["se"]["proxy_bytes"] = [run["se"]["proxy_bytes"] for run in runs]
                data.update(_tiers(runs, input_mb, workers, n_events, se_rate), load_at_end=os.getloadavg()[0],
                            runs=runs)
                if json_path:
                    results.write(json_path, "affinity", data)
    except (XRootDUnavailable, ToxiproxyUnavailable) as err:
        raise click.ClickException(f"the storage element tier needs a real xrootd server and toxiproxy: {err}")
    click.echo(f"input: {input_mb:.1f} MB = {data['input']}\nper core: {PER_CORE}\n"
               f"storage element: {url} through toxiproxy, {se_rate:g} MB/s per connection (one per worker)"
               f"{f', +{se_latency_ms:g} ms per round trip' if se_latency_ms else ''}")
    click.echo(table(data))
    if json_path:
        click.echo(f"figures: {json_path}", err=True)
    return data


def _repeat(r: int, proxy, se_chunks: list, chunks: list, warm: list, workers: int, cache: str,
            progress: bool) -> dict:
    """One run of every tier: three fresh clusters, in an order that turns with ``r``; the
    storage element's run counts the bytes that came through the proxy (``proxy_bytes``)."""
    order = ["se", "local", "disk"]
    out: dict = {}
    for run in order[r % 3:] + order[:r % 3]:
        if run == "se":
            before = proxy.bytes_sent()
            out["se"] = _ours(se_chunks, warm, workers, cache, None, progress, repeats=0)
            out["se"]["proxy_bytes"] = proxy.bytes_sent() - before
        elif run == "local":
            out["local"] = _ours(chunks, warm, workers, cache, None, progress, repeats=1, restarts=0)
        else:
            tier = tempfile.mkdtemp(prefix="rhtc-bench-affinity-")
            try:
                out["disk"] = _ours(chunks, warm, workers, cache, tier, progress, repeats=0, restarts=1)
            finally:
                shutil.rmtree(tier, ignore_errors=True)
    return out


def _tiers(runs: list[dict], input_mb: float, workers: int, n_events: int, se_rate: float) -> dict:
    """Each tier's medians, velocities and served-from fractions over ``runs``, and the
    ratios of each against cold-local and cold-SE; checks that every tier got the same answer."""
    tiers, answers = {}, {}
    for name, (run, phase, label) in TIERS.items():
        got = [r[run] for r in runs]
        wall = statistics.median(x for g in got for x in g[f"{phase}_runs_s"])
        task = statistics.median(x for g in got for x in g[f"{phase}_task_runs_s"])
        served: dict = {}
        for g in got:
            for source, n in g[f"{phase}_served"].items():
                served[source] = served.get(source, 0) + n
        total = sum(served.values())
        label += f", {se_rate:g} MB/s" if name == "se" else ""
        tiers[name] = {"label": label, "velocity_mb_s_core": input_mb / task, "wall_velocity_mb_s_core":
                       input_mb / (wall * workers), "wall_s": wall, "task_s": task,
                       "served": {s: n / total for s, n in served.items()}, "tasks": total,
                       **{f"bytes_{s}": max(g[f"{phase}_bytes_{s}"] for g in got) for s in ("file", "disk", "cache")},
                       "files_opened": max(g[f"{phase}_files_opened"] for g in got)}
        answers[name] = {(g[f"{phase}_events"], g[f"{phase}_pairs"]) for g in got}
    distinct = set().union(*answers.values())
    if len(distinct) != 1 or distinct.pop()[0] != n_events:
        raise AssertionError(f"a warm answer is the cold answer, but the tiers' (events, pairs) are {answers}; "
                             f"the chunks hold {n_events:,} events")
    ratios = {f"over_{base}": {name: t["velocity_mb_s_core"] / tiers[base]["velocity_mb_s_core"]
                               for name, t in tiers.items()} for base in ("local", "se")}
    return {"ratios": ratios, "tiers": tiers}


def table(data: dict) -> str:
    """The four tiers side by side (from a result's figures)."""
    head = (f"{'':42}{'MB/s':>8}{'MB/s':>8}{'x cold':>9}{'x cold':>9}{'file MB':>9}   served from (tasks)\n"
            f"{'tier':42}{'/core':>8}{'wall':>8}{'local':>9}{'SE':>9}{'read':>9}   "
            + "".join(f"{c:>6}" for c in SERVED.values()))
    lines = [head]
    for name, t in data["tiers"].items():
        served = "".join(f"{t['served'].get(s, 0):>6.0%}" for s in SERVED)
        lines.append(f"{t['label']:42}{t['velocity_mb_s_core']:>8.1f}{t['wall_velocity_mb_s_core']:>8.1f}"
                     f"{data['ratios']['over_local'][name]:>8.2f}x{data['ratios']['over_se'][name]:>8.2f}x"
                     f"{t['bytes_file'] / 1e6:>9.1f}   {served}")
    return "\n".join(lines)
