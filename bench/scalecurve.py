"""``bench scale --curve``: the scaling curve, tasks/s against workers for a few task
lengths, and where it flattens, why.

The cells are :mod:`bench.scale`'s own (one ``remote_map`` each, light workers, one Redis,
one client); this module holds what makes them a curve: its grid (:data:`WORKERS` light
workers x :data:`SECONDS` s tasks x :data:`SIZES` results, each given option replacing
its default), the tasks per worker of each cell (:func:`waves_for`), the judgement of each
cell (:func:`judge`), its table and the picture (:func:`plot`).

**Each cell ideally lasts the same** (:data:`CELL_SECONDS`): its tasks per worker are that
over its task's length (at least :data:`MIN_WAVES`). The ramp (registering a map, every
worker's first take) and the tail cost about the same seconds whatever the tasks' length,
so with the same number of waves they would eat most of a 100 ms cell and little of a 10 s
one; with the same ideal duration they weigh alike on every line of the curve.

**The judgement**, per line of the curve (one task length and result size), each cell
against the cell of fewer workers before it. A cell's efficiency here is the curve's own:
its tasks/s over the ideal (workers / task seconds). The efficiency by the wall clock
(printed beside it) counts a task's whole run as busy, so it reads high when the tasks
themselves ran long: their **stretch** (mean task time / the task's length) says by how
much, and a light worker's sleep runs long only when its thread waits for a CPU. The two
split a cell's shortfall: its share of the ideal is its wall-clock efficiency (the gaps
between tasks: the ramp, the dispatch, the tail) divided by its stretch (the tasks' own
time), and :func:`stretch_share` is the stretch's part of it.

* a cell has **flattened** when its tasks/s falls under :data:`FLAT` of the ideal's share
  that its line did best, or grew by less than :data:`GROWTH` over the previous cell's; a
  flattened cell says which CPU ran out (:func:`out_of_cpu`): the **broker** (Redis, one
  thread, near a full core), the **client** (near a full core), or the machine's cores
  (busy near all of them, or the tasks' stretch explains at least :data:`STRETCHED` of the
  shortfall: the light workers' threads waited for a CPU), and then whether the light
  workers took more of them (the **harness**: on a real pool they run on their own nodes)
  or other processes did (the **machine**: the other jobs of a shared host); or that none
  did (the gaps between tasks: the ramp, the dispatch, the tail);
* a cell **bends back** when its tasks/s is lower than the previous cell's: more workers
  did less. The bench says it loudly, and the curve should never do it.

    >>> line = [{"workers": 10, "seconds": 1.0, "bytes": 10_000, "tasks": 300, "tasks_per_s": 9.5,
    ...          "busy_s": 300.0, "efficiency_wall": 0.95, "redis_cpu_share": 0.02, "client_cpu_share": 0.03,
    ...          "light_workers_cores": 0.05, "machine_busy_cores": 0.2},
    ...         {"workers": 100, "seconds": 1.0, "bytes": 10_000, "tasks": 3000, "tasks_per_s": 60.0,
    ...          "busy_s": 3600.0, "efficiency_wall": 0.72, "redis_cpu_share": 0.3, "client_cpu_share": 0.2,
    ...          "light_workers_cores": 1.3, "machine_busy_cores": 1.95}]
    >>> [j["out_of_cpu"] for j in judge(line, cores=2)]
    [None, ['harness']]
    >>> print(judge(line, cores=2)[1]["verdict"])
    100 workers x 1 s x 10 kB flattened (60.0 % of the ideal < 90 % of the line's best, 95.0 %): the harness (the light workers) ran out of CPU: tasks ran 1.20x their length (36 % of the shortfall); Redis 0.30 of a core, the client 0.20; the machine busy 1.95 of 2 cores: the light workers 1.30, other processes 0.15
"""
from __future__ import annotations

import math
from pathlib import Path

import click
from click.core import ParameterSource

from . import results
from .ceiling import size_text

#: the curve's grid when ``--workers``, ``--seconds`` or ``--sizes`` is not given
WORKERS, SECONDS, SIZES = "10,50,100,200,500,1000", "0.1,1,10", "10kB"
#: the series of the benchmarks page that curve results join (results.envelope)
SERIES = "scale, the scaling curve"
#: each cell's ideal duration (s): its tasks per worker are this over its task's length...
CELL_SECONDS = 30.0
#: ...but at least this many
MIN_WAVES = 3
#: a cell has flattened under this share of its line's best tasks/s over the ideal...
FLAT = 0.9
#: ...or when its tasks/s grew by less than this share over the previous cell's
GROWTH = 0.1
#: a CPU has run out at this share of what it can give: one core for Redis (one thread)
#: and for the client (one interpreter), every core for the machine
NEAR_FULL = 0.85
#: a cell whose stretched tasks explain this share of its shortfall from the ideal ran out
#: of the machine's cores (its light workers' threads waited for one), busy or not
STRETCHED = 0.5


