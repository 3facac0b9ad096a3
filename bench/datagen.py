"""Generate NanoAOD-schema ROOT files with millions of events for the benchmarks.

The real NanoAOD samples in the repository are a few dozen events each; throughput and
cache benchmarks need millions. :func:`make_data` writes ``Events`` TTrees (not RNTuple)
whose branch names and types follow CMS NanoAODv6 (``nMuon`` is ``uint32``,
``Muon_pt`` is ``float[]``, ``Muon_charge`` is ``int32_t[]``, ``event`` is ``uint64``, ...)
with the chosen ROOT compression, so that a dimuon analysis written for real NanoAOD runs
on them unchanged and reads only a few percent of each file's bytes, as it would on real
NanoAOD.

Physics, per event (all vectorised numpy, deterministic given the seed):

* 40% Z -> mu mu: Breit-Wigner mass (91.19 GeV, width 2.5 GeV, 60-120 GeV), smeared by
  a 1.5% pt resolution; 20% Drell-Yan continuum (mass 12 GeV + exponential, 30 GeV
  slope); both muons of a pair have opposite charge; 40% of events have no prompt pair;
* every event also gets Poisson-distributed soft extra muons of random charge;
* muons outside ``|eta| < 2.4`` or below 3 GeV are dropped, the rest sorted by pt;
* jets, electrons, photons, taus, trigger objects, secondary vertices and flat
  event-level branches (MET, PV, rho, HLT and Flag bits) with NanoAOD-like
  distributions and NanoAOD's reduced float precision, so that compression ratios look
  like NanoAOD's.

Files are called ``nano_gen_000.root``, ``nano_gen_001.root``, ...; a sidecar
``nano_gen_000.root.json`` records the parameters, and a later call with the same
parameters reuses the file instead of writing it again.

Example::

    >>> from bench.datagen import make_data, dimuon_fraction
    >>> paths = make_data("/tmp/nano", files=2, events=20_000, progress=False)
    >>> [p.rsplit("/", 1)[1] for p in paths]
    ['nano_gen_000.root', 'nano_gen_001.root']
    >>> dimuon_fraction(paths[0]) < 0.1
    True
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import awkward as ak
import click
import numpy as np
import uproot

#: Bump when the generated content changes, so files from an older generator are rewritten.
FORMAT_VERSION = 1

#: Accepted compression names and the level used for each (LZMA 9 is NanoAOD's default).
COMPRESSIONS: dict[str, tuple[type, int]] = {
    "LZMA": (uproot.LZMA, 9),
    "ZLIB": (uproot.ZLIB, 1),
    "LZ4": (uproot.LZ4, 1),
    "ZSTD": (uproot.ZSTD, 5),
}

#: The branches a dimuon-mass analysis reads.
DIMUON_BRANCHES: tuple[str, ...] = ("nMuon", "Muon_pt", "Muon_eta", "Muon_phi", "Muon_mass", "Muon_charge")

Z_MASS, Z_WIDTH, MUON_MASS = 91.1876, 2.4952, 0.1056583745
_TWO_PI = np.float32(2 * np.pi)


def parse_compression(name: str) -> uproot.compression.Compression:
    """The uproot compression object for ``"LZMA"``, ``"ZLIB"``, ``"LZ4"`` or ``"ZSTD"``.

    Case-insensitive; ``"NAME:LEVEL"`` overrides the default level.

    >>> parse_compression("lz4"), parse_compression("ZLIB:6")
    (LZ4(1), ZLIB(6))
    """
    codec, _, level = str(name).strip().partition(":")
    if codec.upper() not in COMPRESSIONS:
        raise ValueError(f"unknown compression {name!r}: choose one of "
                         f"{', '.join(COMPRESSIONS)} (case-insensitive, optionally NAME:LEVEL)")
    cls, default = COMPRESSIONS[codec.upper()]
    try:
        return cls(int(level) if level else default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad compression level in {name!r}: {exc}") from None


# ----------------------------------------------------------------------------------------
# Field recipes. Each field: (name, dtype, recipe, mantissa bits kept or None).
# Recipes: ("uni", lo, hi), ("exp", offset, scale), ("tri", centre, half-width),
# ("pow", k, scale) = scale*u**k, ("int", lo, hi), ("bool", p), ("choice", values, probs),
# ("const", value). Types follow NanoAODv6 as in nano_dimuon.root.
_F, _I, _B, _U = "f4", "i4", "?", "u1"
_LEPTON_IP = [("dxy", _F, ("tri", 0, 0.01), 10), ("dxyErr", _F, ("exp", 0.001, 0.002), 8),
              ("dz", _F, ("tri", 0, 0.02), 10), ("dzErr", _F, ("exp", 0.001, 0.003), 8),
              ("ip3d", _F, ("exp", 0, 0.006), 10), ("sip3d", _F, ("exp", 0, 1.5), 10),
              ("pfRelIso03_all", _F, ("exp", 0, 0.12), 8), ("jetIdx", _I, ("int", -1, 6), None),
              ("cleanmask", _U, ("const", 1), None)]
_MUON = _LEPTON_IP + [
    ("pfRelIso04_all", _F, ("exp", 0, 0.15), 8), ("miniPFRelIso_all", _F, ("exp", 0, 0.1), 8),
    ("tkRelIso", _F, ("exp", 0, 0.05), 8), ("segmentComp", _F, ("uni", 0.2, 1.0), 8),
    ("nStations", _I, ("int", 1, 5), None), ("nTrackerLayers", _I, ("int", 6, 18), None),
    ("tightId", _B, ("bool", 0.8), None), ("mediumId", _B, ("bool", 0.85), None),
    ("looseId", _B, ("bool", 0.95), None), ("isGlobal", _B, ("bool", 0.9), None),
    ("isTracker", _B, ("bool", 0.97), None), ("isPFcand", _B, ("bool", 0.95), None),
    ("softId", _B, ("bool", 0.8), None), ("pfIsoId", _U, ("int", 0, 7), None),
    ("highPtId", _U, ("choice", (0, 1, 2), (0.8, 0.05, 0.15)), None)]
_ELECTRON = _LEPTON_IP + [
    ("deltaEtaSC", _F, ("tri", 0, 0.02), 10), ("hoe", _F, ("exp", 0, 0.03), 8),
    ("r9", _F, ("uni", 0.5, 1.0), 10), ("sieie", _F, ("exp", 0.005, 0.005), 10),
    ("eInvMinusPInv", _F, ("tri", 0, 0.02), 10), ("mvaFall17V2Iso", _F, ("uni", -1, 1), 10),
    ("mvaFall17V2noIso", _F, ("uni", -1, 1), 10), ("cutBased", _I, ("int", 0, 5), None),
    ("photonIdx", _I, ("int", -1, 2), None), ("tightCharge", _I, ("int", 0, 3), None),
    ("convVeto", _B, ("bool", 0.9), None), ("mvaFall17V2Iso_WP90", _B, ("bool", 0.7), None),
    ("mvaFall17V2Iso_WP80", _B, ("bool", 0.6), None), ("lostHits", _U, ("int", 0, 3), None)]
_PHOTON = [
    ("r9", _F, ("uni", 0.3, 1.0), 10), ("sieie", _F, ("exp", 0.005, 0.006), 10),
    ("hoe", _F, ("exp", 0, 0.05), 8), ("mvaID", _F, ("uni", -1, 1), 10),
    ("pfRelIso03_all", _F, ("exp", 0, 0.3), 8), ("pfRelIso03_chg", _F, ("exp", 0, 0.2), 8),
    ("charge", _I, ("const", 0), None), ("pdgId", _I, ("const", 22), None),
    ("cutBasedBitmap", _I, ("int", 0, 8), None), ("jetIdx", _I, ("int", -1, 8), None),
    ("electronIdx", _I, ("int", -1, 1), None), ("electronVeto", _B, ("bool", 0.8), None),
    ("pixelSeed", _B, ("bool", 0.2), None), ("isScEtaEB", _B, ("bool", 0.75), None),
    ("mvaID_WP90", _B, ("bool", 0.5), None), ("cleanmask", _U, ("const", 1), None)]
_JET = [
    ("area", _F, ("uni", 0.35, 0.65), 10), ("btagDeepFlavB", _F, ("pow", 4, 1), 10),
    ("btagDeepFlavC", _F, ("pow", 3, 1), 10), ("btagDeepB", _F, ("pow", 4, 1), 10),
    ("btagDeepC", _F, ("pow", 3, 1), 10), ("btagCSVV2", _F, ("pow", 2, 1), 10),
    ("qgl", _F, ("uni", 0, 1), 10), ("chHEF", _F, ("uni", 0, 1), 6), ("neHEF", _F, ("pow", 2, 1), 6),
    ("chEmEF", _F, ("pow", 3, 1), 6), ("neEmEF", _F, ("pow", 2, 1), 6), ("muEF", _F, ("pow", 8, 1), 6),
    ("rawFactor", _F, ("uni", 0, 0.3), 6), ("bRegCorr", _F, ("tri", 1.05, 0.2), 10),
    ("bRegRes", _F, ("exp", 0.05, 0.05), 10), ("jetId", _I, ("choice", (0, 2, 6), (0.05, 0.05, 0.9)), None),
    ("puId", _I, ("choice", (0, 4, 6, 7), (0.2, 0.1, 0.1, 0.6)), None),
    ("nConstituents", _I, ("int", 2, 60), None), ("nMuons", _I, ("int", 0, 2), None),
    ("nElectrons", _I, ("int", 0, 2), None), ("muonIdx1", _I, ("int", -1, 2), None),
    ("muonIdx2", _I, ("const", -1), None), ("electronIdx1", _I, ("int", -1, 1), None),
    ("electronIdx2", _I, ("const", -1), None), ("cleanmask", _U, ("int", 0, 2), None)]
_TAU = [("decayMode", _I, ("choice", (0, 1, 10, 11), (0.3, 0.45, 0.2, 0.05)), None),
        ("dxy", _F, ("tri", 0, 0.02), 10), ("dz", _F, ("tri", 0, 0.05), 14),
        ("chargedIso", _F, ("exp", 0, 3.0), 10), ("neutralIso", _F, ("exp", 0, 2.0), 10),
        ("rawDeepTau2017v2p1VSjet", _F, ("uni", 0, 1), 10), ("rawDeepTau2017v2p1VSe", _F, ("uni", 0, 1), 10),
        ("rawDeepTau2017v2p1VSmu", _F, ("uni", 0, 1), 10), ("jetIdx", _I, ("int", -1, 6), None),
        ("idDeepTau2017v2p1VSjet", _U, ("int", 0, 256), None), ("idDeepTau2017v2p1VSe", _U, ("int", 0, 256), None),
        ("idDeepTau2017v2p1VSmu", _U, ("int", 0, 16), None), ("idDecayModeNewDMs", _B, ("bool", 0.95), None),
        ("cleanmask", _U, ("const", 1), None)]
_TRIGOBJ = [("id", _I, ("choice", (1, 11, 13, 15, 22), (0.4, 0.15, 0.2, 0.1, 0.15)), None),
            ("filterBits", _I, ("int", 0, 1024), None), ("l1pt", _F, ("exp", 0, 20.0), 8)]
_SV = [("dlen", _F, ("exp", 0, 0.5), 10), ("dlenSig", _F, ("exp", 3, 10), 10),
       ("dxy", _F, ("exp", 0, 0.3), 10), ("dxySig", _F, ("exp", 3, 10), 10),
       ("pAngle", _F, ("exp", 0, 0.03), 10), ("chi2", _F, ("exp", 0, 1.0), 8),
       ("ndof", _F, ("int", 1, 8), 8), ("x", _F, ("tri", 0, 0.5), 10), ("y", _F, ("tri", 0, 0.5), 10),
       ("z", _F, ("tri", 0, 5), 14)]
# (collection, mean multiplicity, pt threshold, pt slope, |eta| limit, mass recipe,
#  charge: None = no charge branch, 0 = charge only, pdg = charge and pdgId, extra fields)
_COLLECTIONS = [
    ("Electron", 0.8, 5.0, 15.0, 2.5, ("const", 0.000511), 11, _ELECTRON),
    ("Photon", 1.0, 5.0, 12.0, 2.5, ("const", 0.0), None, _PHOTON),
    ("Jet", 5.0, 15.0, 25.0, 4.7, ("jetmass",), None, _JET),
    ("Tau", 0.6, 18.0, 15.0, 2.3, ("uni", 0.14, 1.8), 0, _TAU),
    ("TrigObj", 3.0, 3.0, 20.0, 2.5, None, None, _TRIGOBJ),
    ("SV", 1.0, 1.0, 8.0, 2.4, ("exp", 0.3, 1.5), None, _SV),
]
_FLAT = [
    ("MET_pt", _F, ("exp", 0, 25.0), None), ("MET_phi", _F, ("uni", -np.pi, np.pi), 12),
    ("MET_sumEt", _F, ("exp", 200, 500.0), None), ("MET_significance", _F, ("exp", 0, 3.0), 10),
    ("MET_covXX", _F, ("exp", 50, 200.0), 8), ("MET_covXY", _F, ("tri", 0, 50.0), 8),
    ("MET_covYY", _F, ("exp", 50, 200.0), 8), ("PV_ndof", _F, ("exp", 10, 80.0), 8),
    ("PV_x", _F, ("tri", 0.096, 0.002), 10), ("PV_y", _F, ("tri", -0.06, 0.002), 10),
    ("PV_z", _F, ("tri", 0.0, 6.0), 16), ("PV_chi2", _F, ("tri", 1.0, 0.3), 8),
    ("PV_score", _F, ("exp", 100, 3000.0), 8), ("PV_npvs", _I, ("int", 5, 60), None),
    ("PV_npvsGood", _I, ("int", 5, 55), None), ("fixedGridRhoFastjetAll", _F, ("exp", 5, 15.0), 10),
    ("fixedGridRhoFastjetCentral", _F, ("exp", 5, 14.0), 10),
    ("fixedGridRhoFastjetCentralCalo", _F, ("exp", 3, 9.0), 10),
    ("fixedGridRhoFastjetCentralChargedPileUp", _F, ("exp", 1, 8.0), 10),
    ("fixedGridRhoFastjetCentralNeutral", _F, ("exp", 1, 3.0), 10)]
_OTHER_BITS = [
    ("HLT_IsoMu27", 0.25), ("HLT_Mu50", 0.05), ("HLT_Mu17", 0.1), ("HLT_Mu8", 0.2),
    ("HLT_Mu17_TrkIsoVVL", 0.2), ("HLT_Mu37_TkMu27", 0.02), ("HLT_TripleMu_12_10_5", 0.01),
    ("HLT_Ele32_WPTight_Gsf", 0.05), ("HLT_Ele35_WPTight_Gsf", 0.04), ("HLT_Ele115_CaloIdVT_GsfTrkIdT", 0.01),
    ("HLT_Ele23_Ele12_CaloIdL_TrackIdL_IsoVL", 0.02), ("HLT_DoubleEle25_CaloIdL_MW", 0.01),
    ("HLT_Mu23_TrkIsoVVL_Ele12_CaloIdL_TrackIdL_IsoVL_DZ", 0.01), ("HLT_Photon200", 0.005),
    ("HLT_PFJet450", 0.01), ("HLT_PFJet500", 0.01), ("HLT_PFHT1050", 0.01), ("HLT_PFHT890", 0.01),
    ("HLT_PFMET120_PFMHT120_IDTight", 0.01), ("HLT_PFMETNoMu120_PFMHTNoMu120_IDTight", 0.01),
    ("HLT_DoubleMu4_3_Jpsi", 0.01), ("HLT_Dimuon25_Jpsi", 0.01), ("Flag_goodVertices", 0.999),
    ("Flag_globalSuperTightHalo2016Filter", 0.999), ("Flag_HBHENoiseFilter", 0.999),
    ("Flag_HBHENoiseIsoFilter", 0.999), ("Flag_EcalDeadCellTriggerPrimitiveFilter", 0.999),
    ("Flag_BadPFMuonFilter", 0.999), ("Flag_eeBadScFilter", 0.999), ("Flag_METFilters", 0.995)]


def _reduce_precision(x: np.ndarray, bits: int | None) -> np.ndarray:
    """Round float32 mantissas to ``bits`` bits, as NanoAOD's ``precision=`` does."""
    if bits is None or bits >= 23:
        return x
    shift = 23 - bits
    u = x.view(np.uint32)
    u += np.uint32(1 << (shift - 1))
    u &= np.uint32((0xFFFFFFFF << shift) & 0xFFFFFFFF)
    return x


