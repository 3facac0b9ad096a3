"""The Analysis Grand Challenge CMS ttbar analysis as a coffea processor.

The IRIS-HEP AGC's ttbar task (see ``../shared/AGC.md``): one isolated lepton and at least
four jets; H_T in the 4j1b region and the mass of the highest-pt b-tagged trijet (m_bjj)
in 4j2b; cross-section weights; jet pt scale and resolution variations, b-tag and W+jets
weight variations, and the variation samples; histograms with ``process`` and
``variation`` axes. It runs unchanged on coffea's executors and on ours::

    >>> from coffea import processor
    >>> from coffea.nanoevents import NanoAODSchema
    >>> import rhtc
    >>> fileset = agc_fileset("data/agc")                                   # doctest: +SKIP
    >>> run = processor.Runner(executor=rhtc.coffea.RedisExecutor(), schema=NanoAODSchema,
    ...                        cachestrategy=rhtc.coffea.worker_cache, chunksize=50_000)  # doctest: +SKIP
    >>> out = run(fileset, processor_instance=TtbarAnalysis(), treename="Events")  # doctest: +SKIP
    >>> out["hist"]["4j2b"][:, "ttbar", "nominal"]                         # doctest: +SKIP

``python examples/agc_ttbar.py [DIR|FILE ...]`` runs it (default: the real 200-event 2015
sample) on a local cluster and writes ``agc_ttbar.png``.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import itertools
import os
import re
import sys
from typing import Sequence

import awkward as ak
import hist
import numpy as np
from coffea import processor

LUMI = 3378.0                                # pb^-1
XSEC = {"ttbar": 729.84, "single_top_s_chan": 3.2944, "single_top_t_chan": 59.168 / 0.252,
        "single_top_tW": 75.842, "wjets": 61457 * 0.252}   # pb
#: The nine AGC samples: (process, variation).
SAMPLES = [("ttbar", "nominal"), ("ttbar", "scaledown"), ("ttbar", "scaleup"), ("ttbar", "ME_var"),
           ("ttbar", "PS_var"), ("single_top_s_chan", "nominal"), ("single_top_t_chan", "nominal"),
           ("single_top_tW", "nominal"), ("wjets", "nominal")]
REGIONS = ("4j1b", "4j2b")
B_TAG = 0.5
PT_VARIATIONS = ("pt_scale_up", "pt_res_up")
BTAG_VARIATIONS = tuple(f"btag_var_{i}_{d}" for i in range(4) for d in ("up", "down"))
#: The real 200-event 2015 sample ($RHTC_NANOAOD, else ../shared/data/nanoaod beside the checkout).
REAL_SAMPLE = os.path.join(os.environ.get("RHTC_NANOAOD") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "nanoaod"),
    "nanoAOD_2015_CMS_Open_Data_ttbar.root")


def chunk_seed(metadata: dict) -> int:
    """The ``pt_res_up`` seed of one chunk: its file UUID and entry range, so every
    executor draws the same factors for the same events.

    >>> chunk_seed({"fileuuid": "u", "entrystart": 0, "entrystop": 10})
    7050184734114522437
    """
    text = f"{metadata.get('fileuuid', '')}:{metadata.get('entrystart')}:{metadata.get('entrystop')}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def _histogram() -> hist.Hist:
    return (hist.Hist.new.Reg(25, 50, 550, name="observable", label="observable [GeV]")
            .StrCat([], name="process", label="Process", growth=True)
            .StrCat([], name="variation", label="Systematic variation", growth=True)
            .Weight())


def _flat(collection: ak.Array, fields: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A jagged collection as numpy: the objects per event and each field over all objects,
    event after event (what ``ak.num`` and ``ak.flatten`` give)."""
    return ak.to_numpy(ak.num(collection, axis=1)), {f: ak.to_numpy(ak.flatten(collection[f])) for f in fields}


