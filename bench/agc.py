"""``bench agc``: the AGC ttbar processor cold and warm on generated AGC files, side by side:
ours (RedisExecutor + worker_cache), coffea's DaskExecutor on a dask LocalCluster of N
single-threaded processes with its ``"dask-worker"`` column cache, coffea's
FuturesExecutor with N processes, and coffea's IterativeExecutor in one process (the
baseline). Each system runs alone; its figures print as soon as they are measured.

    bench agc --workers 2 --events 50000 [--no-systematics]
    bench agc --against REF --rounds 2      # ours and Iterative here and at a git revision, in turns

Every system gets the same WorkItems (preprocessed once) and a warm-up run on a tiny
file of its own, so that "cold" measures reading the data, not importing coffea and
compiling numba kernels. Then for one chunk it prints where the time goes, cold (reading
and decompressing, building NanoEvents, the processing itself), warm on one of our
workers, and cold on one of our workers (bench/agcchunk.py).
"""
from __future__ import annotations

import logging
import os
import statistics
import time
import warnings
from typing import Any, Callable

import click

from . import results

#: The 200 Gbps challenge's assumed per-core rate for this analysis (AGC.md).
AGC_KHZ_PER_CORE = 25.0
_local_cache: dict = {}


_LABELS = {"iterative": "coffea Iterative (1 process)", "ours": "redis-htcondor", "dask": "coffea Dask + column cache",
           "futures": "coffea Futures"}


def _medians(runs: list[dict]) -> dict:
    """One system's rounds: the last round's figures with the median cold and warm times."""
    out = dict(runs[-1])
    for key in ("cold_s", "warm_s"):
        out[key] = statistics.median(r[key] for r in runs)
        out[key.replace("_s", "_rounds_s")] = [r[key] for r in runs]
    return out


def _in_process_cache() -> dict:
    """cachestrategy for the IterativeExecutor baseline: one dict in this process."""
    return _local_cache


def _runner(executor, cachestrategy=None):
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema
    return processor.Runner(executor=executor, schema=NanoAODSchema, cachestrategy=cachestrategy)


def _timed(executor, items: list, systematics: bool, cachestrategy=None) -> tuple[float, dict]:
    from ..examples.agc_ttbar import TtbarAnalysis
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # NanoAODSchema's missing cross-references
        out = _runner(executor, cachestrategy)(items, processor_instance=TtbarAnalysis(systematics))
    return time.perf_counter() - t, out


#: warm runs per system and round (--warm-runs): their median is the warm figure
WARM_RUNS = 2


def _phases(name: str, executor, items, warmup, systematics, cachestrategy=None, cores: int = 1,
            after: Callable[[str], dict] | None = None) -> dict:
    """Warm-up, cold, then warm (median of :data:`WARM_RUNS`); prints the line at once."""
    _timed(executor, warmup, systematics, cachestrategy)
    cold_s, out = _timed(executor, items, systematics, cachestrategy)
    res = {"cores": cores, "cold_s": cold_s, "entries": out["entries"],
           "events": sum(out["nevents"].values()), "hists": {"cold": _hist_views(out)}}
    res.update(after("cold") if after else {})
    warm = []
    for _ in range(WARM_RUNS):
        seconds, out = _timed(executor, items, systematics, cachestrategy)
        warm.append(seconds)
        res.update(after("warm") if after else {})
    res["hists"]["warm"] = _hist_views(out)
    res["warm_s"], res["warm_all_s"] = statistics.median(warm), warm
    _print_row(name, res)
    return res


def _hist_views(out: dict) -> dict:
    """Every histogram slice of an AGC output: (region, process, variation) -> its sums of
    weights and of their squares, with the flow bins."""
    views = {}
    for region, h in out["hist"].items():
        for p in h.axes["process"]:
            for v in h.axes["variation"]:
                view = h[:, p, v].view(flow=True)
                views[(region, p, v)] = (view["value"].copy(), view["variance"].copy())
    return views


def _same_hists(got: dict, want: dict) -> bool:
    """The same slices, with sums equal up to the order in which they were added."""
    import numpy as np
    return got.keys() == want.keys() and all(
        np.allclose(g, w, rtol=1e-9, atol=0) for key in want for g, w in zip(got[key], want[key]))


