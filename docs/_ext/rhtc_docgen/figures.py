"""Pictures drawn from benchmark results at build time (into ``docs/_static/figures/``,
which git ignores), before any page is read, so that a page may show one: the warm-versus-cold
bars of a ``bench dimuon`` result, the read velocity per tier of a ``bench affinity`` result
(its picture carries the result's date, machine and command; shown by ``docs/caching.md``),
and the scaling curve of ``bench scale --curve`` (:func:`rhtc.bench.scalecurve.plot`, shown
by ``docs/scale.md``).

Also a script: ``python docs/_ext/rhtc_docgen/figures.py RESULT.json OUT.png``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

FIGURES = "_static/figures"
#: the scaling curve, as ``docs/scale.md`` shows it
CURVE = f"{FIGURES}/scale-curve.png"
_LABELS = {"ours": "redis-htcondor", "dask": "dask.distributed", "bare": "bare loop (1 process)"}


def rates(figures: dict) -> dict[str, tuple[float, float]]:
    """system -> (cold, warm) in MHz of a dimuon result: from ``cold_mhz``/``warm_mhz``, or
    from the events and ``cold_s``/``warm_s``."""
    events = figures.get("events")
    out = {}
    for system in _LABELS:
        r = figures.get(system) or {}
        if "cold_mhz" in r and "warm_mhz" in r:
            out[system] = (float(r["cold_mhz"]), float(r["warm_mhz"]))
        elif events and r.get("cold_s") and r.get("warm_s"):
            out[system] = (events / r["cold_s"] / 1e6, events / r["warm_s"] / 1e6)
    return out


def warm_cold(figures: dict, out: Path, title: str) -> bool:
    """Draw the cold and warm rates of each system as bars into ``out``; False if the result
    holds no cold/warm pair."""
    got = rates(figures)
    if not got:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    systems = list(got)
    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=120)
    xs = range(len(systems))
    cold = [got[s][0] for s in systems]
    warm = [got[s][1] for s in systems]
    ax.bar([x - 0.2 for x in xs], cold, 0.4, label="cold (first run)", color="#8da0cb")
    ax.bar([x + 0.2 for x in xs], warm, 0.4, label="warm (same chunks again)", color="#fc8d62")
    for x, c, w in zip(xs, cold, warm):
        ax.text(x + 0.2, w, f"{w / c:.1f}x", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(xs), [_LABELS[s] for s in systems])
    ax.set_ylabel("events per second (MHz)")
    ax.set_title(title, fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)
    return True


def affinity_bars(doc: dict, out: Path) -> bool:
    """Draw the read velocity of each tier of a ``bench affinity`` result (``doc``, with its
    envelope) as bars, each split by the share of its tasks served from the file, the node's
    disk tier or RAM (the timeline's colours), into ``out``; False if it holds no tiers."""
    f = doc.get("figures", {})
    tiers = f.get("tiers") or {}
    if not tiers:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from rhtc.client.reports.timeline import COLOURS, LABELS
    fig, ax = plt.subplots(figsize=(7.2, 4.2), dpi=120)
    shown = set()
    for x, t in enumerate(tiers.values()):
        bottom = 0.0
        for source, share in sorted(t["served"].items(), key=lambda kv: list(COLOURS).index(kv[0])):
            height = t["velocity_mb_s_core"] * share
            ax.bar(x, height, 0.6, bottom=bottom, color=COLOURS[source])
            bottom += height
            shown.add(source)
        ax.text(x, bottom, f"{t['velocity_mb_s_core']:.1f}", ha="center", va="bottom", fontsize=9)
    ratios = f.get("ratios", {})

    def tick(name: str) -> str:
        against = [f"{ratios[f'over_{base}'][name]:.2f}x cold {word}" for base, word in (("local", "local"), ("se", "SE"))
                   if base != name and name in ratios.get(f"over_{base}", {})]
        return "\n".join([*tiers[name]["label"].split(", ", 1), *against])
    ax.set_xticks(range(len(tiers)), [tick(n) for n in tiers], fontsize=7.5)
    ax.set_ylabel("MB of input per second per core")
    ax.margins(y=0.12)
    ax.legend(handles=[Patch(color=COLOURS[s], label=f"served from: {LABELS[s]}") for s in COLOURS if s in shown],
              frameon=False, fontsize=7.5, loc="upper left")
    m = doc.get("machine") or {}
    ax.set_title(f"bench affinity: dimuon, {f.get('events', 0) / 1e6:g}M {f.get('compression', '')} events, "
                 f"{f.get('workers', '?')} workers, medians of {f.get('repeats', '?')}\n"
                 f"{doc.get('date', '')[:10]}, {m.get('hostname', '?')} ({m.get('cores', '?')} cores, "
                 f"{m.get('cpu_model', '?')})", fontsize=9)
    import textwrap
    foot = textwrap.wrap(f"input MB: {f.get('input', '?')}", 120) + textwrap.wrap(doc.get("command", ""), 120)
    fig.text(0.01, 0.01, "\n".join(foot), fontsize=6, family="monospace", color="#555555", va="bottom")
    fig.tight_layout(rect=(0, 0.015 * (len(foot) + 1), 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)
    return True


def pictures(series: str, doc: dict) -> list[tuple[str, str, Callable[[Path], object]]]:
    """(image path relative to the docs, caption, what draws it into a path) of each picture
    of result ``doc`` of ``series`` (a bench, or a setting of it: benchmarks.load_results)."""
    from rhtc.bench import scalecurve
    f = doc["figures"]
    if series == "dimuon" and rates(f):
        what = f"{f.get('events', 0) / 1e6:g}M events {f.get('compression', '')}, {f.get('workers', '?')} workers"
        note = " (transcribed)" if doc.get("transcribed_from") else ""
        return [(f"{FIGURES}/dimuon-warm-cold.png",
                 f"Cold and warm read rates of the dimuon analysis, {what}, {doc['date'][:10]}{note}: the warm "
                 f"run is served from the workers' caches.", lambda out: warm_cold(f, out, f"bench dimuon: {what}"))]
    if series == "affinity" and f.get("tiers"):
        return [(f"{FIGURES}/affinity-read-velocity.png",
                 "Read velocity of the dimuon analysis from a storage element, a local file, the node disk tier "
                 "and RAM, each bar split by where its tasks were served from.", lambda out: affinity_bars(doc, out))]
    if series == scalecurve.SERIES:
        lengths = ", ".join(f"{s:g}" for s in sorted({c["seconds"] for c in f["cells"] if "tasks_per_s" in c}))
        return [(CURVE, f"bench scale --curve, {doc['date'][:10]}: tasks/s (left, dashed: the ideal) and the "
                        f"efficiency by the wall clock (right) against light workers, for {lengths} s tasks; a "
                        f"hollow point flattened (labelled with the CPU that ran out), a red cross bent back.",
                 lambda out: scalecurve.plot(doc, out))]
    return []


if __name__ == "__main__":
    import json
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    doc = json.loads(Path(sys.argv[1]).read_text())
    drawn = pictures(doc.get("series") or doc.get("bench", ""), doc)
    if not drawn:
        sys.exit(f"{sys.argv[1]} holds no figures that a picture is drawn from (a dimuon run's cold and warm "
                 f"rates, a bench affinity run's tiers, a scaling curve)")
    drawn[0][2](Path(sys.argv[2]))