def _draw(rng: np.random.Generator, n: int, recipe: tuple, dtype: str) -> np.ndarray:
    """``n`` values from one recipe (see the table above), as ``dtype``."""
    kind = recipe[0]
    if kind == "uni":
        out = np.float32(recipe[1]) + np.float32(recipe[2] - recipe[1]) * rng.random(n, np.float32)
    elif kind == "exp":
        out = np.float32(recipe[1]) + np.float32(recipe[2]) * rng.standard_exponential(n, np.float32)
    elif kind == "tri":
        out = rng.random(n, np.float32) - rng.random(n, np.float32)
        out = np.float32(recipe[1]) + np.float32(recipe[2]) * out
    elif kind == "pow":
        out = np.float32(recipe[2]) * rng.random(n, np.float32) ** recipe[1]
    elif kind == "int":
        return rng.integers(recipe[1], recipe[2], n, dtype=np.int32).astype(dtype, copy=False)
    elif kind == "bool":
        return rng.random(n, np.float32) < recipe[1]
    elif kind == "choice":
        cumulative = np.cumsum(recipe[2], dtype=np.float32)
        index = np.searchsorted(cumulative / cumulative[-1], rng.random(n, np.float32), side="right")
        return np.asarray(recipe[1], dtype=dtype)[np.minimum(index, len(recipe[1]) - 1)]
    elif kind == "const":
        return np.full(n, recipe[1], dtype=dtype)
    else:
        raise ValueError(f"unknown recipe {recipe!r}")
    return out.astype(dtype, copy=False)


