"""Generate NanoAOD-schema ROOT files with millions of events for the benchmarks.

The real NanoAOD samples in the repository hold a few dozen events; throughput and cache
benchmarks need millions. :func:`make_data` writes ``Events`` TTrees (not RNTuple) whose
branch names and types follow CMS NanoAODv6 (``nMuon`` uint32, ``Muon_pt`` float[],
``Muon_charge`` int32[], ``event`` uint64, ...) with the chosen ROOT compression, so that
an analysis written for real NanoAOD runs on them unchanged, and a dimuon analysis reads
only a few percent of each file's bytes, as on real NanoAOD.

Physics (vectorised numpy, deterministic given the seed): 40% of events hold a Z -> mu mu
pair (Breit-Wigner, 91.19 GeV, width 2.5 GeV, 60-120 GeV), 20% a Drell-Yan continuum pair
(12 GeV + exponential with a 30 GeV slope), always of opposite charge, with a 1.5% pt
resolution; every event gets Poisson soft extra muons of random charge; muons outside
``|eta| < 2.4`` or below 3 GeV are dropped and the rest sorted by pt. Jets, electrons,
photons, taus, trigger objects, secondary vertices and event-level branches (MET, PV, rho,
HLT and Flag bits) get NanoAOD-like distributions and NanoAOD's reduced float precision,
so that compression ratios look like NanoAOD's.

Files are ``nano_gen_000.root``, ``nano_gen_001.root``, ...; a sidecar ``.json`` records
the parameters, and a later call with the same parameters reuses the file.

Example::

    >>> from rhtc.client.synthetic import make_data, dimuon_fraction
    >>> paths = make_data("nano", files=2, events=5_000, progress=False)
    >>> [p.rsplit("/", 1)[1] for p in paths]
    ['nano_gen_000.root', 'nano_gen_001.root']
    >>> dimuon_fraction(paths[0]) < 0.1
    True
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import awkward as ak
import numpy as np
import uproot

from .schema import COLLECTIONS as _COLLECTIONS
from .schema import DTYPES as _DTYPES
from .schema import FLAT as _FLAT
from .schema import MUON as _MUON
from .writer import COMPRESSIONS, parse_compression, write_files  # noqa: F401 (re-exported)

#: Bump when the generated content changes, so files from an older generator are rewritten.
FORMAT_VERSION = 1

#: The branches a dimuon-mass analysis reads.
DIMUON_BRANCHES: tuple[str, ...] = ("nMuon", "Muon_pt", "Muon_eta", "Muon_phi", "Muon_mass", "Muon_charge")

Z_MASS, Z_WIDTH, MUON_MASS = 91.1876, 2.4952, 0.1056583745


def _parse_fields(text: str) -> list[tuple[str, str, tuple, int | None]]:
    """``"name dtype recipe args.. [bits] | ..."`` -> ``[(name, dtype, recipe, bits), ..]``."""
    out = []
    for item in text.replace("\n", "|").split("|"):
        name, dtype, kind, *args = item.split()
        nargs = 1 if kind in ("bool", "const") else 2
        values = [tuple(float(x) for x in a.split("/")) if kind == "choice" else float(a)
                  for a in args[:nargs]]
        bits = int(args[nargs]) if len(args) > nargs else None
        out.append((name, _DTYPES[dtype], (kind, *values), bits))
    return out


_SPECS = {name: _parse_fields(text) for name, *_, text in _COLLECTIONS}
_SPECS.update(Muon=_parse_fields(_MUON), flat=_parse_fields(_FLAT))


def _reduce_precision(x: np.ndarray, bits: int | None) -> np.ndarray:
    """Round float32 mantissas to ``bits`` bits in place, as NanoAOD's ``precision=`` does."""
    if bits is None or bits >= 23:
        return x
    shift = 23 - bits
    u = x.view(np.uint32)
    u += np.uint32(1 << (shift - 1))
    u &= np.uint32((0xFFFFFFFF << shift) & 0xFFFFFFFF)
    return x