def _count(passed: np.ndarray, n_objects: np.ndarray) -> np.ndarray:
    """``ak.sum(passed, axis=1)``: per event, the objects that pass (flat booleans, event
    after event, ``n_objects`` per event).

    >>> _count(np.array([True, False, True, True]), np.array([2, 0, 2]))
    array([1, 0, 2])
    """
    passed_so_far = np.concatenate(([0], np.cumsum(passed)))
    last = np.cumsum(n_objects)
    return passed_so_far[last] - passed_so_far[last - n_objects]


def _sum(values: np.ndarray, n_objects: np.ndarray) -> np.ndarray:
    """``ak.sum(values, axis=1)``: per event, its values added up in order in their own
    dtype, as awkward adds them (so float32 sums are awkward's to the last bit).

    >>> _sum(np.array([1.0, 2.0, 4.0]), np.array([2, 0, 1]))
    array([3., 0., 4.])
    """
    first = np.cumsum(n_objects) - n_objects
    out = np.zeros(len(n_objects), values.dtype)
    for i in range(int(n_objects.max(initial=0))):
        has = n_objects > i
        out[has] += values[first[has] + i]
    return out


@functools.lru_cache(maxsize=None)
def _triples(n_jets: int) -> np.ndarray:
    """The (3, combinations) jet indices of every three of ``n_jets`` jets, in the order of
    ``ak.combinations``.

    >>> _triples(4).T.tolist()
    [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]
    """
    return np.array(list(itertools.combinations(range(n_jets), 3)), np.int64).reshape(-1, 3).T


def _trijet_mass(pt, eta, phi, mass, btag, n_jets: np.ndarray) -> np.ndarray:
    """Per event: the mass of the three-jet combination with >= 1 b-tag and the largest pt.

    The jets' fields are flat (event after event, ``n_jets`` per event, at least three);
    the events with the same number of jets form one (events, combinations) table."""
    px, py = pt * np.cos(phi), pt * np.sin(phi)
    pz = pt * np.sinh(eta)
    e = np.sqrt(px**2 + py**2 + pz**2 + mass**2)
    tagged = btag > B_TAG
    first = np.cumsum(n_jets) - n_jets
    out = np.empty(len(n_jets), e.dtype)
    for n in np.unique(n_jets):
        events = np.flatnonzero(n_jets == n)
        j1, j2, j3 = first[events, None] + _triples(int(n))[:, None, :]
        sx, sy, sz, se = (v[j1] + v[j2] + v[j3] for v in (px, py, pz, e))
        pt3 = np.where(tagged[j1] | tagged[j2] | tagged[j3], np.hypot(sx, sy), -1.0)
        best = np.argmax(pt3, axis=1)[:, None]                   # the first of equal pts
        sx, sy, sz, se = (np.take_along_axis(v, best, axis=1)[:, 0] for v in (sx, sy, sz, se))
        out[events] = np.sqrt(np.maximum(se**2 - sx**2 - sy**2 - sz**2, 0.0))
    return out


