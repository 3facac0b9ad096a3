"""Generate NanoAOD files for the nine AGC ttbar samples (``bench make-data --agc``).

Every branch of the real 2015 CMS Open Data sample, with its name and type
(:mod:`bench.agcschema`), ZLIB-compressed as in the AGC. What the AGC analysis reads
(jets, electrons, muons) gets ttbar-like physics: per sample a Poisson number of jets
(about 7 for ttbar, fewer for single top and W+jets) of which some are b jets with a high
``btagCSVV2``, about one isolated lepton, and ``Jet_jetId`` / ``Electron_cutBased`` /
``Muon_tightId`` drawn so that most objects pass; so both signal regions fill. Every other
branch is filler with NanoAOD-like precision (cross-reference indices are -1), so the
analysis reads about 4 % of each file's bytes, as in the AGC.

Files are ``agc_<process>__<variation>_NNN.root`` (what ``examples.agc_ttbar.agc_fileset``
reads); the events are split over the samples in proportion to the AGC's own (each
sample at least ``min_events``).

    >>> paths = make_agc_data("agc_doc", events=1_800, min_events=200, lean=True, progress=False)
    >>> len(paths), paths[0].rsplit("/", 1)[1]
    (9, 'agc_ttbar__nominal_000.root')
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import awkward as ak
import numpy as np

from .agcschema import COLLECTIONS, DTYPES, FLAT
from ..client.synthetic.writer import parse_compression, write_files

#: Bump when the generated content changes, so files from an older generator are rewritten.
FORMAT_VERSION = 2

#: (process, variation): (AGC events, mean jets, mean b jets, jet pt scale)
SAMPLES: dict[tuple[str, str], tuple[int, float, float, float]] = {
    ("ttbar", "nominal"): (276_079_127, 7.0, 2.0, 1.0),
    ("ttbar", "scaledown"): (39_329_663, 6.9, 2.0, 0.98),
    ("ttbar", "scaleup"): (38_424_467, 7.1, 2.0, 1.02),
    ("ttbar", "ME_var"): (19_098_219, 7.0, 2.0, 1.01),
    ("ttbar", "PS_var"): (19_337_064, 6.8, 2.0, 0.99),
    ("single_top_s_chan", "nominal"): (2_867_199, 4.5, 1.6, 1.0),
    ("single_top_t_chan", "nominal"): (109_305_936, 4.8, 1.2, 1.0),
    ("single_top_tW", "nominal"): (1_999_400, 5.8, 1.2, 1.0),
    ("wjets", "nominal"): (433_719_099, 4.2, 0.15, 1.0),
}
#: What the AGC analysis reads: its share of the compressed bytes is ~4 %.
ANALYSIS_BRANCHES: tuple[str, ...] = (
    "nJet", "Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass", "Jet_btagCSVV2", "Jet_jetId",
    "nElectron", "Electron_pt", "Electron_eta", "Electron_phi", "Electron_mass", "Electron_cutBased",
    "Electron_sip3d", "nMuon", "Muon_pt", "Muon_eta", "Muon_phi", "Muon_mass", "Muon_tightId",
    "Muon_sip3d", "Muon_pfRelIso04_all")
#: Mean multiplicity of the filler collections (per event).
_FILLER_MEAN = {"Photon": 2.0, "Tau": 2.0, "FatJet": 2.0, "SV": 3.0, "GenPart": 60.0, "GenJet": 8.0,
                "GenJetAK8": 3.0, "LHEPart": 6.0, "GenVisTau": 0.5, "GenDressedLepton": 1.0,
                "GenIsolatedPhoton": 0.5, "FsrPhoton": 0.2, "CorrT1METJet": 5.0, "SoftActivityJet": 6.0,
                "OtherPV": 3.0, "LHEPdfWeight": 101.0, "LHEReweightingWeight": 0.0, "LHEScaleWeight": 9.0,
                "PSWeight": 4.0}


def _round(x: np.ndarray, bits: int) -> np.ndarray:
    """float32 with ``bits`` mantissa bits kept (NanoAOD's reduced precision)."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32) & np.uint32((0xFFFFFFFF << (23 - bits)) & 0xFFFFFFFF)
    return u.view(np.float32)


def _filler(rng: np.random.Generator, n: int, code: str, name: str) -> np.ndarray:
    """``n`` filler values of one branch type."""
    if "Idx" in name:
        return np.full(n, -1, DTYPES[code])
    if code == "f":
        return _round(rng.standard_exponential(n, np.float32), 10)
    if code == "b":
        return rng.random(n, np.float32) < 0.05
    return rng.integers(0, 8, n).astype(DTYPES[code])


def _jagged(counts: np.ndarray, fields: dict[str, np.ndarray]) -> ak.Array:
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    if list(fields) == ["-"]:                   # an array, not a record (LHEPdfWeight)
        return ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(offsets),
                                                    ak.contents.NumpyArray(fields["-"])))
    record = ak.contents.RecordArray([ak.contents.NumpyArray(v) for v in fields.values()], list(fields),
                                     length=int(offsets[-1]))
    return ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(offsets), record))