def _draw(rng: np.random.Generator, n: int, recipe: tuple, dtype: str = "f4") -> np.ndarray:
    """``n`` values of ``dtype`` from one recipe (see the tables above)."""
    kind, *a = recipe
    if kind == "int":
        return rng.integers(int(a[0]), int(a[1]), n, dtype=np.int32).astype(dtype, copy=False)
    if kind == "bool":
        return rng.random(n, np.float32) < a[0]
    if kind == "const":
        return np.full(n, a[0], dtype=dtype)
    if kind == "choice":
        cumulative = np.cumsum(a[1]) / np.sum(a[1])
        index = np.searchsorted(cumulative, rng.random(n), side="right")
        return np.asarray(a[0], dtype=dtype)[np.minimum(index, len(a[0]) - 1)]
    lo, scale = np.float32(a[0]), np.float32(a[1])
    if kind == "uni":
        out = lo + (np.float32(a[1] - a[0])) * rng.random(n, np.float32)
    elif kind == "exp":
        out = lo + scale * rng.standard_exponential(n, np.float32)
    elif kind == "tri":
        out = lo + scale * (rng.random(n, np.float32) - rng.random(n, np.float32))
    elif kind == "pow":
        out = scale * rng.random(n, np.float32) ** lo
    else:
        raise ValueError(f"unknown recipe {recipe!r}")
    return out.astype(dtype, copy=False)


def _fields(rng: np.random.Generator, n: int, spec: Sequence[tuple]) -> dict[str, np.ndarray]:
    """Draw every field of a parsed table."""
    out = {}
    for name, dtype, recipe, bits in spec:
        values = _draw(rng, n, recipe, dtype)
        out[name] = _reduce_precision(values, bits) if dtype == "f4" else values
    return out


def _jagged(counts: np.ndarray, fields: dict[str, np.ndarray]) -> ak.Array:
    """One jagged record array (a NanoAOD collection) from counts and flat fields."""
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    contents = [ak.contents.NumpyArray(v) for v in fields.values()]
    record = ak.contents.RecordArray(contents, list(fields), length=int(offsets[-1]))
    return ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(offsets), record))


def _pairs(rng: np.random.Generator, mass: np.ndarray) -> list[np.ndarray]:
    """Decay dimuon systems of the given masses: pt, eta, phi of both muons."""
    n = len(mass)
    qt = 8.0 * rng.standard_exponential(n)                   # pair transverse momentum
    y = 1.4 * rng.standard_normal(n)                         # pair rapidity
    phi = rng.uniform(-np.pi, np.pi, n)
    mt = np.sqrt(mass**2 + qt**2)
    energy = mt * np.cosh(y)
    beta = np.stack([qt * np.cos(phi), qt * np.sin(phi), mt * np.sinh(y)]) / energy
    gamma = energy / mass
    cos_t, phi_star = rng.uniform(-1, 1, n), rng.uniform(-np.pi, np.pi, n)
    sin_t = np.sqrt(1 - cos_t**2)
    pstar = np.sqrt(np.maximum(mass**2 / 4 - MUON_MASS**2, 0))
    p_rest = pstar * np.stack([sin_t * np.cos(phi_star), sin_t * np.sin(phi_star), cos_t])
    out = []
    for sign in (1.0, -1.0):                                 # back to back in the rest frame
        bp = sign * (beta * p_rest).sum(axis=0)
        p = sign * p_rest + beta * (gamma**2 / (gamma + 1) * bp + gamma * mass / 2)
        pt = np.hypot(p[0], p[1])
        smeared = pt * (1 + 0.015 * rng.standard_normal(n))  # 1.5% pt resolution
        out += [smeared, np.arcsinh(p[2] / pt), np.arctan2(p[1], p[0])]
    return out


