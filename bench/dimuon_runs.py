"""The pieces of ``bench dimuon``: the bare loop, our cluster's cold and warm runs, the
table's rows and the JSON report that is written as each figure is measured. Shared by
the local-file command (``bench/dimuon.py``) and the ``root://`` one (``bench/dimuon_xrootd.py``).
"""
from __future__ import annotations

import math
import statistics
import time

import click

from . import results
from .dimuon_dask import warm_up
from rhtc import context
from ..client.reduce import combine
from ..examples.dimuon import dimuon
from ..worker.cache import BranchCache
from ..worker.memory import tune_malloc

CHUNKS_PER_WORKER = 3            # the seed's 448 chunks for 30 to 150 workers
MAX_CHUNK = 500_000
START_BATCH = 10                 # our workers are started (and counted on the bar) in batches


def auto_chunk_size(total_events: int, workers: int) -> int:
    """Entries per chunk when the user sets none: at least CHUNKS_PER_WORKER chunks per
    worker, at most MAX_CHUNK entries each.

    >>> auto_chunk_size(8_000_000, 2), auto_chunk_size(8_000_000, 150)
    (500000, 17778)
    """
    return max(1, min(MAX_CHUNK, math.ceil(total_events / (CHUNKS_PER_WORKER * max(1, workers)))))


def read_into_page_cache(paths) -> None:
    """Read every file once, so each system reads them from memory."""
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(1 << 24):
                pass


def _bare(chunks, cache_bytes: int, warm: list) -> dict:
    """One process, one chunk after the other: cold (no cache), then with a cache, twice."""
    from ..client.data.chunks import close_files
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


def _start_cluster(workers: int, cache: str, progress: bool):
    """Our LocalCluster, its workers started in batches under a progress bar."""
    from tqdm import tqdm
    from rhtc import LocalCluster
    first = min(workers, START_BATCH)
    cluster = LocalCluster(n_workers=first, cache_size=cache, start_timeout=60 + 2 * START_BATCH)
    with tqdm(total=workers, desc=f"ours: starting {workers} workers", unit="worker", disable=not progress,
              leave=False) as bar:
        try:
            cluster.start()
            bar.update(first)
            while len(cluster.alive()) < workers:
                n = min(START_BATCH, workers - len(cluster.alive()))
                cluster.add_workers(n)
                bar.update(n)
        except BaseException:
            cluster.close()
            raise
    return cluster


def _timed_map(chunks, broker, label: str, progress: bool):
    from tqdm import tqdm
    from rhtc import submit
    t = time.perf_counter()
    h = submit(dimuon, chunks, broker=broker, reduce=True, label=label)
    with tqdm(total=len(chunks), desc=label, unit="chunk", disable=not progress, leave=False) as bar:
        while True:
            try:
                result = h.wait(0.5)
                break
            except TimeoutError:
                bar.n = h.progress()[0]
                bar.refresh()
    return h, result, time.perf_counter() - t


def _ours(chunks, workers: int, cache: str, broker_url: str | None, warm: list, progress: bool = True) -> dict:
    """Ours cold then warm; a failure to start or run is returned as ``{"error": ...}``."""
    from rhtc import live_workers, remote_map
    cluster, t = None, time.perf_counter()
    try:
        broker = broker_url or (cluster := _start_cluster(workers, cache, progress))
        out = {"workers": len(live_workers(broker)), "startup_s": 0.0 if broker_url else time.perf_counter() - t}
        remote_map(warm_up, warm * out["workers"] * 3, broker=broker, progress=False, routing=False)
        for phase in ("cold", "warm"):
            h, result, out[f"{phase}_s"] = _timed_map(chunks, broker, f"ours {phase}", progress)
            out[f"{phase}_bytes_file"] = sum(m.get("bytes_file", 0) for m in h.run.metas)
            out[f"{phase}_bytes_cache"] = sum(m.get("bytes_cache", 0) for m in h.run.metas)
            out[f"{phase}_routed"] = h.run.routed_to_workers
            out[f"{phase}_events"] = result["events"]
            out[f"{phase}_pairs"] = result["pairs"]
        return out
    except (TimeoutError, RuntimeError, OSError) as err:
        return {"workers": workers, "error": f"redis-htcondor failed after {time.perf_counter() - t:.0f} s: "
                                             f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
    finally:
        if cluster is not None:
            cluster.close()


def _median_run(runs: list[dict]) -> dict:
    """The runs' figures, with cold and warm times replaced by their medians (failed runs
    are left out; if every run failed, the last one's error)."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return dict(runs[-1]) if runs else {}
    out = dict(good[-1])
    for phase in ("cold_s", "warm_s"):
        if all(phase in r for r in good):
            out[phase] = statistics.median(r[phase] for r in good)
            out[phase.replace("_s", "_all_s")] = [r[phase] for r in good]
    out["warm_bytes_file"] = max((r.get("warm_bytes_file", 0) for r in good), default=0)
    return out


def _mhz(events: int, seconds: float) -> float:
    return events / seconds / 1e6 if seconds else float("nan")


HEADER = f"{'':30}{'cold s':>8}{'cold MHz':>10}{'warm s':>8}{'warm MHz':>10}{'warm/cold':>10}"


def row(name: str, r: dict, n_events: int) -> str:
    """One line of the table: a system's cold and warm figures, or why it has none."""
    if "cold_s" not in r or "warm_s" not in r:
        return f"{name:30}{r.get('error', 'not measured')}"
    return (f"{name:30}{r['cold_s']:>8.2f}{_mhz(n_events, r['cold_s']):>10.2f}{r['warm_s']:>8.2f}"
            f"{_mhz(n_events, r['warm_s']):>10.2f}{r['cold_s'] / r['warm_s']:>9.1f}x")


class Report:
    """The benchmark's figures: each printed and written to the JSON as soon as measured."""

    def __init__(self, json_path: str | None, **header):
        self.json_path, self.data = json_path, dict(header)

    def add(self, key: str, name: str, figures: dict, n_events: int, echo: bool = True) -> None:
        self.data[key] = figures
        if echo:
            click.echo(row(name, figures, n_events))
        self.save()

    def save(self) -> None:
        if self.json_path:
            results.write(self.json_path, "dimuon", self.data)


def _check_physics(systems: dict, n_events: int, pairs: int) -> None:
    for name, r in systems.items():
        for phase in ("cold", "warm"):
            if f"{phase}_events" in r:
                assert r[f"{phase}_events"] == n_events, f"{name} {phase} saw {r[f'{phase}_events']} events"
            if f"{phase}_pairs" in r:
                assert r[f"{phase}_pairs"] == pairs, f"{name} {phase}: different physics from the same files"