def _fields(rng: np.random.Generator, n: int, spec: Sequence[tuple]) -> dict[str, np.ndarray]:
    out = {}
    for name, dtype, recipe, bits in spec:
        values = _draw(rng, n, recipe, dtype)
        out[name] = _reduce_precision(values, bits) if dtype == _F else values
    return out


def _jagged(counts: np.ndarray, fields: dict[str, np.ndarray]) -> ak.Array:
    """One jagged record array (a NanoAOD collection) from counts and flat fields."""
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    contents = [ak.contents.NumpyArray(v) for v in fields.values()]
    record = ak.contents.RecordArray(contents, list(fields), length=int(offsets[-1]))
    return ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(offsets), record))


def _pairs(rng: np.random.Generator, mass: np.ndarray) -> tuple[np.ndarray, ...]:
    """Decay dimuon systems of the given masses: (pt, eta, phi) of both muons."""
    n = len(mass)
    qt = 8.0 * rng.standard_exponential(n)                   # pair transverse momentum
    y = 1.4 * rng.standard_normal(n)                         # pair rapidity
    phi = rng.uniform(-np.pi, np.pi, n)
    mt = np.sqrt(mass**2 + qt**2)
    energy, pz = mt * np.cosh(y), mt * np.sinh(y)
    beta = np.stack([qt * np.cos(phi), qt * np.sin(phi), pz]) / energy
    gamma = energy / mass
    cos_t, phi_star = rng.uniform(-1, 1, n), rng.uniform(-np.pi, np.pi, n)
    sin_t = np.sqrt(1 - cos_t**2)
    pstar = np.sqrt(np.maximum(mass**2 / 4 - MUON_MASS**2, 0))
    p_rest = pstar * np.stack([sin_t * np.cos(phi_star), sin_t * np.sin(phi_star), cos_t])
    out = []
    for sign in (1.0, -1.0):
        bp = (beta * p_rest).sum(axis=0) * sign
        p = sign * p_rest + beta * (gamma**2 / (gamma + 1) * bp + gamma * mass / 2)
        pt = np.hypot(p[0], p[1]) * (1 + 0.015 * rng.standard_normal(n))
        out += [pt, np.arcsinh(p[2] / np.hypot(p[0], p[1])), np.arctan2(p[1], p[0])]
    return tuple(out)