def grid(ctx: click.Context, workers: str, seconds: str, sizes: str, waves: int) -> tuple[str, str, str, int | None]:
    """The curve's ``--workers``, ``--seconds``, ``--sizes`` and ``--waves``: each as
    given on the command line, else the curve's (:data:`WORKERS`, :data:`SECONDS`,
    :data:`SIZES`; for the waves None: each cell's own, :func:`waves_for`)."""
    given = [ctx.get_parameter_source(name) is not ParameterSource.DEFAULT
             for name in ("workers_text", "seconds_text", "sizes_text", "waves")]
    return tuple(value if g else default for value, g, default in
                 zip((workers, seconds, sizes, waves), given, (WORKERS, SECONDS, SIZES, None)))


def waves_for(seconds: float) -> int:
    """Tasks per worker of a cell of ``seconds`` s tasks, so that it ideally lasts
    :data:`CELL_SECONDS` (at least :data:`MIN_WAVES`).

    >>> [waves_for(s) for s in (0.1, 1, 10, 60)]
    [300, 30, 3, 3]
    """
    return max(MIN_WAVES, round(CELL_SECONDS / seconds))


def ideal(cell: dict) -> float:
    """The tasks/s of a cell whose workers never wait: workers / task seconds."""
    return cell["workers"] / cell["seconds"]


def of_ideal(cell: dict) -> float:
    """A cell's tasks/s over the ideal: the curve's efficiency."""
    return cell["tasks_per_s"] / ideal(cell)


def stretch(cell: dict) -> float:
    """How many times its length a cell's task ran on average (1: as long as it sleeps)."""
    return cell["busy_s"] / (cell["tasks"] * cell["seconds"])


def stretch_share(cell: dict) -> float:
    """The part of a cell's shortfall from the ideal that its stretched tasks explain: its
    share of the ideal is its wall-clock efficiency over its stretch, and this is the
    stretch's part of the logarithm (0 for a cell at or over the ideal).

    >>> round(stretch_share({"workers": 100, "seconds": 1.0, "tasks_per_s": 50.0, "tasks": 100, "busy_s": 141.4}), 2)
    0.5
    """
    lost = -math.log(of_ideal(cell))
    return math.log(stretch(cell)) / lost if lost > 0 else 0.0


def _line(cell: dict) -> tuple:
    return cell["seconds"], cell["bytes"], cell.get("merge")


#: what each verdict names
WHO = {"broker": "the broker (Redis)", "client": "the client", "harness": "the harness (the light workers)",
       "machine": "the machine (other processes)"}


def out_of_cpu(cell: dict, cores: int) -> tuple[list[str], str]:
    """Which CPU a cell ran out of, of ``broker``, ``client`` and ``harness`` or
    ``machine`` (the machine's cores ran out, busy near all of them or its stretched tasks
    explaining most of its shortfall, :func:`stretch_share`: the light workers' or other
    processes', whichever took more), with the measured figures that say so."""
    redis, client = cell["redis_cpu_share"], cell["client_cpu_share"]
    busy, light = cell["machine_busy_cores"], cell["light_workers_cores"]
    others = max(0.0, busy - light - redis - client)
    names = [name for name, share in (("broker", redis), ("client", client)) if share >= NEAR_FULL]
    if busy >= NEAR_FULL * cores or stretch_share(cell) >= STRETCHED:
        names.append("harness" if light >= others else "machine")
    figures = (f"tasks ran {stretch(cell):.2f}x their length ({stretch_share(cell) * 100:.0f} % of the shortfall); "
               f"Redis {redis:.2f} of a core, the client {client:.2f}; the machine busy {busy:.2f} of {cores} cores: "
               f"the light workers {light:.2f}, other processes {others:.2f}")
    return names, figures


