"""``bench merge``: a reduction over big results (an 8 MB 2-D histogram per task) with the
merge on the workers and without, side by side in one run on local workers: the map's
wall time, the client's CPU time (every thread of this process: decode, verify, add,
bookkeeping) and how many result frames the client received.

    bench merge --tasks 200 --mb 8 --workers 2 --repeat 3

Each histogram is filled with random numbers (incompressible, as a filled
multi-variation histogram is); every total is checked against tasks x one histogram.
:func:`merge_map` is the measurement (``bench scale`` passes ``merge=`` the same way).
"""
from __future__ import annotations

import resource
import statistics
import time

import click
import numpy as np

_HISTS: dict[float, object] = {}


def big_hist(args: tuple[float, float]):
    """A 2-D ``hist.Hist`` of ``mb`` megabytes of random bin contents, after ``seconds``
    (one made per worker process and size, returned again: folding never mutates it)."""
    mb, seconds = args
    if seconds:
        time.sleep(seconds)
    h = _HISTS.get(mb)
    if h is None:
        import hist
        bins = max(1, int((mb * 1e6 / 8) ** 0.5) - 2)
        h = hist.Hist(hist.axis.Regular(bins, 0, 1), hist.axis.Regular(bins, 0, 1), storage=hist.storage.Double())
        h.view(flow=True)[...] = np.random.default_rng(0).random(h.view(flow=True).shape)
        _HISTS[mb] = h
    return h


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def merge_map(broker, tasks: int, mb: float, seconds: float, merge: bool) -> dict:
    """One ``remote_map(big_hist, ..., reduce=True, merge=merge)``: its wall time, the
    client's CPU seconds, the frames received (partials plus results sent alone)."""
    from rhtc.client import last_map, remote_map
    c0, t0 = _cpu(), time.perf_counter()
    total = remote_map(big_hist, [(mb, seconds)] * tasks, broker=broker, reduce=True, progress=False, merge=merge)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    one = big_hist((mb, 0.0)).values(flow=True)
    if not np.allclose(total.values(flow=True), tasks * one):
        raise AssertionError(f"the total of {tasks} histograms is wrong (merge={merge})")
    run = last_map().run
    frames = run.partials_accepted + run.partials_refused + sum(1 for m in run.metas) \
        - int(sum(run.in_partial))
    return {"wall": wall, "cpu": cpu, "frames": frames}


@click.command("merge")
@click.option("--tasks", default=200, show_default=True, help="tasks in the map")
@click.option("--mb", default=8.0, show_default=True, help="size of each task's histogram (MB)")
@click.option("--seconds", default=0.0, show_default=True, help="each task sleeps this long first")
@click.option("--workers", default=2, show_default=True, help="local workers")
@click.option("--repeat", default=3, show_default=True, help="runs of each, alternating")
def merge_command(tasks: int, mb: float, seconds: float, workers: int, repeat: int) -> None:
    """The client's CPU and the map's wall time with and without the merge on the workers."""
    from rhtc.client import LocalCluster
    rows: dict[bool, list[dict]] = {False: [], True: []}
    with LocalCluster(n_workers=workers) as cluster:
        merge_map(cluster, 2 * workers, mb, 0.0, True)        # warm: each worker makes its histogram
        for _ in range(repeat):
            for merge in (False, True):
                rows[merge].append(merge_map(cluster, tasks, mb, seconds, merge))
    med = {m: {k: statistics.median(r[k] for r in rows[m]) for k in ("wall", "cpu", "frames")} for m in rows}
    click.echo(f"bench merge: {tasks} tasks x {mb:g} MB histogram (random contents), {workers} local workers, "
               f"tasks sleep {seconds:g} s; medians of {repeat} runs each, alternating")
    click.echo(f"{'merge':<8}{'wall s':>10}{'client CPU s':>14}{'frames received':>17}")
    for m in (False, True):
        click.echo(f"{'on' if m else 'off':<8}{med[m]['wall']:>10.2f}{med[m]['cpu']:>14.2f}{med[m]['frames']:>17.0f}")
    click.echo(f"{'off/on':<8}{med[False]['wall'] / med[True]['wall']:>9.1f}x"
               f"{med[False]['cpu'] / med[True]['cpu']:>13.1f}x{med[False]['frames'] / max(1, med[True]['frames']):>16.1f}x")