def _muons(rng: np.random.Generator, n: int) -> tuple[ak.Array, np.ndarray, np.ndarray]:
    """The Muon collection (Z peak, continuum, extras), the leading and second muon pt."""
    u = rng.random(n)
    is_z, is_dy = u < 0.4, (u >= 0.4) & (u < 0.6)
    lo, hi = (np.arctan((x - Z_MASS) / (Z_WIDTH / 2)) for x in (60.0, 120.0))
    z_mass = Z_MASS + Z_WIDTH / 2 * np.tan(rng.uniform(lo, hi, int(is_z.sum())))
    dy_mass = 12.0 + 30.0 * rng.standard_exponential(int(is_dy.sum()))
    with_pair = np.flatnonzero(is_z | is_dy)
    mass = np.empty(len(with_pair))
    mass[is_z[with_pair]], mass[~is_z[with_pair]] = z_mass, dy_mass
    pt1, eta1, phi1, pt2, eta2, phi2 = _pairs(rng, mass)
    q1 = rng.integers(0, 2, len(with_pair), dtype=np.int32) * 2 - 1
    n_extra = rng.poisson(np.where(is_z | is_dy, 0.25, 0.9))
    n_x = int(n_extra.sum())
    event = np.concatenate([with_pair, with_pair, np.repeat(np.arange(n), n_extra)])
    pt = np.concatenate([pt1, pt2, 3.0 + 6.0 * rng.standard_exponential(n_x)]).astype(np.float32)
    eta = np.concatenate([eta1, eta2, rng.uniform(-2.4, 2.4, n_x)]).astype(np.float32)
    phi = np.concatenate([phi1, phi2, rng.uniform(-np.pi, np.pi, n_x)]).astype(np.float32)
    charge = np.concatenate([q1, -q1, rng.integers(0, 2, n_x, dtype=np.int32) * 2 - 1])
    keep = (np.abs(eta) < 2.4) & (pt > 3.0)
    order = np.lexsort((-pt[keep], event[keep]))             # by event, then pt descending
    event, pt, eta, phi, charge = (a[keep][order] for a in (event, pt, eta, phi, charge))
    counts = np.bincount(event, minlength=n)
    m = len(pt)
    fields = {"pt": pt, "eta": _reduce_precision(eta, 12), "phi": _reduce_precision(phi, 12),
              "mass": _reduce_precision(np.full(m, MUON_MASS, np.float32), 10), "charge": charge,
              "pdgId": -13 * charge, "ptErr": _reduce_precision(pt * np.float32(0.012), 6)}
    fields.update(_fields(rng, m, _MUON))
    starts = np.cumsum(counts) - counts
    leading, second = np.zeros(n, np.float32), np.zeros(n, np.float32)
    leading[counts > 0] = pt[starts[counts > 0]]
    second[counts > 1] = pt[starts[counts > 1] + 1]
    return _jagged(counts, fields), leading, second


