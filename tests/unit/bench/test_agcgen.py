"""The AGC-shaped generator (bench.agcgen, `bench make-data --agc`) against the real 2015
CMS Open Data sample: branch names, types and counters; read fraction; regions that fill."""
from __future__ import annotations

import os

import pytest
import uproot
from click.testing import CliRunner

from tests.conftest import NANOAOD, needs_nanoaod

from rhtc.bench.agcgen import ANALYSIS_BRANCHES, SAMPLES, make_agc_data, read_fraction  # noqa: E402
from rhtc.bench.datagen import make_data_command  # noqa: E402

#: generates the AGC samples (seconds each): the full suite only
pytestmark = pytest.mark.heavy

REAL = NANOAOD / "nanoAOD_2015_CMS_Open_Data_ttbar.root"


@pytest.fixture(scope="module")
def full_file(tmp_path_factory):
    """One ttbar nominal file with every branch (the slow part: ~950 branches)."""
    out = tmp_path_factory.mktemp("agcfull")
    return make_agc_data(out, events=3_000, min_events=3_000, samples=[("ttbar", "nominal")],
                         progress=False, workers=1)[0]


@needs_nanoaod
@pytest.mark.timeout(900)
def test_every_branch_of_the_real_sample_with_its_type(full_file):
    real = uproot.open(REAL)["Events"]
    gen = uproot.open(full_file)["Events"]
    assert gen.num_entries == 3_000
    real_types = {b.name: b.typename for b in real.values()}
    gen_types = {b.name: b.typename for b in gen.values()}
    assert set(gen_types) == set(real_types), (set(real_types) ^ set(gen_types))
    wrong = {n: (real_types[n], gen_types[n]) for n in real_types if real_types[n] != gen_types[n]}
    assert not wrong, f"types differ from the real sample: {wrong}"
    for counter, collection in (("nJet", "Jet_pt"), ("nElectron", "Electron_pt"), ("nMuon", "Muon_pt")):
        assert gen_types[counter] == real_types[counter] == "uint32_t"
        assert str(gen[collection].count_branch.name) == counter
    assert uproot.open(full_file).file.compression.name == "ZLIB"


@pytest.mark.timeout(900)
def test_the_analysis_reads_about_four_percent_and_both_regions_fill(full_file):
    fraction = read_fraction(full_file)
    assert 0.02 < fraction < 0.07, f"the AGC analysis reads {fraction:.1%} of the bytes, not ~4 %"
    import awkward as ak
    a = uproot.open(full_file)["Events"].arrays(list(ANALYSIS_BRANCHES[:7]) + ["Muon_pt", "Electron_pt"])
    jets = ak.mean(a.nJet)
    assert 6 <= jets <= 8, f"{jets:.1f} jets per event, not ttbar-like"
    good = (a.Jet_pt > 30) & (abs(a.Jet_eta) < 2.4) & ((a.Jet_jetId & 4) != 0)
    n_b = ak.sum(good & (a.Jet_btagCSVV2 > 0.5), axis=1)
    four = ak.sum(good, axis=1) >= 4
    one_b, two_b = ak.mean(four & (n_b == 1)), ak.mean(four & (n_b >= 2))
    assert one_b > 0.1 and two_b > 0.1, f"4j1b {one_b:.0%}, 4j2b {two_b:.0%} of events"


def test_nine_samples_by_name_seeded_and_reused(tmp_path):
    paths = make_agc_data(tmp_path / "a", events=2_000, min_events=100, lean=True, progress=False, workers=1)
    names = [os.path.basename(p) for p in paths]
    assert names == [f"agc_{p}__{v}_000.root" for p, v in SAMPLES]
    again = make_agc_data(tmp_path / "b", events=2_000, min_events=100, lean=True, progress=False, workers=1)
    a, b = (uproot.open(p)["Events"].arrays(["Jet_pt", "Muon_pt"]) for p in (paths[0], again[0]))
    assert a.tolist() == b.tolist()                        # same seed, same events
    c = uproot.open(paths[1])["Events"].arrays(["Muon_pt"])
    assert c.Muon_pt[:50].tolist() != a.Muon_pt[:50].tolist()   # each sample draws its own events
    mtime = os.path.getmtime(paths[0])
    make_agc_data(tmp_path / "a", events=2_000, min_events=100, lean=True, progress=False, workers=1)
    assert os.path.getmtime(paths[0]) == mtime             # reused, not rewritten


def test_make_data_agc_command(tmp_path):
    result = CliRunner().invoke(make_data_command, ["--agc", "--lean", "--out", str(tmp_path), "--events", "900",
                                                    "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.count("written") == 9
    assert "the AGC analysis reads 22 branches" in result.output