def judge(cells: list[dict], cores: int) -> list[dict | None]:
    """Each cell's judgement (None for a cell that was skipped or failed), against the
    cell of fewer workers before it on its line: ``ideal_tasks_per_s``; ``flattened``
    (why, or None); for a flattened cell ``out_of_cpu`` (the CPUs that ran out, ``[]``
    for none) and ``verdict`` (its line, with the figures); ``bend_back`` (its line, or
    None)."""
    best: dict[tuple, float] = {}
    for c in cells:
        if "tasks_per_s" in c:
            best[_line(c)] = max(best.get(_line(c), 0.0), of_ideal(c))
    before: dict[tuple, dict] = {}
    out: list[dict | None] = []
    for c in cells:
        if "tasks_per_s" not in c:
            out.append(None)
            continue
        prev, before[_line(c)] = before.get(_line(c)), c
        why = []
        if of_ideal(c) < FLAT * best[_line(c)]:
            why.append(f"{of_ideal(c) * 100:.1f} % of the ideal < {FLAT * 100:.0f} % of the line's best, "
                       f"{best[_line(c)] * 100:.1f} %")
        if prev and c["tasks_per_s"] < (1 + GROWTH) * prev["tasks_per_s"]:
            why.append(f"tasks/s grew less than {GROWTH * 100:.0f} % over {prev['tasks_per_s']:.1f} at "
                       f"{prev['workers']} workers")
        j = {"ideal_tasks_per_s": ideal(c), "of_ideal": of_ideal(c), "task_stretch": stretch(c),
             "flattened": "; ".join(why) or None, "out_of_cpu": None, "verdict": None, "bend_back": None}
        if why:
            names, figures = out_of_cpu(c, cores)
            ran_out = (" and ".join(WHO[n] for n in names) + " ran out of CPU") if names else \
                "no CPU ran out (the gaps between tasks: the ramp, the dispatch, the tail)"
            j.update(out_of_cpu=names, verdict=f"{_name(c)} flattened ({j['flattened']}): {ran_out}: {figures}")
        if prev and c["tasks_per_s"] < prev["tasks_per_s"]:
            j["bend_back"] = (f"BEND-BACK: {_name(c)} ran {c['tasks_per_s']:.1f} tasks/s, fewer than "
                              f"{prev['tasks_per_s']:.1f} at {prev['workers']} workers: more workers did less")
        out.append(j)
    return out


def annotate(result: dict) -> dict:
    """``bench scale``'s figures (``cells``, ``cores``) with each measured cell's
    judgement (:func:`judge`) added to it."""
    for cell, j in zip(result["cells"], judge(result["cells"], result["cores"])):
        cell.update(j or {})
    return result


def _merge(cell: dict) -> str:
    """How a cell's results came back: merged by the workers, alone, or "" (no reduction)."""
    return {None: "", True: "merged", False: "alone"}[cell.get("merge")]


def _name(cell: dict) -> str:
    return f"{cell['workers']} workers x {cell['seconds']:g} s x {size_text(cell['bytes'])} {_merge(cell)}".rstrip()


def verdict_lines(result: dict) -> list[str]:
    """What the curve of an annotated result concludes: a line per flattened cell (which
    CPU ran out, with its figures), a loud one per cell that bent back, and whether the
    curve ever did."""
    judged = [c for c in result["cells"] if "ideal_tasks_per_s" in c]
    flat = [c["verdict"] for c in judged if c["flattened"]]
    backs = [c["bend_back"] for c in judged if c["bend_back"]]
    return [f"the curve: {len(flat)} flattened cell(s) of {len(judged)}", *flat, *backs,
            f"THE CURVE BENDS BACK at {len(backs)} cell(s)" if backs else "the curve never bends back"]


LEGEND = ("the scaling curve: tasks/s against workers; ideal: workers / task seconds; of ideal: tasks/s / "
          "ideal; wall eff: busy task time / (workers x the map's wall time, submission to last result); "
          "stretch: mean task time / the task's length; redis, client: CPU share of one core; light: cores the "
          "light workers used; busy: cores the whole machine used (others' too)")
HEADER = (f"{'workers':>7} {'task':>5} {'result':>7} {'':>6} {'waves':>5} {'tasks/s':>8} {'ideal':>8} "
          f"{'of ideal':>8} {'wall eff':>8} {'stretch':>7} {'redis':>6} {'client':>6} {'light':>5} {'busy':>5}")


def format_row(cell: dict) -> str:
    """One line of the curve's table, of a measured cell (bench/scale.py's format_row says
    why a cell was skipped or failed)."""
    return (f"{cell['workers']:>7} {cell['seconds']:>4g}s {size_text(cell['bytes']):>7} {_merge(cell):>6} "
            f"{cell['tasks'] // cell['workers']:>5} {cell['tasks_per_s']:>8.1f} {ideal(cell):>8.1f} "
            f"{of_ideal(cell) * 100:>7.2f}% {cell['efficiency_wall'] * 100:>7.2f}% {stretch(cell):>6.2f}x "
            f"{cell['redis_cpu_share'] * 100:>5.1f}% "
            f"{cell['client_cpu_share'] * 100:>5.1f}% {cell['light_workers_cores']:>5.2f} "
            f"{cell['machine_busy_cores']:>5.2f}")


def table_lines(result: dict) -> list[str]:
    """The curve's table: its header, a row per measured cell (:func:`format_row`), a line
    per cell skipped or failed."""
    return [HEADER, *(format_row(c) if "tasks_per_s" in c else
                      f"{_name(c)}: " + (f"skipped: {c['skipped']}" if "skipped" in c else f"FAILED: {c['failed']}")
                      for c in result["cells"])]