def _collection(rng: np.random.Generator, n: int, mean: float, pt_min: float, pt_slope: float,
                eta_max: float, mass: tuple | None, pdg: int | None, extra: Sequence[tuple]) -> ak.Array:
    """A NanoAOD-like collection with Poisson multiplicity, sorted by pt in each event."""
    counts = rng.poisson(mean, n).astype(np.int64)
    m = int(counts.sum())
    pt = pt_min + np.float32(pt_slope) * rng.standard_exponential(m, np.float32)
    # sort by pt within each event, as NanoAOD does: event index + a key in [0, 1)
    key = np.repeat(np.arange(n, dtype=np.float64), counts) + 1.0 / (1.0 + pt)
    pt = pt[np.argsort(key, kind="stable")]
    fields = {"pt": _reduce_precision(pt, 10),
              "eta": _draw(rng, m, ("tri", 0, eta_max), _F),
              "phi": _draw(rng, m, ("uni", -np.pi, np.pi), _F)}
    if mass == ("jetmass",):
        fields["mass"] = pt * (np.float32(0.05) + np.float32(0.15) * rng.random(m, np.float32))
    elif mass is not None:
        fields["mass"] = _draw(rng, m, mass, _F)
    for name in ("eta", "phi", "mass"):
        if name in fields:
            _reduce_precision(fields[name], 10)
    if pdg is not None:
        fields["charge"] = rng.integers(0, 2, m, dtype=np.int32) * 2 - 1
        if pdg:
            fields["pdgId"] = np.int32(-pdg) * fields["charge"]
    fields.update(_fields(rng, m, extra))
    return _jagged(counts, fields)