class TtbarAnalysis(processor.ProcessorABC):
    """The AGC ttbar processor; ``systematics=False`` fills the nominal histograms only.

    Reads from ``events.metadata``: ``process``, ``variation``, ``nevts`` (events of that
    sample over the files used) and, for the seed, ``fileuuid``/``entrystart``/``entrystop``.

    The leptons and jets are taken out of NanoEvents once as flat numpy arrays (one value
    per object, event after event) and the selection runs on those: each awkward call costs
    ~0.5 ms whatever the number of events, and the jagged version of this analysis makes
    ~170 of them per chunk. The numbers are the jagged version's (tests/unit/examples/test_agc_ttbar.py).
    """

    def __init__(self, systematics: bool = True):
        self.systematics = systematics

    def process(self, events) -> dict:
        meta = events.metadata
        process, variation = meta["process"], meta["variation"]
        weight = XSEC[process] * LUMI / meta["nevts"]
        out = {region: _histogram() for region in REGIONS}
        entries: dict[str, int] = {}       # unweighted fills per histogram slice, for exact checks

        def fill(region: str, observable: np.ndarray, name: str, w) -> None:
            out[region].fill(observable=observable, process=process, variation=name, weight=w)
            key = f"{region}/{process}/{name}"
            entries[key] = entries.get(key, 0) + len(observable)

        n = len(events)
        n_el, el = _flat(events.Electron, ("pt", "eta", "cutBased", "sip3d"))
        n_mu, mu = _flat(events.Muon, ("pt", "eta", "tightId", "sip3d", "pfRelIso04_all"))
        n_jets, jet = _flat(events.Jet, ("pt", "eta", "phi", "mass", "btagCSVV2", "jetId"))
        n_lep = (_count((el["pt"] > 30) & (abs(el["eta"]) < 2.1) & (el["cutBased"] == 4) & (el["sip3d"] < 4), n_el)
                 + _count((mu["pt"] > 30) & (abs(mu["eta"]) < 2.1) & mu["tightId"] & (mu["sip3d"] < 4)
                          & (mu["pfRelIso04_all"] < 0.15), n_mu))
        factors = {"nominal": None}
        if self.systematics and variation == "nominal":
            rng = np.random.default_rng(chunk_seed(meta))
            factors["pt_scale_up"] = 1.03
            factors["pt_res_up"] = rng.normal(1.0, 0.05, len(jet["pt"]))
        for pt_var, factor in factors.items():
            pt = jet["pt"] if factor is None else jet["pt"] * factor
            good = (pt > 30) & (abs(jet["eta"]) < 2.4) & ((jet["jetId"] & 4) != 0)
            n_good = _count(good, n_jets)
            n_b = _count(good & (jet["btagCSVV2"] > B_TAG), n_jets)
            base = (n_lep == 1) & (n_good >= 4)
            for region, cut in (("4j1b", n_b == 1), ("4j2b", n_b >= 2)):
                selected = base & cut
                sel = good & np.repeat(selected, n_jets)     # the good jets of the selected events
                n_sel = n_good[selected]
                if region == "4j1b":
                    observable = _sum(pt[sel], n_sel)
                else:
                    observable = _trijet_mass(pt[sel], jet["eta"][sel], jet["phi"][sel], jet["mass"][sel],
                                              jet["btagCSVV2"][sel], n_sel)
                fill(region, observable, variation if pt_var == "nominal" else pt_var, weight)
                if pt_var != "nominal" or not self.systematics or variation != "nominal":
                    continue
                first = np.cumsum(n_sel) - n_sel               # each selected event's first good jet
                for i in range(4):
                    shift = 0.075 * pt[sel][first + i] / 50
                    for direction, sign in (("up", 1), ("down", -1)):
                        fill(region, observable, f"btag_var_{i}_{direction}", weight * (1 + sign * shift))
                if process == "wjets":
                    for direction, sign in (("up", 1), ("down", -1)):
                        fill(region, observable, f"scale_var_{direction}", weight * (1 + sign * 0.025))
            if pt_var == "nominal":
                cutflow = {"one lepton": int(np.sum(n_lep == 1)), "four jets": int(np.sum(n_good >= 4)),
                           "both": int(np.sum(base))}
        return {"hist": out, "entries": entries, "nevents": {f"{process}__{variation}": n},
                "cutflow": {f"{process}__{variation}": cutflow}}

    def postprocess(self, accumulator):
        return accumulator


def sample_of(path: str) -> tuple[str, str]:
    """(process, variation) from a generated file's name ``agc_<process>__<variation>_NNN.root``.

    >>> sample_of("/d/agc_ttbar__PS_var_000.root")
    ('ttbar', 'PS_var')
    """
    m = re.match(r"agc_(.+?)__(.+?)_\d+\.root$", os.path.basename(path))
    if not m:
        raise ValueError(f"{path}: not an AGC sample file name (agc_<process>__<variation>_NNN.root); "
                         "write them with `bench make-data --agc`, or pass a fileset dict")
    return m.group(1), m.group(2)