def _collection(rng: np.random.Generator, counts: np.ndarray, name: str, physics: dict) -> ak.Array:
    """One collection: the physics fields given, every other field of the real schema as filler."""
    m = int(counts.sum())
    fields = {}
    for code, names in COLLECTIONS[name].items():
        for field in names:
            value = physics.get(field)
            fields[field] = value.astype(DTYPES[code], copy=False) if value is not None \
                else _filler(rng, m, code, field)
    return _jagged(counts, fields)


def _sorted_pt(rng: np.random.Generator, counts: np.ndarray, lo: float, slope: float) -> tuple[np.ndarray, np.ndarray]:
    """pt (sorted descending in each event) and the order that sorted them."""
    m = int(counts.sum())
    pt = lo + slope * rng.standard_exponential(m)
    order = np.lexsort((-pt, np.repeat(np.arange(len(counts)), counts)))
    return pt[order], order


def _kinematics(rng: np.random.Generator, pt: np.ndarray, eta_width: float) -> dict[str, np.ndarray]:
    m = len(pt)
    return {"pt": _round(pt, 10), "eta": _round(np.clip(eta_width * rng.standard_normal(m), -4.7, 4.7), 12),
            "phi": _round(rng.uniform(-np.pi, np.pi, m), 12)}


def _jets(rng: np.random.Generator, n: int, mean_jets: float, mean_b: float, scale: float) -> ak.Array:
    counts = rng.poisson(mean_jets, n)
    pt, order = _sorted_pt(rng, counts, 20.0, 35.0)
    jets = _kinematics(rng, pt * scale, 1.3)
    m = len(pt)
    is_b = (rng.random(m) < mean_b / max(mean_jets, 1e-9))[order]
    btag = np.where(is_b, np.where(rng.random(m) < 0.7, rng.uniform(0.5, 1.0, m), rng.uniform(0, 0.5, m)),
                    np.where(rng.random(m) < 0.03, rng.uniform(0.5, 1.0, m), rng.uniform(0, 0.5, m)))
    jets.update(mass=_round(jets["pt"] * rng.uniform(0.05, 0.2, m), 10), btagCSVV2=_round(btag, 10),
                jetId=rng.choice(np.array([0, 2, 6], np.int32), m, p=[0.03, 0.05, 0.92]))
    return _collection(rng, counts, "Jet", jets)


def _leptons(rng: np.random.Generator, n: int) -> tuple[ak.Array, ak.Array]:
    """Electrons and muons: about one isolated lepton per event, plus soft ones."""
    out = []
    hard = rng.random(n)                         # the isolated lepton: an electron or a muon
    for name, has_hard, mass, pdg in (("Electron", hard < 0.45, 0.000511, 11),
                                      ("Muon", (hard >= 0.45) & (hard < 0.95), 0.10566, 13)):
        counts = has_hard.astype(np.int64) + rng.poisson(0.3, n)
        pt, _ = _sorted_pt(rng, counts, 10.0, 25.0)
        pt[np.cumsum(counts)[has_hard] - counts[has_hard]] += 20.0      # the hard one leads
        m = len(pt)
        f = _kinematics(rng, pt, 1.0)
        charge = rng.integers(0, 2, m).astype(np.int32) * 2 - 1
        f.update(mass=np.full(m, mass, np.float32), charge=charge, pdgId=-pdg * charge,
                 sip3d=_round(1.5 * rng.standard_exponential(m), 10),
                 pfRelIso04_all=_round(0.08 * rng.standard_exponential(m), 8),
                 pfRelIso03_all=_round(0.07 * rng.standard_exponential(m), 8))
        if name == "Electron":
            f["cutBased"] = rng.choice(np.array([0, 1, 2, 3, 4], np.int32), m, p=[.05, .05, .1, .15, .65])
        else:
            f["tightId"] = rng.random(m) < 0.85
        out.append(_collection(rng, counts, name, f))
    return out[0], out[1]