def generate_events(n: int, rng: np.random.Generator, first_event: int = 1) -> dict[str, Any]:
    """One batch of ``n`` NanoAOD-like events, ready for ``uproot`` ``extend``.

    Flat branches are numpy arrays; collections are jagged awkward records, which
    uproot writes as ``nMuon``, ``Muon_pt``, ... (the counter is made ``uint32`` by
    :func:`make_data`, as in NanoAODv6).

    >>> import numpy as np
    >>> batch = generate_events(1000, np.random.default_rng(1))
    >>> sorted(batch["Muon"].fields)[:4], batch["event"][:3].tolist()
    (['charge', 'cleanmask', 'dxy', 'dxyErr'], [1, 2, 3])
    """
    event = np.arange(first_event, first_event + n, dtype=np.uint64)
    out: dict[str, Any] = {"run": np.ones(n, np.uint32),
                           "luminosityBlock": ((event - 1) // 1000 + 1).astype(np.uint32),
                           "event": event}
    out["Muon"], leading, second = _muons(rng, n)
    for name, *params in _COLLECTIONS:
        out[name] = _collection(rng, n, *params)
    out.update(_fields(rng, n, _FLAT))
    u = rng.random(n, np.float32)
    out["HLT_IsoMu24"] = (leading > 26) & (u < 0.92)
    out["HLT_Mu17_TrkIsoVVL_Mu8_TrkIsoVVL_DZ_Mass8"] = (leading > 17) & (second > 8) & (u < 0.9)
    out["HLT_Mu17_TrkIsoVVL_Mu8_TrkIsoVVL_DZ_Mass3p8"] = out["HLT_Mu17_TrkIsoVVL_Mu8_TrkIsoVVL_DZ_Mass8"]
    out.update({name: rng.random(n, np.float32) < p for name, p in _OTHER_BITS})
    return out


def _unsigned_counters(tree: Any, file: Any) -> None:
    """Make uproot's generated ``n<Name>`` counters ``uint32`` (as in NanoAODv6).

    uproot 5 always declares counters ``int32``; this rewrites the (still empty) tree's
    metadata with unsigned counters. If uproot's internals change, the counters stay
    ``int32`` (as in NanoAOD v12+) and a warning says so.
    """
    try:
        cascading = tree._cascading
        for datum in cascading._branch_data:
            if datum.get("kind") == "counter" and datum["dtype"] == np.dtype(">i4"):
                datum["dtype"] = np.dtype(">u4")
                datum["fTitle"] = datum["fTitle"][:-1] + "i"
        cascading.write_anew(file._file.sink)
    except (AttributeError, KeyError, TypeError) as exc:  # pragma: no cover - uproot changed
        warnings.warn(f"could not make counters uint32 ({exc}); they stay int32", stacklevel=2)


def _file_params(index: int, events: int, compression: str, seed: int, basket_events: int) -> dict:
    return {"generator": "bench.datagen", "format": FORMAT_VERSION, "file_index": index,
            "events": events, "compression": compression, "seed": seed,
            "basket_events": basket_events}


def _is_current(path: Path, params: dict) -> bool:
    """Whether ``path`` exists and was written with exactly ``params``."""
    try:
        meta = json.loads(path.with_name(path.name + ".json").read_text())
        return meta.get("params") == params and path.stat().st_size == meta.get("bytes")
    except (OSError, ValueError):
        return False


def _write_file(path: str, params: dict, progress: Any = None) -> str:
    """Write one file (into a temporary name, renamed when complete) and its sidecar."""
    target = Path(path)
    part = target.with_name(f".{target.name}.part")
    events, batch = params["events"], params["basket_events"]
    first = params["file_index"] * events + 1
    with uproot.recreate(part, compression=parse_compression(params["compression"])) as file:
        tree = None
        for b, start in enumerate(range(0, events, batch)):
            ss = np.random.SeedSequence(params["seed"], spawn_key=(params["file_index"], b))
            n = min(batch, events - start)
            data = generate_events(n, np.random.default_rng(ss), first + start)
            if tree is None:
                types = {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in data.items()}
                tree = file.mktree("Events", types, title="Events")
                _unsigned_counters(tree, file)
            tree.extend(data)
            if progress is not None:
                progress(n)
    os.replace(part, target)
    meta = {"params": params, "bytes": target.stat().st_size}
    target.with_name(target.name + ".json").write_text(json.dumps(meta, indent=1))
    return str(target)


def _write_file_queued(path: str, params: dict, queue: Any) -> str:
    return _write_file(path, params, queue.put)


def make_data(outdir: str | os.PathLike[str], *, files: int = 8, events: int = 1_000_000,
              compression: str = "LZ4", seed: int = 0, basket_events: int | None = None,
              progress: bool = True, workers: int | None = None) -> list[str]:
    """Write ``files`` NanoAOD-schema files of ``events`` events each into ``outdir``.

    Args:
        outdir: directory to write into (created if needed).
        files: number of files, ``nano_gen_000.root`` ... .
        events: events per file.
        compression: ``"LZMA"`` (NanoAOD's default), ``"ZLIB"``, ``"LZ4"`` or ``"ZSTD"``,
            case-insensitive, optionally ``"NAME:LEVEL"``.
        seed: random seed; the same seed and parameters give the same events.
        basket_events: events per ``extend`` call, i.e. per TBasket (default
            ``min(events, 100_000)``); bounds the memory used.
        progress: show a tqdm progress bar.
        workers: processes writing files in parallel (default: one per CPU, at most
            one per file).

    Returns:
        The paths of the files, in order. Files already written with the same
        parameters (recorded in a ``.json`` sidecar) are reused, not rewritten.

    Raises:
        ValueError: for an unknown compression or non-positive counts.

    >>> paths = make_data("/tmp/nano_small", files=1, events=5_000, compression="zstd", progress=False)
    >>> import uproot; uproot.open(paths[0])["Events"].num_entries
    5000
    """
    if files < 1 or events < 1:
        raise ValueError(f"files and events must be positive, got files={files}, events={events}")
    codec = parse_compression(compression)
    batch = int(basket_events or min(events, 100_000))
    if batch < 1:
        raise ValueError(f"basket_events must be positive, got {basket_events}")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"nano_gen_{i:03d}.root" for i in range(files)]
    params = [_file_params(i, events, repr(codec).replace("(", ":").rstrip(")"), seed, batch)
              for i in range(files)]
    todo = [i for i in range(files) if not _is_current(paths[i], params[i])]
    if not todo:
        return [str(p) for p in paths]
    nproc = max(1, min(len(todo), workers or os.cpu_count() or 1))
    from tqdm.auto import tqdm

    with tqdm(total=len(todo) * events, unit="ev", unit_scale=True, disable=not progress,
              desc=f"writing {len(todo)} file(s) {codec!r}") as bar:
        if nproc == 1:
            for i in todo:
                _write_file(str(paths[i]), params[i], bar.update)
        else:
            _run_parallel([(str(paths[i]), params[i]) for i in todo], nproc, bar.update)
    return [str(p) for p in paths]