def agc_fileset(paths: str | Sequence[str], sample: tuple[str, str] | None = None) -> dict:
    """The coffea fileset for AGC files: ``{"process__variation": {"files", "metadata"}}``.

    ``paths`` is a directory of ``bench make-data --agc`` files, a glob, or a list of
    files; ``sample`` names the (process, variation) of files not named by the generator
    (the real 2015 sample is ttbar nominal). ``nevts`` is counted from the files.

    >>> fs = agc_fileset(REAL_SAMPLE, sample=("ttbar", "nominal"))   # doctest: +SKIP
    >>> fs["ttbar__nominal"]["metadata"]["nevts"]                     # doctest: +SKIP
    200
    """
    import uproot
    if isinstance(paths, str):
        paths = sorted(glob.glob(os.path.join(paths, "agc_*.root"))) if os.path.isdir(paths) \
            else sorted(glob.glob(paths))
    if not paths:
        raise FileNotFoundError("no AGC files found: write them with `bench make-data --agc --out DIR`")
    fileset: dict = {}
    for path in paths:
        process, variation = sample or sample_of(path)
        entry = fileset.setdefault(f"{process}__{variation}", {
            "files": [], "metadata": {"process": process, "variation": variation, "nevts": 0}})
        entry["files"].append(os.path.abspath(path))
        with uproot.open(path) as f:
            entry["metadata"]["nevts"] += f["Events"].num_entries
    return fileset


def plot(out: dict, path: str | None = None):
    """Stacked 4j1b (H_T) and 4j2b (m_bjj) nominal distributions; saved to ``path``."""
    import matplotlib
    if path:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, region, label in zip(axes, REGIONS, ("$H_T$ [GeV]", "$m_{bjj}$ [GeV]")):
        h = out["hist"][region]
        procs = [p for p in h.axes["process"] if "nominal" in h.axes["variation"]]
        stack = [h[:, p, "nominal"] for p in procs]
        edges = h.axes["observable"].edges
        bottom = np.zeros(len(edges) - 1)
        for p, hp in zip(procs, stack):
            values = hp.values()
            ax.stairs(values + bottom, edges, baseline=bottom, fill=True, label=p, alpha=0.85)
            bottom = bottom + values
        ax.set_xlabel(label)
        ax.set_ylabel("events")
        ax.set_title(f"{region} (AGC ttbar, L = {LUMI / 1000:.2f} fb$^{{-1}}$)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=90)
    return fig


def main(argv: Sequence[str]) -> None:
    import rhtc
    from coffea.nanoevents import NanoAODSchema
    real = not argv
    fileset = agc_fileset(REAL_SAMPLE, sample=("ttbar", "nominal")) if real else agc_fileset(
        argv[0] if len(argv) == 1 else list(argv))
    run = processor.Runner(executor=rhtc.coffea.RedisExecutor(), schema=NanoAODSchema,
                           cachestrategy=rhtc.coffea.worker_cache, chunksize=50_000)
    for attempt in ("cold", "warm"):
        out = run(fileset, processor_instance=TtbarAnalysis(), treename="Events")
        rec = rhtc.last_map().record()
        print(f"{attempt}: {sum(out['nevents'].values()):,} events, "
              f"4j1b {out['hist']['4j1b'][:, :, 'nominal'].sum().value:.1f}, "
              f"4j2b {out['hist']['4j2b'][:, :, 'nominal'].sum().value:.1f} weighted events; "
              f"{rec.summary() if hasattr(rec, 'summary') else ''}")
    plot(out, "agc_ttbar.png")
    print("wrote agc_ttbar.png")


if __name__ == "__main__":
    main(sys.argv[1:])