def generate_agc_events(n: int, rng: np.random.Generator, first_event: int, params: dict) -> dict[str, Any]:
    """One batch of ``n`` events of one AGC sample (``params["process"]``, ``["variation"]``).

    >>> b = generate_agc_events(100, np.random.default_rng(0), 1, {"process": "ttbar", "variation": "nominal"})
    >>> b["Jet"].fields[:3], int(b["event"][0])
    (['area', 'btagCSVV2', 'btagDeepB'], 1)
    """
    _, mean_jets, mean_b, scale = SAMPLES[(params["process"], params["variation"])]
    lean = params.get("lean", False)
    out: dict[str, Any] = {}
    for code, names in ({} if lean else FLAT).items():
        for name in names:
            out[name] = _filler(rng, n, code, name)
    event = np.arange(first_event, first_event + n, dtype=np.uint64)
    out.update(run=np.full(n, 1, np.uint32), event=event,
               luminosityBlock=((event - 1) // 1000 + 1).astype(np.uint32))
    out["Electron"], out["Muon"] = _leptons(rng, n)
    out["Jet"] = _jets(rng, n, mean_jets, mean_b, scale)
    for name in () if lean else COLLECTIONS:
        if name not in out:
            counts = rng.poisson(_FILLER_MEAN.get(name, 1.0), n)
            out[name] = _collection(rng, counts, name, {})
    return out


def sample_sizes(events: int, min_events: int = 500) -> dict[tuple[str, str], int]:
    """Events per sample: ``events`` split in proportion to the AGC's, each at least ``min_events``.

    >>> sizes = sample_sizes(100_000); sizes[("ttbar", "nominal")], sizes[("single_top_tW", "nominal")]
    (29365, 500)
    """
    total = sum(s[0] for s in SAMPLES.values())
    return {k: max(min_events, round(events * s[0] / total)) for k, s in SAMPLES.items()}


def make_agc_data(outdir: str | os.PathLike[str], *, events: int = 100_000, files_per_sample: int = 1,
                  compression: str = "ZLIB", seed: int = 0, min_events: int = 500,
                  samples: Sequence[tuple[str, str]] | None = None, lean: bool = False,
                  progress: bool = True, workers: int | None = None) -> list[str]:
    """Write the nine AGC samples (or ``samples``), about ``events`` in all, into ``outdir``;
    return the paths. Files already written with the same parameters are reused.

    ``lean=True`` writes only the Jet, Electron and Muon collections (all their fields) and
    run/event/luminosityBlock: the analysis gives the same results, and a file takes a
    second to write instead of tens (uproot's tree header writing grows with the square
    of the number of branches), which is what tests want. See the module docstring.
    """
    if events < 1 or files_per_sample < 1:
        raise ValueError(f"events and files_per_sample must be positive, got {events}, {files_per_sample}")
    codec = parse_compression(compression)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths, params = [], []
    for stream, ((process, variation), n) in enumerate(sample_sizes(events, min_events).items()):
        if samples is not None and (process, variation) not in samples:
            continue
        per_file = max(1, n // files_per_sample)
        for i in range(files_per_sample):
            paths.append(out / f"agc_{process}__{variation}_{i:03d}.root")
            params.append({"generator": "bench.agcgen", "format": FORMAT_VERSION, "process": process, "stream": stream,
                           "variation": variation, "file_index": i, "events": per_file, "seed": seed,
                           "compression": f"{type(codec).__name__}:{codec.level}",
                           "basket_events": min(per_file, 50_000), **({"lean": True} if lean else {})})
    return write_files(paths, params, generate_agc_events, progress=progress, workers=workers,
                       desc=f"writing AGC samples {codec!r}")


def read_fraction(path: str | os.PathLike[str], branches: Sequence[str] = ANALYSIS_BRANCHES) -> float:
    """Fraction of the ``Events`` tree's compressed bytes that ``branches`` hold."""
    import uproot
    with uproot.open(path) as f:
        tree = f["Events"]
        total = sum(b.compressed_bytes for b in tree.values())
        return sum(tree[b].compressed_bytes for b in branches) / total
