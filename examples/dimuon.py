"""The dimuon analysis: events with at least two muons, opposite charge, invariant mass
of the leading pair, histogrammed around the Z (60-120 GeV) and on a wide log axis.

Run it (the README's first command does)::

    python examples/dimuon.py            # generated NanoAOD (made on first use), local cluster
    python examples/dimuon.py --real     # the real CMS files in ../shared/data/nanoaod
    python examples/dimuon.py a.root b.root --step 200000

It runs the map twice: the second run is served from the workers' branch caches.

The arithmetic is vectorised on the flat contents of the jagged arrays (numpy on the
muons of all events at once), which is several times faster than per-event slicing
such as ``muons.pt[:, 0]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

BRANCHES = ["Muon_pt", "Muon_eta", "Muon_phi", "Muon_mass", "Muon_charge"]
HERE = Path(__file__).resolve().parent
REAL_FILES = [HERE.parent.parent / "shared" / "data" / "nanoaod" / n for n in ("nano_dimuon.root", "nano_dy.root")]


def histograms():
    """Empty histograms: the Z window and a wide log-spaced mass axis."""
    import hist
    return {
        "mass_z": hist.Hist.new.Reg(60, 60, 120, name="mass", label="m(μμ) [GeV]").Double(),
        "mass_wide": hist.Hist.new.Reg(100, 1, 1000, name="mass", label="m(μμ) [GeV]",
                                       transform=hist.axis.transform.log).Double(),
    }


def leading_pair_mass(pt, eta, phi, mass, charge, offsets):
    """Invariant mass of the two leading muons of each event whose leading pair has
    opposite charges. Inputs are the flat per-muon numpy arrays of a chunk and the
    per-event offsets into them; everything is vectorised over all events at once, in
    float32 like the branches (ample for a mass above 1 GeV)."""
    counts = offsets[1:] - offsets[:-1]
    i0 = offsets[:-1][counts >= 2]
    i1 = i0 + 1
    opposite = charge[i0] != charge[i1]
    i0, i1 = i0[opposite], i1[opposite]
    pt0, pt1, m0, m1 = pt[i0], pt[i1], mass[i0], mass[i1]
    pz0, pz1 = pt0 * np.sinh(eta[i0]), pt1 * np.sinh(eta[i1])
    e0 = np.sqrt(pt0 * pt0 + pz0 * pz0 + m0 * m0)
    e1 = np.sqrt(pt1 * pt1 + pz1 * pz1 + m1 * m1)
    p0p1 = pt0 * pt1 * np.cos(phi[i0] - phi[i1]) + pz0 * pz1
    return np.sqrt(np.maximum(m0 * m0 + m1 * m1 + 2 * (e0 * e1 - p0p1), 0))


def flat_and_offsets(array):
    """(flat numpy contents, offsets) of a jagged array of numbers, without copying when
    it is already packed (as uproot returns it)."""
    import awkward as ak
    layout = array.layout
    if not (type(layout).__name__ == "ListOffsetArray" and type(layout.content).__name__ == "NumpyArray"
            and layout.offsets[0] == 0):
        layout = ak.to_packed(array).layout
    return layout.content.data, layout.offsets.data


def dimuon(chunk) -> dict:
    """One chunk in, histograms and counts out (combine them with ``+``)."""
    arrays = chunk.arrays(BRANCHES, how=dict)
    flat = {}
    for b in BRANCHES:
        flat[b], offsets = flat_and_offsets(arrays[b])
    m = leading_pair_mass(flat["Muon_pt"], flat["Muon_eta"], flat["Muon_phi"], flat["Muon_mass"],
                          flat["Muon_charge"], offsets)
    h = histograms()
    h["mass_z"].fill(m)
    h["mass_wide"].fill(m)
    return {**h, "events": len(offsets) - 1, "pairs": len(m)}


def describe(result: dict) -> str:
    """A few lines on the Z peak: where it is, how many pairs, an ASCII plot."""
    hz = result["mass_z"]
    values, edges = hz.values(), hz.axes[0].edges
    centers = 0.5 * (edges[1:] + edges[:-1])
    lines = [f"{result['events']:,} events, {result['pairs']:,} opposite-charge leading pairs, "
             f"{int(values.sum()):,} in 60-120 GeV"]
    if values.sum() > 0:
        peak = centers[int(np.argmax(values))]
        mean = float((values * centers).sum() / values.sum())
        lines.append(f"Z peak: highest bin at {peak:.1f} GeV, mean in window {mean:.1f} GeV")
        top = values.max()
        for lo in range(0, 60, 4):                     # 15 rows of 4 GeV
            v = values[lo:lo + 4].sum()
            bar = "#" * int(round(50 * v / (4 * top))) if top else ""
            lines.append(f"  {edges[lo]:5.0f}-{edges[lo + 4]:3.0f} GeV {int(v):>9,} {bar}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, name, log in ((a, "mass_z", False), (b, "mass_wide", True)):
        h = result[name]
        ax.stairs(h.values(), h.axes[0].edges, fill=True, alpha=0.6)
        ax.set_xlabel("m(μμ) [GeV]")
        ax.set_ylabel("pairs / bin")
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
    a.set_title("Z window")
    b.set_title(f"{result['events']:,} events")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> dict:
    from rhtc import LocalCluster, make_chunks, remote_map
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="NanoAOD files (default: generated data)")
    p.add_argument("--real", action="store_true", help="use the real CMS files in ../shared/data/nanoaod")
    p.add_argument("--step", type=int, default=250_000, help="entries per chunk")
    p.add_argument("--workers", type=int, default=None, help="start a local cluster of this many workers "
                   "(default: $RHTC_BROKER / config file, else a local cluster with one worker per CPU)")
    p.add_argument("--generate", default="4x500000", help="FILESxEVENTS of generated data (default 4x500000)")
    p.add_argument("--data-dir", default=str(HERE.parent / "data" / "generated"))
    p.add_argument("--out", default="dimuon.png", help="plot file")
    a = p.parse_args(argv)

    if a.real:
        files = [str(f) for f in REAL_FILES]
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            sys.exit(f"the real files are not here: {missing}")
    elif a.files:
        files = a.files
    else:
        from rhtc import make_nanoaod
        n_files, n_events = (int(x) for x in a.generate.lower().split("x"))
        print(f"generated NanoAOD: {n_files} files x {n_events:,} events in {a.data_dir} "
              "(made once, reused afterwards)")
        files = make_nanoaod(a.data_dir, files=n_files, events=n_events, compression="LZ4")
    chunks = make_chunks(files, step=a.step)
    cluster = LocalCluster(n_workers=a.workers).start() if a.workers else None
    try:
        times = []
        for label in ("first run (reads the files)", "second run (from the workers' caches)"):
            t = time.perf_counter()
            result = remote_map(dimuon, chunks, reduce=True, broker=cluster, label="dimuon")
            times.append(time.perf_counter() - t)
            print(f"{label}: {times[-1]:.2f} s, {result['events'] / times[-1] / 1e6:.2f} MHz")
        print(f"rerun speedup: {times[0] / times[1]:.1f}x")
    finally:
        if cluster is not None:
            cluster.close()
    print(describe(result))
    print(f"plot: {plot(result, a.out)}")
    return result


if __name__ == "__main__":
    main()