def _run_parallel(jobs: list[tuple[str, dict]], nproc: int, update: Callable[[int], Any]) -> None:
    import multiprocessing
    import queue as queue_module

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(nproc, mp_context=context) as pool:
        q = manager.Queue()
        futures = [pool.submit(_write_file_queued, path, params, q) for path, params in jobs]
        while not all(f.done() for f in futures):
            try:
                update(q.get(timeout=0.2))
            except queue_module.Empty:
                pass
        while not q.empty():
            update(q.get())
        for f in futures:
            f.result()  # re-raise a worker's error here


def dimuon_fraction(path: str | os.PathLike[str], branches: Sequence[str] = DIMUON_BRANCHES) -> float:
    """Fraction of the ``Events`` tree's compressed bytes that ``branches`` hold.

    >>> dimuon_fraction("/work/shared/data/nanoaod/nano_dimuon.root") < 0.02
    True
    """
    with uproot.open(path) as f:
        tree = f["Events"]
        total = sum(b.compressed_bytes for b in tree.values())
        return sum(tree[b].compressed_bytes for b in branches) / total


@click.command("make-data")
@click.option("--out", "out", default="data/generated", show_default=True, type=click.Path(file_okay=False),
              help="Directory to write the files into.")
@click.option("--files", default=8, show_default=True, type=click.IntRange(min=1), help="Number of files.")
@click.option("--events", default=1_000_000, show_default=True, type=click.IntRange(min=1),
              help="Events per file.")
