"""What did every worker do during a map: the timeline plot.

:func:`plot_timeline` draws one row per worker with one block per task, with the
headline numbers of :func:`client.reports.efficiency.efficiency` (defined there: busy, span,
the wall-clock efficiency, shown first, then the per-worker one, tail); ``rhtc timeline
run.json -o timeline.png`` (:data:`timeline_command`) does it from a saved record.

matplotlib is imported only inside the plotting functions, so importing this module
stays cheap.

Example::

    >>> from rhtc.client.reports.record import RunRecord
    >>> from rhtc.client.reports.timeline import efficiency
    >>> rec = RunRecord(start=100.0, end=110.0)
    >>> rec.add_task({"index": 0, "worker": "a", "start": 100, "stop": 105})
    >>> efficiency(rec)["per_worker"]
    {'a': 1.0}
"""
from __future__ import annotations

import os
import sys
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import click

from .efficiency import time_range, efficiency
from .record import RunRecord
from .rows import TaskRecord

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["efficiency", "plot_timeline", "timeline_command"]

COLOURS = {"hit": "#2ca02c", "disk": "#9467bd", "partial": "#98df8a", "miss": "#1f77b4", "compute": "#8c8c8c",
           "error": "#d62728"}
LABELS = {
    "hit": "cache hit (all bytes from memory)",
    "disk": "node disk hit (no file read)",
    "partial": "partial hit",
    "miss": "read from file",
    "compute": "no chunk data read",
    "error": "error",
}
#: Failed attempts (client.reports.attempts): their own colour and hatching, under the task blocks.
ATTEMPT_STYLES = {"retried": ("#f5b7b1", "////", "failed attempt, retried"),
                  "lost": ("#7f7f7f", "xxxx", "attempt lost with its process")}
MAX_LABELLED_WORKERS = 40
#: characters of the headline's lines, at most (the 14-inch figure's width at its title's size)
TITLE_CHARS = 130