def conclude(doc: dict, plot_path: str | None) -> dict:
    """Print what a curve result (``bench scale --curve``'s JSON, in its envelope) concludes
    (judged again: :func:`annotate`): its table and its verdicts, the bend-backs to stderr
    too; draw it into ``plot_path``. Returns its figures."""
    result = annotate(results.figures(doc))
    click.echo("\n".join(["", *table_lines(result), "", *verdict_lines(result)]))
    backs = [c["bend_back"] for c in result["cells"] if c.get("bend_back")]
    if backs:
        click.echo("\n".join(backs), err=True)
    if plot_path:
        click.echo(f"the curve drawn: {plot(doc, plot_path)}")
    return result


COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")


def plot(doc: dict, out: str | Path) -> Path:
    """Draw a curve result (the JSON of ``bench scale --curve``, with its envelope or
    without; judged again, as :func:`conclude` does) into the PNG ``out``: tasks/s against
    workers on log-log axes, a line per task length with its ideal dashed beside it, and
    the efficiencies against workers (tasks/s over the ideal, and by the wall clock, dotted);
    flattened cells hollow and labelled with the CPU that ran out, bent-back ones crossed
    in red."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    result = results.figures(doc)
    result = annotate(dict(result, cells=[dict(c) for c in result["cells"]]))
    lines: dict[tuple, list[dict]] = {}
    for c in result["cells"]:
        if "tasks_per_s" in c:
            lines.setdefault(_line(c), []).append(c)
    if not lines:
        raise ValueError("the result holds no measured cell to draw (every cell was skipped or failed)")
    sizes = {k[1] for k in lines}
    fig, (rate, eff) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=120)
    for k, ((seconds, nbytes, merge), colour) in enumerate(zip(sorted(lines), COLOURS * 4)):
        cells = sorted(lines[(seconds, nbytes, merge)], key=lambda c: c["workers"])
        label = f"{seconds:g} s tasks" + (f", {size_text(nbytes)}" if len(sizes) > 1 else "") \
            + (" (alone)" if merge is False else "")
        w = [c["workers"] for c in cells]
        rate.plot(w, [ideal(c) for c in cells], "--", color=colour, alpha=0.55, lw=1.2)
        rate.plot(w, [c["tasks_per_s"] for c in cells], "-", color=colour, lw=1.8, label=label)
        eff.plot(w, [of_ideal(c) * 100 for c in cells], "-", color=colour, lw=1.8)
        eff.plot(w, [c["efficiency_wall"] * 100 for c in cells], ":", color=colour, lw=1.2)
        for c in cells:
            face = "white" if c["flattened"] else colour
            rate.plot(c["workers"], c["tasks_per_s"], "o", color=colour, mfc=face, ms=6)
            eff.plot(c["workers"], of_ideal(c) * 100, "o", color=colour, mfc=face, ms=6)
            if c["bend_back"]:
                rate.plot(c["workers"], c["tasks_per_s"], "x", color="red", ms=12, mew=2.5)
            if c["flattened"]:    # (under its point, each line's a step lower; over it near the axis)
                eff.annotate(", ".join(c["out_of_cpu"]) or "no CPU", (c["workers"], of_ideal(c) * 100),
                             textcoords="offset points", xytext=(0, -12 - 8 * k if of_ideal(c) > 0.15 else 6),
                             ha="center", fontsize=7, color=colour)
    rate.plot([], [], "--", color="grey", label="ideal: workers / task s")
    rate.plot([], [], "o", color="grey", mfc="white", label="flattened")
    if any(c["bend_back"] for cs in lines.values() for c in cs):
        rate.plot([], [], "x", color="red", mew=2.5, label="bent back")
    rate.set(xscale="log", yscale="log", xlabel="light workers", ylabel="tasks/s")
    rate.set_title("throughput (dashed: ideal)", fontsize=10)
    rate.legend(frameon=False, fontsize=8)
    eff.set(xscale="log", xlabel="light workers", ylabel="efficiency (%)", ylim=(0, 105))
    eff.set_title("tasks/s / ideal (solid), by the wall clock (dotted);\nhollow: flattened, labelled with the CPU "
                  "that ran out", fontsize=10)
    plain = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}")
    rate.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
    rate.yaxis.set_major_formatter(plain)
    rate.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for ax in (rate, eff):
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xticks(sorted({c["workers"] for cs in lines.values() for c in cs}))
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.margins(x=0.08)
    about = doc.get("machine") if "figures" in doc else None
    fig.suptitle("bench scale --curve: one Redis, one client, light workers"
                 + (f" ({doc['date'][:10]}, {about.get('cores')} cores shared by all)" if about else ""),
                 fontsize=11)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)
    return out