@click.option("--compression", default="LZ4", show_default=True,
              help="LZMA (NanoAOD's default), ZLIB, LZ4 or ZSTD; NAME:LEVEL sets the level.")
@click.option("--seed", default=0, show_default=True, type=int, help="Random seed.")
@click.option("--workers", default=None, type=click.IntRange(min=1), help="Parallel writers [one per CPU].")
def make_data_command(out: str, files: int, events: int, compression: str, seed: int,
                      workers: int | None) -> None:
    """Write NanoAOD-schema files with a Z peak for the benchmarks (reuses existing ones)."""
    start = time.perf_counter()
    try:
        paths = make_data(out, files=files, events=events, compression=compression, seed=seed,
                          workers=workers)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    seconds = time.perf_counter() - start
    total = 0
    for path in paths:
        size = os.path.getsize(path)
        total += size
        click.echo(f"{path}  {size / 1e6:9.1f} MB  {events:,} events")
    click.echo(f"{len(paths)} files, {total / 1e6:.1f} MB, {len(paths) * events:,} events, "
               f"{parse_compression(compression)!r}, {seconds:.1f} s "
               f"({len(paths) * events / max(seconds, 1e-9) / 1e6:.2f} M events/s)")
    click.echo(f"dimuon branches ({', '.join(DIMUON_BRANCHES)}) are "
               f"{dimuon_fraction(paths[0]):.1%} of the compressed bytes")