def _muons(rng: np.random.Generator, n: int) -> tuple[ak.Array, np.ndarray, np.ndarray]:
    """The Muon collection (Z peak, continuum, extras), the leading and second muon pt."""
    u = rng.random(n)
    is_z, has_pair = u < 0.4, u < 0.6
    lo, hi = (np.arctan((x - Z_MASS) / (Z_WIDTH / 2)) for x in (60.0, 120.0))
    with_pair = np.flatnonzero(has_pair)
    z = is_z[with_pair]
    mass = 12.0 + 30.0 * rng.standard_exponential(len(with_pair))      # continuum
    mass[z] = Z_MASS + Z_WIDTH / 2 * np.tan(rng.uniform(lo, hi, int(z.sum())))  # Breit-Wigner
    pt1, eta1, phi1, pt2, eta2, phi2 = _pairs(rng, mass)
    q1 = rng.integers(0, 2, len(with_pair), dtype=np.int32) * 2 - 1
    n_extra = rng.poisson(np.where(has_pair, 0.3, 1.0))
    n_x = int(n_extra.sum())
    event = np.concatenate([with_pair, with_pair, np.repeat(np.arange(n), n_extra)])
    pt = np.concatenate([pt1, pt2, 3.0 + 6.0 * rng.standard_exponential(n_x)]).astype(np.float32)
    eta = np.concatenate([eta1, eta2, rng.uniform(-2.4, 2.4, n_x)]).astype(np.float32)
    phi = np.concatenate([phi1, phi2, rng.uniform(-np.pi, np.pi, n_x)]).astype(np.float32)
    charge = np.concatenate([q1, -q1, rng.integers(0, 2, n_x, dtype=np.int32) * 2 - 1])
    keep = (np.abs(eta) < 2.4) & (pt > 3.0)                   # NanoAOD's muon acceptance
    order = np.lexsort((-pt[keep], event[keep]))             # by event, then pt descending
    event, pt, eta, phi, charge = (a[keep][order] for a in (event, pt, eta, phi, charge))
    counts = np.bincount(event, minlength=n)
    fields = {"pt": pt, "eta": _reduce_precision(eta, 12), "phi": _reduce_precision(phi, 12),
              "mass": _reduce_precision(np.full(len(pt), MUON_MASS, np.float32), 10),
              "charge": charge, "pdgId": np.int32(-13) * charge,
              "ptErr": _reduce_precision(pt * np.float32(0.012), 6)}
    fields.update(_fields(rng, len(pt), _SPECS["Muon"]))
    starts = np.cumsum(counts) - counts
    leading, second = np.zeros(n, np.float32), np.zeros(n, np.float32)
    leading[counts > 0] = pt[starts[counts > 0]]
    second[counts > 1] = pt[starts[counts > 1] + 1]
    return _jagged(counts, fields), leading, second


def _collection(rng: np.random.Generator, n: int, name: str, mean: float, pt_min: float,
                pt_slope: float, eta_max: float, mass: str | None, pdg: int | None) -> ak.Array:
    """A NanoAOD-like collection with Poisson multiplicity, sorted by pt in each event."""
    counts = rng.poisson(mean, n)
    m = int(counts.sum())
    pt = pt_min + np.float32(pt_slope) * rng.standard_exponential(m, np.float32)
    key = np.repeat(np.arange(n, dtype=np.float64), counts) + 1.0 / (1.0 + pt)
    pt = _reduce_precision(pt[np.argsort(key)], 10)         # by event, then pt descending
    fields = {"pt": pt, "eta": _reduce_precision(_draw(rng, m, ("tri", 0, eta_max)), 10),
              "phi": _reduce_precision(_draw(rng, m, ("uni", -np.pi, np.pi)), 10)}
    if mass == "jet":
        fields["mass"] = pt * (np.float32(0.05) + np.float32(0.15) * rng.random(m, np.float32))
    elif mass is not None:
        kind, *args = mass.split()
        fields["mass"] = _draw(rng, m, (kind, *map(float, args)))
    if "mass" in fields:
        _reduce_precision(fields["mass"], 10)
    if pdg is not None:
        fields["charge"] = rng.integers(0, 2, m, dtype=np.int32) * 2 - 1
        if pdg:
            fields["pdgId"] = np.int32(-pdg) * fields["charge"]
    fields.update(_fields(rng, m, _SPECS[name]))
    return _jagged(counts, fields)