def _print_row(name: str, r: dict) -> None:
    n = r["events"]
    cold, warm = n / r["cold_s"] / 1e3, n / r["warm_s"] / 1e3           # kHz
    click.echo(f"{name:34}{r['cold_s']:>8.2f}{cold:>9.1f}{cold / r['cores']:>9.1f}"
               f"{r['warm_s']:>8.2f}{warm:>9.1f}{warm / r['cores']:>9.1f}{r['cold_s'] / r['warm_s']:>9.2f}x")


def _iterative(items, warmup, systematics) -> dict:
    from coffea import processor
    _local_cache.clear()
    return _phases("coffea Iterative (1 process)", processor.IterativeExecutor(status=False), items,
                   warmup, systematics, _in_process_cache)


def _ours(items, warmup, systematics, workers: int, record_paths: dict) -> dict:
    import rhtc
    from ..client.coffea import RedisExecutor, worker_cache

    with rhtc.LocalCluster(n_workers=workers) as cluster:
        executor = RedisExecutor(broker=cluster, status=False)
        cluster_workers = len(rhtc.live_workers(cluster))

        def after(phase: str) -> dict:
            rec = rhtc.last_map().record()
            rec.save(record_paths[phase].replace(".png", ".json"))
            rhtc.last_map().timeline(record_paths[phase])
            homes = {t.index: t.worker for t in rec.tasks}
            return {f"{phase}_bytes_file": sum(t.bytes_file for t in rec.tasks),
                    f"{phase}_bytes_cache": sum(t.bytes_cache for t in rec.tasks), f"{phase}_homes": homes}

        res = _phases(f"redis-htcondor ({cluster_workers} workers)", executor, items, warmup, systematics,
                      worker_cache, cores=cluster_workers, after=after)
    res["warm_routed_home"] = sum(res["warm_homes"].get(i) == w for i, w in res["cold_homes"].items())
    return res


def _dask(items, warmup, systematics, workers: int) -> dict:
    from coffea import processor
    from coffea.processor.dask import ColumnCache
    from dask.distributed import Client, LocalCluster
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        client.register_plugin(ColumnCache())
        return _phases(f"coffea Dask + column cache ({workers})",
                       processor.DaskExecutor(client=client, status=False), items, warmup, systematics,
                       "dask-worker", cores=workers)


def _futures(items, warmup, systematics, workers: int) -> dict:
    from coffea import processor
    from loky import ProcessPoolExecutor
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        return _phases(f"coffea Futures ({workers} processes)",
                       processor.FuturesExecutor(pool=pool, workers=workers, status=False), items, warmup,
                       systematics, cores=workers)
    finally:
        pool.shutdown(wait=True)


@click.command("agc")
@click.option("--workers", default=2, show_default=True, help="Workers / processes for each parallel system.")
@click.option("--events", default=50_000, show_default=True, help="Generated events (nine AGC samples).")
@click.option("--chunk-size", default=25_000, show_default=True, help="Entries per WorkItem.")
@click.option("--systematics/--no-systematics", default=True, show_default=True,
              help="The jet pt, b-tag and W+jets variations (off: the lighter variant).")
@click.option("--data-dir", default="data/agc", show_default=True)
@click.option("--systems", default="iterative,ours,dask,futures", show_default=True,
              help="Which systems to run, in this order.")
@click.option("--repeats", default=1, show_default=True,
              help="Rounds of all systems, alternating their order; medians are quoted.")
@click.option("--json", "json_path", default="bench-agc.json", show_default=True)
@click.option("--timeline", "timeline_path", default="bench-agc-timeline.png", show_default=True,
              help="Our warm run's timeline (the cold one beside it, -cold.png).")
@click.option("--against", metavar="REF", default=None,
              help="Run ours and the Iterative baseline with the code of this git revision too, in turns with "
                   "this checkout's, and compare (--rounds runs each; --systems and --repeats are ignored).")
@click.option("--rounds", default=2, show_default=True, help="With --against: runs of each side.")
@click.option("--warm-runs", default=WARM_RUNS, show_default=True,
              help="Warm runs of each system per round; the warm figure is their median. A warm run of ours "
                   "is a tenth of a second here and its time comes in modes: take more to compare two codes.")
