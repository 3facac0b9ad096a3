"""The NanoAOD-schema generator (client/synthetic/dimuon.py) and its command (bench.datagen),
writing one file at a time in this process.

The generated files are checked against a real CMS NanoAODv6 file
(/work/shared/data/nanoaod/nano_dimuon.root): same branch names, types and counters.
Everything else is computed from the files written here: compression codecs from the
raw basket headers, the Z peak from a dimuon mass calculation, byte fractions from
uproot's per-branch byte counts. Several files written by parallel processes, and the
compression benchmark: tests/scenarios/test_data_written_in_parallel.py.
"""
from __future__ import annotations

from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot
from click.testing import CliRunner

from rhtc.bench.datagen import make_data_command
from rhtc.client.synthetic.dimuon import COMPRESSIONS, DIMUON_BRANCHES, dimuon_fraction, make_data, parse_compression

#: writes NanoAOD-schema files with every compression (seconds each): the full suite only
pytestmark = pytest.mark.heavy

REAL = Path("/work/shared/data/nanoaod/nano_dimuon.root")
EVENTS = 20_000
# ROOT's compressed-block header starts with two bytes naming the algorithm
MAGIC = {"ZLIB": b"ZL", "LZMA": b"XZ", "LZ4": b"L4", "ZSTD": b"ZS"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One LZ4 file of EVENTS events, written in 4 baskets."""
    out = tmp_path_factory.mktemp("generated")
    return make_data(out, files=1, events=EVENTS, compression="LZ4", seed=1,
                     basket_events=EVENTS // 4, progress=False)[0]


@pytest.fixture(scope="module")
def real_tree():
    if not REAL.exists():
        pytest.skip(f"real NanoAOD sample {REAL} is not available")
    with uproot.open(REAL) as file:
        yield file["Events"]


def _leading_pair_masses(path: str) -> np.ndarray:
    """Invariant mass of the two leading muons, for events where they have opposite charge."""
    with uproot.open(path) as file:
        events = file["Events"].arrays(list(DIMUON_BRANCHES))
    events = events[events.nMuon >= 2]
    pt, eta, phi, mass, charge = ([ak.to_numpy(events[f"Muon_{x}"][:, i]) for i in (0, 1)]
                                  for x in ("pt", "eta", "phi", "mass", "charge"))
    opposite = charge[0] != charge[1]

    def four(i):
        px, py = pt[i] * np.cos(phi[i]), pt[i] * np.sin(phi[i])
        pz = pt[i] * np.sinh(eta[i])
        return np.sqrt(px**2 + py**2 + pz**2 + mass[i] ** 2), px, py, pz

    e1, x1, y1, z1 = four(0)
    e2, x2, y2, z2 = four(1)
    m2 = (e1 + e2) ** 2 - (x1 + x2) ** 2 - (y1 + y2) ** 2 - (z1 + z2) ** 2
    return np.sqrt(np.maximum(m2, 0))[opposite]


def test_branches_match_real_nanoaod(generated, real_tree):
    with uproot.open(generated) as file:
        tree = file["Events"]
        assert tree.num_entries == EVENTS
        names = tree.keys()
        for name in DIMUON_BRANCHES:
            assert name in names, f"generator did not write {name}"
        common = [name for name in names if name in real_tree]
        assert len(common) >= 0.9 * len(names), "most generated branches should be real NanoAOD ones"
        for name in common:
            ours, theirs = tree[name], real_tree[name]
            assert ours.typename == theirs.typename, name
            assert repr(ours.interpretation) == repr(theirs.interpretation), name
            ours_count, theirs_count = ours.count_branch, theirs.count_branch
            assert (ours_count is None) == (theirs_count is None), name
            if ours_count is not None:
                assert ours_count.name == theirs_count.name, name
        assert set(DIMUON_BRANCHES) <= set(common)


def test_counters_agree_with_collections(generated):
    with uproot.open(generated) as file:
        tree = file["Events"]
        assert tree["Muon_pt"].num_baskets == 4
        arrays = tree.arrays(["nMuon", "Muon_pt", "nJet", "Jet_pt"])
    assert ak.all(arrays.nMuon == ak.num(arrays.Muon_pt))
    assert ak.all(arrays.nJet == ak.num(arrays.Jet_pt))
    assert ak.sum(arrays.nMuon) > EVENTS  # about 1.6 muons per event
    # NanoAOD collections are sorted by pt
    assert ak.all(arrays.Muon_pt[:, :-1] >= arrays.Muon_pt[:, 1:])
    assert ak.all(arrays.Jet_pt[:, :-1] >= arrays.Jet_pt[:, 1:])


@pytest.mark.parametrize("name", [*COMPRESSIONS, "lzma", "Zstd", "zlib:6"])
def test_every_compression_is_applied(tmp_path, name):
    expected = parse_compression(name)
    path = make_data(tmp_path, files=1, events=2_000, compression=name, progress=False)[0]
    with uproot.open(path) as file:
        assert repr(file.file.compression) == repr(expected)
        branch = file["Events"]["run"]  # all ones: compresses with any codec
        basket = branch.basket(0)
        assert basket.compressed_bytes < basket.uncompressed_bytes
        start = int(branch.member("fBasketSeek")[0]) + basket.member("fKeylen")
    with open(path, "rb") as raw:
        raw.seek(start)
        assert raw.read(2) == MAGIC[name.split(":")[0].upper()]


def test_z_peak(generated):
    mass = _leading_pair_masses(generated)
    assert len(mass) > 0.2 * EVENTS
    in_peak = (mass > 80) & (mass < 100)
    sidebands = ((mass > 60) & (mass < 80)) | ((mass > 100) & (mass < 120))
    peak_density, side_density = in_peak.sum() / 20.0, sidebands.sum() / 40.0
    assert peak_density > 10 * side_density
    assert in_peak.sum() > 0.4 * len(mass)
    assert abs(np.median(mass[in_peak]) - 91.19) < 1.5
    counts, edges = np.histogram(mass, bins=np.arange(60.0, 121.0, 1.0))
    assert 88 <= edges[np.argmax(counts)] <= 93


def test_bad_compression_raises(tmp_path):
    for bad in ("gzip", "LZ5", "", "LZ4:abc", "ZLIB:99"):
        with pytest.raises(ValueError) as info:
            make_data(tmp_path / "bad", files=1, events=100, compression=bad, progress=False)
        if ":" not in bad:
            for allowed in COMPRESSIONS:
                assert allowed in str(info.value)
    assert not list((tmp_path / "bad").glob("*.root")) if (tmp_path / "bad").exists() else True


def test_dimuon_branches_are_a_small_fraction(generated):
    with uproot.open(generated) as file:
        tree = file["Events"]
        total = sum(branch.compressed_bytes for branch in tree.values())
        dimuon = sum(tree[name].compressed_bytes for name in DIMUON_BRANCHES)
    assert 0 < dimuon < 0.10 * total
    assert dimuon_fraction(generated) == pytest.approx(dimuon / total)


def test_make_data_command(tmp_path):
    runner = CliRunner()
    result = runner.invoke(make_data_command, ["--out", str(tmp_path), "--files", "1",
                                               "--events", "1000", "--compression", "zlib"])
    assert result.exit_code == 0, result.output
    assert "nano_gen_000.root" in result.output and "1,000 events" in result.output
    assert (tmp_path / "nano_gen_000.root").exists()
    bad = runner.invoke(make_data_command, ["--out", str(tmp_path), "--compression", "brotli"])
    assert bad.exit_code != 0 and "LZMA" in bad.output