def generate_events(n: int, rng: np.random.Generator, first_event: int = 1) -> dict[str, Any]:
    """One batch of ``n`` NanoAOD-like events, ready for ``uproot`` ``extend``.

    Flat branches are numpy arrays; collections are jagged awkward records, which
    uproot writes as ``nMuon``, ``Muon_pt``, ... (:func:`make_data` makes the counters
    ``uint32``, as in NanoAODv6).

    >>> import numpy as np
    >>> batch = generate_events(1000, np.random.default_rng(1))
    >>> batch["Muon"].fields[:5], batch["event"][:3].tolist()
    (['pt', 'eta', 'phi', 'mass', 'charge'], [1, 2, 3])
    """
    event = np.arange(first_event, first_event + n, dtype=np.uint64)
    out: dict[str, Any] = {"run": np.ones(n, np.uint32), "event": event,
                           "luminosityBlock": ((event - 1) // 1000 + 1).astype(np.uint32)}
    out["Muon"], leading, second = _muons(rng, n)
    for name, mean, pt_min, pt_slope, eta_max, mass, pdg, _ in _COLLECTIONS:
        out[name] = _collection(rng, n, name, mean, pt_min, pt_slope, eta_max, mass, pdg)
    out.update(_fields(rng, n, _SPECS["flat"]))
    u = rng.random(n, np.float32)                            # muon triggers follow the muons
    out["HLT_IsoMu24"] = (leading > 26) & (u < 0.92)
    dimuon = (leading > 17) & (second > 8) & (u < 0.9)
    out["HLT_Mu17_TrkIsoVVL_Mu8_TrkIsoVVL_DZ_Mass8"] = dimuon
    out["HLT_Mu17_TrkIsoVVL_Mu8_TrkIsoVVL_DZ_Mass3p8"] = dimuon.copy()
    return out


def make_data(outdir: str | os.PathLike[str], *, files: int = 8, events: int = 1_000_000,
              compression: str = "LZ4", seed: int = 0, basket_events: int | None = None,
              progress: bool = True, workers: int | None = None) -> list[str]:
    """Write ``files`` NanoAOD-schema files of ``events`` events each into ``outdir``.

    ``compression`` is ``"LZMA"`` (NanoAOD's default), ``"ZLIB"``, ``"LZ4"`` or ``"ZSTD"``
    (case-insensitive, optionally ``"NAME:LEVEL"``; anything else raises ValueError). The
    same ``seed`` and parameters give the same events. ``basket_events`` is the number of
    events per ``extend`` call, i.e. per TBasket (default ``min(events, 100_000)``), which
    bounds the memory used. ``workers`` processes write files in parallel (default one
    per CPU). Returns the paths in order; files already written with the same parameters
    (recorded in a ``.json`` sidecar) are reused, not rewritten.

    >>> paths = make_data("nano_small", files=1, events=5_000, compression="zstd", progress=False)
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
    params = [{"generator": "bench.datagen", "format": FORMAT_VERSION, "file_index": i,
               "events": events, "compression": f"{type(codec).__name__}:{codec.level}",
               "seed": seed, "basket_events": batch} for i in range(files)]
    return write_files(paths, params, _generate, progress=progress, workers=workers,
                       desc=f"writing {codec!r}")


def _generate(n: int, rng: np.random.Generator, first_event: int, params: dict) -> dict[str, Any]:
    return generate_events(n, rng, first_event)


def dimuon_fraction(path: str | os.PathLike[str], branches: Sequence[str] = DIMUON_BRANCHES) -> float:
    """Fraction of the ``Events`` tree's compressed bytes that ``branches`` hold.

    >>> dimuon_fraction("/work/shared/data/nanoaod/nano_dimuon.root") < 0.02
    True
    """
    return compressed_bytes(path, branches) / compressed_bytes(path)


def compressed_bytes(path: str | os.PathLike[str], branches: Sequence[str] | None = None) -> int:
    """The compressed bytes, in the file, of ``branches`` of its ``Events`` tree (of every
    branch when None): what reading them whole costs in input.

    >>> compressed_bytes("/work/shared/data/nanoaod/nano_dimuon.root", ["Muon_pt"]) > 0
    True
    """
    with uproot.open(path) as f:
        tree = f["Events"]
        chosen = tree.values() if branches is None else [tree[b] for b in branches]
        return sum(b.compressed_bytes for b in chosen)