def agc_command(workers, events, chunk_size, systematics, data_dir, systems, repeats, json_path, timeline_path,
                against, rounds, warm_runs):
    """The AGC ttbar analysis cold and warm: ours vs coffea+dask vs Futures vs one process."""
    global WARM_RUNS
    if warm_runs < 1:
        raise click.BadParameter(f"{warm_runs}: at least one warm run", param_hint="--warm-runs")
    WARM_RUNS = warm_runs
    if against:
        return compare(against, rounds, workers, events, chunk_size, systematics, data_dir, json_path)
    from coffea import processor
    from .agcchunk import describe, one_chunk
    from .agcgen import ANALYSIS_BRANCHES, make_agc_data
    from ..examples.agc_ttbar import agc_fileset
    from .dimuon_runs import read_into_page_cache

    paths = make_agc_data(data_dir, events=events)
    warm_paths = make_agc_data(os.path.join(data_dir, "warm-up"), events=900, min_events=100, lean=True,
                               progress=False, samples=[("ttbar", "nominal"), ("wjets", "nominal")])
    read_into_page_cache(paths)                        # every system reads from memory
    pre = processor.Runner(executor=processor.IterativeExecutor(status=False), chunksize=chunk_size)
    items = list(pre.preprocess(agc_fileset(paths), treename="Events"))
    warmup = list(processor.Runner(executor=processor.IterativeExecutor(status=False), chunksize=100)
                  .preprocess(agc_fileset(warm_paths), treename="Events"))
    n = sum(len(i) for i in items)
    mode = "with systematics" if systematics else "no systematics"
    click.echo(f"bench agc: {len(paths)} files, {n:,} events, {len(items)} WorkItems of up to "
               f"{max(len(i) for i in items):,} (chunk size {chunk_size:,}); "
               f"{mode}; {workers} workers; {os.cpu_count()} cores; files in the page cache", err=True)
    click.echo(f"{'':34}{'cold s':>8}{'kHz':>9}{'kHz/core':>9}{'warm s':>8}{'kHz':>9}{'kHz/core':>9}"
               f"{'warm/cold':>10}")
    cold_png = timeline_path.replace(".png", "-cold.png")
    runs: dict[str, list[dict]] = {}
    names = systems.split(",")
    for r in range(repeats):        # the order alternates: the machine's load drifts during a run
        for system in names if r % 2 == 0 else names[::-1]:
            if system == "iterative":
                one = _iterative(items, warmup, systematics)
            elif system == "ours":
                one = _ours(items, warmup, systematics, workers, {"cold": cold_png, "warm": timeline_path})
            elif system == "dask":
                one = _dask(items, warmup, systematics, workers)
            elif system == "futures":
                one = _futures(items, warmup, systematics, workers)
            else:
                raise click.BadParameter(f"unknown system {system!r}: choose from iterative, ours, dask, futures")
            runs.setdefault(system, []).append(one)
    res = {system: _medians(rs) for system, rs in runs.items()}
    if repeats > 1:
        click.echo(f"medians of {repeats} rounds:")
        for system, r in res.items():
            _print_row(_LABELS[system], r)
    for system, r in res.items():
        assert r["entries"] == res[names[0]]["entries"], f"{system} filled other histograms than {names[0]}"
    reference = "iterative" if "iterative" in res else names[0]
    want = runs[reference][0]["hists"]["cold"]
    for system, rounds in runs.items():
        res[system].pop("hists", None)
        for k, r in enumerate(rounds):
            for phase, views in r.pop("hists").items():
                assert _same_hists(views, want), \
                    f"{system} {phase} (round {k + 1}): histograms differ from {reference}'s"
    click.echo(f"histograms: all {len(want)} slices (region, process, variation) of every system, cold and "
               f"warm, every round, equal to {_LABELS[reference]}'s (sums of weights and variances to 1e-9)")
    summary = _summary(res, n)
    chunk = max(items, key=len)
    before = min((i for i in items if i.filename != chunk.filename), key=len, default=None)
    t = one_chunk(chunk, systematics, before)
    summary["one_chunk"] = t
    for line in describe(os.path.basename(chunk.filename), t, len(ANALYSIS_BRANCHES)):
        click.echo(line)
    result = {"events": n, "work_items": len(items), "chunk_size": chunk_size, "systematics": systematics,
              "workers": workers, "cores": os.cpu_count(), "systems": res, "summary": summary}
    if json_path:
        results.write(json_path, "agc", result, default=str)
        click.echo(f"figures: {json_path}; our timelines: {cold_png}, {timeline_path}", err=True)
    return result