def _si(value: float) -> str:
    """``1234567 -> '1.23M'``: short human-readable numbers for titles."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _headline(record: RunRecord, numbers: dict[str, Any]) -> str:
    """Two-line title: what ran, then how well."""
    name = record.function or "map"
    ident = f" {record.map_id[:8]}" if record.map_id else ""
    first = (f"{name}{ident}: {len(record.tasks)}/{record.n_tasks} tasks on "
             f"{len(numbers['per_worker'])} workers in {numbers['wall']:.1f} s")
    parts = [_efficiencies(numbers), f"tail {numbers['tail']:.1f} s (last 5% of tasks)"]
    if numbers["events_per_s"] is not None:
        parts.append(f"{_si(numbers['events_per_s'])} events/s")
    if numbers["cache_hit"] is not None:
        parts.append(f"cache hit {numbers['cache_hit']:.0%} of bytes, {numbers['files_opened']} files opened")
    parts.append(_failures(numbers))
    lines = [parts[0]]
    for part in parts[1:]:              # lines a 14-inch figure holds
        if len(lines[-1]) + len(part) + 5 > TITLE_CHARS:
            lines.append(part)
        else:
            lines[-1] += "  |  " + part
    return "\n".join([first, *lines])


def _efficiencies(numbers: dict[str, Any]) -> str:
    """'efficiency 57.1% by the wall clock, 100.0% per worker (72.7% to map end)'."""
    return (f"efficiency {numbers['efficiency_wall']:.1%} by the wall clock, "
            f"{numbers['efficiency']:.1%} per worker ({numbers['efficiency_to_end']:.1%} to map end)")


def _failures(numbers: dict[str, Any]) -> str:
    """'2 failed tasks, 5 failed attempts (3 lost), back-off 3.1 s' (lost: with their process)."""
    text = f"{numbers['errors']} failed tasks"
    if numbers.get("failed_attempts"):
        text += f", {numbers['failed_attempts']} failed attempts"
        if numbers.get("lost_attempts"):
            text += f" ({numbers['lost_attempts']} lost)"
        if numbers.get("backoff"):
            text += f", back-off {numbers['backoff']:.1f} s"
    return text


def _new_figure(figsize: tuple[float, float], headless: bool) -> "Figure":
    """A Figure that needs no display: pyplot-managed only for interactive use
    (pyplot already imported and nothing to save), else a bare Agg-rendered Figure."""
    if not headless and "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        return plt.figure(figsize=figsize, layout="constrained")
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def _draw_tasks(ax: "Axes", record: RunRecord, numbers: dict[str, Any], t0: float) -> None:
    """One row per worker, one block per task; one PolyCollection per colour."""
    import numpy as np
    from matplotlib.collections import PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    workers = record.workers
    row = {worker: i for i, worker in enumerate(workers)}
    height = 0.8
    by_source: dict[str, list[TaskRecord]] = defaultdict(list)
    for task in record.tasks:
        by_source[task.source].append(task)

    many = len(workers) > MAX_LABELLED_WORKERS
    handles = []
    for source, colour in COLOURS.items():
        tasks = by_source.get(source)
        if not tasks:
            continue
        x0 = np.array([t.start for t in tasks]) - t0
        x1 = np.maximum(np.array([t.stop for t in tasks]) - t0, x0)
        y = np.array([row[t.worker] for t in tasks], dtype=float)
        lo, hi = y - height / 2, y + height / 2
        verts = np.stack([np.stack([x0, lo], 1), np.stack([x0, hi], 1),
                          np.stack([x1, hi], 1), np.stack([x1, lo], 1)], axis=1)
        ax.add_collection(PolyCollection(
            verts, facecolors=colour, edgecolors="white" if not many else "none",
            linewidths=0.4, zorder=2 if source != "error" else 3))
        handles.append(Patch(facecolor=colour, label=f"{LABELS[source]} ({len(tasks)})"))

    handles += _draw_attempts(ax, record, row, t0, height, numbers["wall"])
    wall = numbers["wall"]
    if numbers["tail"] > 0:
        ax.axvspan(numbers["tail_start"], numbers["tail_start"] + numbers["tail"],
                   color="0.85", alpha=0.5, zorder=1, lw=0)
        ax.axvline(numbers["tail_start"], color="black", ls="--", lw=1.3, zorder=4)
        handles.append(Line2D([], [], color="black", ls="--", label="95% of tasks done"))
        ax.annotate(f"tail {numbers['tail']:.1f} s",
                    xy=(numbers["tail_start"] + numbers["tail"] / 2, 0.0),
                    xycoords=("data", "axes fraction"), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, zorder=5,
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.5", "lw": 0.5})
    ax.axvline(wall, color="black", lw=1, zorder=4)
    handles.append(Line2D([], [], color="black", label="last result"))

    ax.set_xlim(0.0, wall * 1.01 or 1.0)
    ax.set_ylim(len(workers) - 0.5, -0.5)  # first worker at the top
    if many:
        ax.set_ylabel(f"worker ({len(workers)}, ordered by first task)")
    else:
        ax.set_yticks(range(len(workers)), workers, fontsize=7 if len(workers) > 15 else 9)
    ax.set_xlabel("seconds since map start")
    ax.grid(axis="x", color="0.9", zorder=0)
    ax.set_axisbelow(True)
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(handles),
              frameon=False, fontsize=8, handlelength=1.5, borderaxespad=0.2)


def _draw_attempts(ax: "Axes", record: RunRecord, row: dict[str, int], t0: float, height: float,
                   wall: float) -> list:
    """Failed attempts as hatched blocks in their workers' rows (an instant one still shows,
    at least 0.4 % of the axis wide); returns legend handles."""
    from matplotlib.patches import Patch, Rectangle

    handles = []
    for outcome, (colour, hatch, label) in ATTEMPT_STYLES.items():
        attempts = [a for a in record.attempts if a.outcome == outcome and a.timed and a.worker in row]
        for a in attempts:
            ax.add_patch(Rectangle((a.start - t0, row[a.worker] - height / 2), max(a.duration, 0.004 * wall), height,
                                   facecolor=colour, hatch=hatch, edgecolor="#d62728" if outcome == "retried"
                                   else "black", linewidth=0.6, zorder=2.5))
        n = sum(1 for a in record.attempts if a.outcome == outcome)
        if n:
            handles.append(Patch(facecolor=colour, hatch=hatch, edgecolor="black", label=f"{label} ({n})"))
    return handles


def _draw_histogram(ax: "Axes", numbers: dict[str, Any]) -> None:
    """Histogram of per-worker efficiency, with the overall value marked."""
    values = [100 * v for v in numbers["per_worker"].values()]
    # 20 bins from a round number below the worst worker, so a tight cluster is resolved
    spread = 2 * (100.0 - min(values, default=0.0))
    low = 100.0 - next((w for w in (0.5, 1, 2, 5, 10, 20, 50) if w >= spread), 100.0)
    ax.hist(values, bins=[low + (100.0 - low) * i / 20 for i in range(21)], color="#1f77b4",
            edgecolor="white")
    ax.axvline(100 * numbers["efficiency"], color="#d62728", ls="--", lw=1.5,
               label=f"all workers {numbers['efficiency']:.1%}")
    ax.axvline(100 * numbers["worker_median"], color="0.3", ls=":", lw=1.5,
               label=f"median {numbers['worker_median']:.1%}")
    ax.set_xlim(low, 100)
    ax.set_xlabel("worker efficiency (%)")
    ax.set_ylabel("workers")
    ax.set_title("per-worker efficiency", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, frameon=False)


def _draw_numbers(ax: "Axes", record: RunRecord, numbers: dict[str, Any]) -> None:
    """The headline numbers as a small table, for the otherwise empty corner."""
    rows = [("tasks", f"{len(record.tasks)} / {record.n_tasks}"),
            ("workers", f"{len(numbers['per_worker'])}"),
            ("wall", f"{numbers['wall']:.1f} s"),
            ("efficiency, wall clock", f"{numbers['efficiency_wall']:.1%}"),
            ("efficiency, per worker", f"{numbers['efficiency']:.1%}"),
            ("per worker to map end", f"{numbers['efficiency_to_end']:.1%}"),
            ("worker min", f"{numbers['worker_min']:.1%}"),
            ("worker median", f"{numbers['worker_median']:.1%}"),
            ("tail (95-100%)", f"{numbers['tail']:.1f} s")]
    if numbers["events_per_s"] is not None:
        rows.append(("events/s", _si(numbers["events_per_s"])))
    if numbers["cache_hit"] is not None:
        rows.append(("cache hit", f"{numbers['cache_hit']:.1%} of bytes"))
        rows.append(("files opened", str(numbers["files_opened"])))
    rows.append(("failed tasks", str(numbers["errors"])))
    rows.append(("failed attempts", f"{numbers['failed_attempts']} ({numbers['lost_attempts']} lost)"))
    if numbers["backoff"]:
        rows.append(("retry back-off", f"{numbers['backoff']:.1f} s"))
    if record.metrics:
        mean_cpu = sum(s.cpu for s in record.metrics) / len(record.metrics)
        rows.append(("mean CPU", f"{mean_cpu:.0f} %"))
    ax.axis("off")
    ax.text(0.05, 0.98, "\n".join(name for name, _ in rows), va="top", ha="left",
            fontsize=8, transform=ax.transAxes, linespacing=1.5)
    ax.text(0.95, 0.98, "\n".join(value for _, value in rows), va="top", ha="right",
            fontsize=8, transform=ax.transAxes, linespacing=1.5, family="monospace")


def _draw_metrics(ax: "Axes", record: RunRecord, t0: float) -> None:
    """CPU % vs time: a faint line per worker and the mean over reporting workers."""
    import numpy as np
    from matplotlib.collections import LineCollection

    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for sample in record.metrics:
        series[sample.worker].append((sample.t - t0, sample.cpu))
    lines = [np.array(sorted(points)) for points in series.values()]
    alpha = 0.5 if len(lines) <= 10 else max(0.06, 3.0 / len(lines))
    ax.add_collection(LineCollection(lines, colors="#1f77b4", alpha=alpha, linewidths=0.6))

    t = np.array([s.t - t0 for s in record.metrics])
    cpu = np.array([s.cpu for s in record.metrics])
    n_bins = int(min(200, max(10, len(t) / max(1, len(lines)))))
    edges = np.linspace(t.min(), t.max(), n_bins + 1)
    which = np.clip(np.digitize(t, edges) - 1, 0, n_bins - 1)
    counts = np.bincount(which, minlength=n_bins)
    sums = np.bincount(which, weights=cpu, minlength=n_bins)
    filled = counts > 0
    centres = 0.5 * (edges[:-1] + edges[1:])
    ax.plot(centres[filled], sums[filled] / counts[filled], color="black", lw=1.5,
            label="mean over reporting workers")
    ax.set_ylim(0, max(105.0, float(cpu.max()) * 1.05))
    ax.set_ylabel("CPU %")
    ax.set_xlabel("seconds since map start")
    ax.grid(color="0.9")
    ax.legend(loc="lower left", fontsize=8, frameon=False)


def plot_timeline(record: RunRecord, path: str | os.PathLike[str] | None = None,
                  ax: "Axes | None" = None, metrics: bool = True) -> "Figure":
    """Draw what every worker did during a map, and how efficient that was.

    One row per worker (ordered by first task start), one block per task coloured by
    where it read from (green: all bytes from the cache, blue: from the file, red:
    error); white is idle. The grey band is the tail (from 95% to 100% of tasks
    done). Beside it a histogram of per-worker efficiency and, if the record has
    metrics and ``metrics`` is true, CPU % vs time underneath. With ``ax`` only the
    task rows are drawn, into that Axes. Saves a PNG if ``path`` is given; never
    calls ``plt.show()``.

    Example::

        >>> from rhtc.client.reports.record import RunRecord
        >>> rec = RunRecord(start=0.0, end=3.0)
        >>> rec.add_task({"index": 0, "worker": "w", "start": 0, "stop": 2, "bytes_file": 10})
        >>> fig = plot_timeline(rec)
        >>> fig.axes[0].get_xlabel()
        'seconds since map start'
    """
    numbers = efficiency(record)
    t0, _ = time_range(record)
    if ax is not None:
        _draw_tasks(ax, record, numbers, t0)
        ax.set_title(_headline(record, numbers), fontsize=9, loc="left", pad=18)
        fig = ax.figure
    else:
        with_metrics = bool(metrics and record.metrics)
        n_rows = len(numbers["per_worker"])
        rows_height = min(8.0, max(3.0, 1.5 + 0.045 * n_rows))
        heights = [rows_height, 2.2] if with_metrics else [rows_height]
        fig = _new_figure((14.0, sum(heights) + 1.0), headless=path is not None)
        grid = fig.add_gridspec(len(heights), 2, width_ratios=[4.2, 1], height_ratios=heights)
        ax_tasks = fig.add_subplot(grid[0, 0])
        _draw_tasks(ax_tasks, record, numbers, t0)
        _draw_histogram(fig.add_subplot(grid[0, 1]), numbers)
        if with_metrics:
            ax_cpu = fig.add_subplot(grid[1, 0], sharex=ax_tasks)
            _draw_metrics(ax_cpu, record, t0)
            _draw_numbers(fig.add_subplot(grid[1, 1]), record, numbers)
            ax_tasks.set_xlabel("")
        fig.suptitle(_headline(record, numbers), fontsize=11)
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


@click.command("timeline")
@click.argument("record_path", metavar="RECORD", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="PNG to write (default: RECORD with .png instead of .json).")
@click.option("--no-metrics", is_flag=True, help="Leave out the CPU panel.")
def timeline_command(record_path: str, output: str | None, no_metrics: bool) -> None:
    """Plot the timeline of a saved map run and print how efficient it was.

    Example: rhtc timeline run.json -o timeline.png
    """
    try:
        record = RunRecord.load(record_path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if output is None:
        output = os.path.splitext(record_path)[0] + ".png"
    numbers = efficiency(record)
    plot_timeline(record, path=output, metrics=not no_metrics)

    click.echo(_headline(record, numbers).splitlines()[0])
    click.echo(f"wall clock   {numbers['efficiency_wall']:.1%}  (busy {numbers['busy']:.1f} s of "
               f"{len(numbers['per_worker'])} workers x {numbers['wall']:.1f} s, submission to last result)")
    click.echo(f"efficiency   {numbers['efficiency']:.1%}  per worker (busy {numbers['busy']:.1f} s "
               f"of {numbers['span']:.1f} worker-seconds, each from its first task to its last)")
    click.echo(f"per worker   min {numbers['worker_min']:.1%}, "
               f"median {numbers['worker_median']:.1%}")
    click.echo(f"to map end   {numbers['efficiency_to_end']:.1%}  (counting the wait after each "
               "worker's last task)")
    click.echo(f"tail         {numbers['tail']:.2f} s  (95% -> 100% of tasks done)")
    if numbers["events_per_s"] is not None:
        click.echo(f"events/s     {numbers['events_per_s']:.4g}")
    if numbers["cache_hit"] is not None:
        click.echo(f"cache hit    {numbers['cache_hit']:.1%} of bytes ({numbers['files_opened']} files opened)")
    click.echo(f"errors       {_failures(numbers)}")
    click.echo(f"wrote {output}")