def _summary(res: dict, n: int) -> dict:
    out: dict[str, Any] = {}
    ours, dask, it = res.get("ours"), res.get("dask"), res.get("iterative")
    lines = []
    if ours:
        per_core = n / ours["warm_s"] / 1e3 / ours["cores"]
        out.update(ours_khz_per_core_cold=n / ours["cold_s"] / 1e3 / ours["cores"],
                   ours_khz_per_core_warm=per_core)
        lines.append(f"ours per core: {out['ours_khz_per_core_cold']:.1f} kHz cold, {per_core:.1f} kHz warm "
                     f"(the AGC's 200 Gbps challenge assumed {AGC_KHZ_PER_CORE:.0f} kHz/core)")
        lines.append(f"ours warm run: {ours['warm_bytes_file']:,} bytes read from files, "
                     f"{ours['warm_bytes_cache']:,} from the workers' caches, "
                     f"{ours['warm_routed_home']}/{len(ours['cold_homes'])} items on the worker "
                     "that ran them cold")
    if ours and dask:
        out.update(ours_over_dask_cold=ours["cold_s"] / dask["cold_s"],
                   ours_over_dask_warm=ours["warm_s"] / dask["warm_s"])
        lines.append(f"runtime ours / coffea+dask: cold {out['ours_over_dask_cold']:.2f}, "
                     f"warm {out['ours_over_dask_warm']:.2f}")
    if ours and it:
        out.update(ours_over_iterative_rate_cold=it["cold_s"] / ours["cold_s"],
                   ours_over_iterative_rate_warm=it["warm_s"] / ours["warm_s"])
        lines.append(f"parallel speed-up, ours over the single-process IterativeExecutor: "
                     f"cold {out['ours_over_iterative_rate_cold']:.2f}x, "
                     f"warm {out['ours_over_iterative_rate_warm']:.2f}x "
                     f"on {ours['cores']} cores; above {ours['cores']}x, the work Iterative repeats per "
                     "item (opening the file, parsing its tree) is what our workers keep")
    out["warm_over_cold"] = {k: r["cold_s"] / r["warm_s"] for k, r in res.items()}
    for line in lines:
        click.echo(line)
    return out


#: this bench's own files: the same on both sides of --against (the data too: both read one --data-dir)
HARNESS = ("bench/agc.py", "bench/agcchunk.py", "bench/agcgen.py", "bench/agcschema.py", "bench/results.py",
           "bench/against.py", "bench/dimuon_runs.py")
#: what --against compares: (label, system, figure); times, so a ratio above 1 is this checkout faster
COMPARED = [("ours cold (s)", "ours", "cold_s"), ("ours warm (s)", "ours", "warm_s"),
            ("coffea Iterative cold (s)", "iterative", "cold_s"), ("coffea Iterative warm (s)", "iterative", "warm_s")]


def compare(ref: str, rounds: int, workers: int, events: int, chunk_size: int, systematics: bool,
            data_dir: str, json_path: str | None) -> dict:
    """``bench agc --systems ours,iterative`` here and at ``ref``, in turns; medians side by
    side, with the ratio of ``ref``'s time over this checkout's (above 1: this checkout is faster)."""
    from .against import side_by_side
    args = ["agc", "--workers", str(workers), "--events", str(events), "--chunk-size", str(chunk_size),
            "--systematics" if systematics else "--no-systematics", "--data-dir", os.path.abspath(data_dir),
            "--systems", "ours,iterative", "--timeline", os.path.join(os.path.abspath(data_dir), "against.png"),
            "--warm-runs", str(WARM_RUNS)]
    ours, theirs = side_by_side(ref, args, rounds, overlay=HARNESS)
    click.echo(f"bench {' '.join(args)}: this checkout against {ref}, {rounds} runs each in turns, medians")
    click.echo(f"{'':30}{'this checkout':>14}{ref[:12]:>14}{'speed ratio':>12}")
    out = {"ref": ref, "args": args, "ours": ours, "theirs": theirs, "medians": {}}
    for label, system, key in COMPARED:
        a, b = (statistics.median(r["systems"][system][key] for r in runs) for runs in (ours, theirs))
        out["medians"][label] = [a, b]
        click.echo(f"{label:30}{a:>14.3f}{b:>14.3f}{b / a:>11.2f}x")
    if json_path:
        results.write(json_path, "agc", out, default=str)
    return out
