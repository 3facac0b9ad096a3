"""The AGC ttbar processor (examples/agc_ttbar.py) against its jagged-awkward original.

The example computes the selection and the trijet mass on flat numpy arrays (awkward's
per-call cost made the jagged version ~0.11 s per chunk whatever its size). Its physics
must not move: on the real 2015 sample and on generated AGC files, every fill (its
observable values and weights, bit for bit and with their dtypes, in the same order), every
histogram slice (sums of weights and variances, bitwise), and the ``entries``, ``cutflow``
and ``nevents`` outputs equal those of the jagged version, kept here as the reference.
"""
from __future__ import annotations

import warnings

import awkward as ak
import hist
import numpy as np
import pytest
from coffea import processor
from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

from rhtc.examples import agc_ttbar
from rhtc.examples.agc_ttbar import (B_TAG, LUMI, REAL_SAMPLE, REGIONS, XSEC, TtbarAnalysis, _count, _histogram,
                                     _sum, _trijet_mass, chunk_seed)

pytestmark = pytest.mark.heavy     # generates AGC files and runs the analysis a few dozen times


def _reference_trijet_mass(jets: ak.Array) -> ak.Array:
    """The original (jagged) trijet mass."""
    px, py = jets.pt * np.cos(jets.phi), jets.pt * np.sin(jets.phi)
    pz = jets.pt * np.sinh(jets.eta)
    e = np.sqrt(px**2 + py**2 + pz**2 + jets.mass**2)
    four = ak.zip({"px": px, "py": py, "pz": pz, "e": e, "b": jets.btagCSVV2 > B_TAG})
    j1, j2, j3 = ak.unzip(ak.combinations(four, 3))
    sx, sy, sz, se = (j1[f] + j2[f] + j3[f] for f in ("px", "py", "pz", "e"))
    tagged = j1.b | j2.b | j3.b
    pt = np.where(tagged, np.hypot(sx, sy), -1.0)
    best = ak.argmax(pt, axis=1, keepdims=True)
    mass2 = (se**2 - sx**2 - sy**2 - sz**2)[best]
    return ak.flatten(np.sqrt(np.maximum(mass2, 0.0)))


class ReferenceTtbarAnalysis(processor.ProcessorABC):
    """The original jagged-awkward processor of examples/agc_ttbar.py, verbatim."""

    def __init__(self, systematics: bool = True):
        self.systematics = systematics

    def process(self, events) -> dict:
        meta = events.metadata
        process, variation = meta["process"], meta["variation"]
        weight = XSEC[process] * LUMI / meta["nevts"]
        out = {region: _histogram() for region in REGIONS}
        entries: dict[str, int] = {}

        def fill(region: str, observable: np.ndarray, name: str, w) -> None:
            out[region].fill(observable=observable, process=process, variation=name, weight=w)
            key = f"{region}/{process}/{name}"
            entries[key] = entries.get(key, 0) + len(observable)

        elec, muon, jets = events.Electron, events.Muon, events.Jet
        n_lep = (ak.sum((elec.pt > 30) & (abs(elec.eta) < 2.1) & (elec.cutBased == 4) & (elec.sip3d < 4),
                        axis=1)
                 + ak.sum((muon.pt > 30) & (abs(muon.eta) < 2.1) & muon.tightId & (muon.sip3d < 4)
                          & (muon.pfRelIso04_all < 0.15), axis=1))
        jets = ak.zip({f: jets[f] for f in ("pt", "eta", "phi", "mass", "btagCSVV2", "jetId")})
        factors = {"nominal": None}
        if self.systematics and variation == "nominal":
            counts = ak.num(jets)
            rng = np.random.default_rng(chunk_seed(meta))
            factors["pt_scale_up"] = 1.03
            factors["pt_res_up"] = ak.unflatten(rng.normal(1.0, 0.05, int(ak.sum(counts))), counts)
        for pt_var, factor in factors.items():
            varied = jets if factor is None else ak.with_field(jets, jets.pt * factor, "pt")
            good = varied[(varied.pt > 30) & (abs(varied.eta) < 2.4) & ((varied.jetId & 4) != 0)]
            n_b = ak.sum(good.btagCSVV2 > B_TAG, axis=1)
            base = (n_lep == 1) & (ak.num(good) >= 4)
            for region, cut in (("4j1b", n_b == 1), ("4j2b", n_b >= 2)):
                sel = good[base & cut]
                observable = ak.sum(sel.pt, axis=1) if region == "4j1b" else _reference_trijet_mass(sel)
                observable = ak.to_numpy(observable)
                fill(region, observable, variation if pt_var == "nominal" else pt_var, weight)
                if pt_var != "nominal" or not self.systematics or variation != "nominal":
                    continue
                for i in range(4):
                    shift = 0.075 * ak.to_numpy(sel.pt[:, i]) / 50
                    for direction, sign in (("up", 1), ("down", -1)):
                        fill(region, observable, f"btag_var_{i}_{direction}", weight * (1 + sign * shift))
                if process == "wjets":
                    for direction, sign in (("up", 1), ("down", -1)):
                        fill(region, observable, f"scale_var_{direction}", weight * (1 + sign * 0.025))
            if pt_var == "nominal":
                cutflow = {"one lepton": int(ak.sum(n_lep == 1)), "four jets": int(ak.sum(ak.num(good) >= 4)),
                           "both": int(ak.sum(base))}
        return {"hist": out, "entries": entries, "nevents": {f"{process}__{variation}": len(events)},
                "cutflow": {f"{process}__{variation}": cutflow}}


def _events(path: str, start: int, stop: int, process: str, variation: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # NanoAODSchema's missing cross-references
        return NanoEventsFactory.from_root(
            {path: "Events"}, entry_start=start, entry_stop=stop, schemaclass=NanoAODSchema, mode="virtual",
            metadata={"process": process, "variation": variation, "nevts": 123_456, "fileuuid": f"{path}",
                      "entrystart": start, "entrystop": stop}).events()


def _run_recording(proc, events, monkeypatch) -> tuple[dict, list]:
    """The processor's output, and every fill it made: (variation, observable, weight)."""
    fills = []
    original = hist.Hist.fill

    def recording(self, *args, **kwargs):
        weight = kwargs.get("weight")
        fills.append((kwargs["process"], kwargs["variation"], np.asarray(kwargs["observable"]).copy(),
                      np.array(weight, copy=True)))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(hist.Hist, "fill", recording)
    try:
        return proc.process(events), fills
    finally:
        monkeypatch.setattr(hist.Hist, "fill", original)


def _assert_identical(got: tuple[dict, list], want: tuple[dict, list], what: str) -> None:
    (out, fills), (ref, ref_fills) = got, want
    assert len(fills) == len(ref_fills), f"{what}: {len(fills)} fills, the reference made {len(ref_fills)}"
    for k, ((p, v, obs, w), (rp, rv, robs, rw)) in enumerate(zip(fills, ref_fills)):
        assert (p, v) == (rp, rv), f"{what}: fill {k} is ({p}, {v}), the reference's ({rp}, {rv})"
        assert obs.dtype == robs.dtype and np.array_equal(obs, robs), f"{what}: fill {k} ({v}): observables differ"
        assert w.dtype == rw.dtype and np.array_equal(w, rw), f"{what}: fill {k} ({v}): weights differ"
    assert out["entries"] == ref["entries"], what
    assert out["cutflow"] == ref["cutflow"] and out["nevents"] == ref["nevents"], what
    for region in REGIONS:
        h, r = out["hist"][region], ref["hist"][region]
        assert list(h.axes["process"]) == list(r.axes["process"]), f"{what}: {region}"
        assert list(h.axes["variation"]) == list(r.axes["variation"]), f"{what}: {region}"
        view, ref_view = h.view(flow=True), r.view(flow=True)
        assert np.array_equal(view["value"], ref_view["value"]), f"{what}: {region} sums of weights differ"
        assert np.array_equal(view["variance"], ref_view["variance"]), f"{what}: {region} variances differ"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Four AGC samples (~45k events), the analysis' collections only."""
    from rhtc.bench.agcgen import make_agc_data
    return make_agc_data(tmp_path_factory.mktemp("agc"), events=40_000, min_events=3_000, lean=True,
                         progress=False, workers=1,
                         samples=[("ttbar", "nominal"), ("wjets", "nominal"), ("ttbar", "PS_var"),
                                  ("single_top_t_chan", "nominal")])


@pytest.mark.parametrize("systematics", [True, False])
@pytest.mark.timeout(600)
def test_generated_chunks_fill_what_the_jagged_version_fills(generated, systematics, monkeypatch):
    checked = 0
    for path in generated:
        process, variation = agc_ttbar.sample_of(path)
        for start, stop in ((0, 2_500), (2_500, 3_000), (1_234, 1_300)):
            events = _events(path, start, stop, process, variation)
            want = _run_recording(ReferenceTtbarAnalysis(systematics), events, monkeypatch)
            got = _run_recording(TtbarAnalysis(systematics), events, monkeypatch)
            _assert_identical(got, want, f"{process}__{variation} {start}-{stop}")
            checked += sum(len(obs) for _, _, obs, _ in got[1])
    assert checked > 1_000, "the chunks filled almost nothing: the comparison proves little"


@pytest.mark.timeout(600)
@pytest.mark.skipif(not __import__("os").path.exists(REAL_SAMPLE), reason=f"{REAL_SAMPLE} not found")
@pytest.mark.parametrize("process,variation", [("ttbar", "nominal"), ("wjets", "nominal"), ("ttbar", "PS_var")])
def test_the_real_sample_fills_what_the_jagged_version_fills(process, variation, monkeypatch):
    for systematics in (True, False):
        events = _events(REAL_SAMPLE, 0, 200, process, variation)
        want = _run_recording(ReferenceTtbarAnalysis(systematics), events, monkeypatch)
        got = _run_recording(TtbarAnalysis(systematics), events, monkeypatch)
        _assert_identical(got, want, f"real sample as {process}__{variation}")
        cutflow = got[0]["cutflow"][f"{process}__{variation}"]
        assert cutflow["one lepton"] > 0 and cutflow["four jets"] > 0, cutflow   # (no event passes both)


@pytest.mark.skipif(not __import__("os").path.exists(REAL_SAMPLE), reason=f"{REAL_SAMPLE} not found")
def test_the_trijet_mass_of_the_real_samples_jets():
    """The 200 real events fill no signal region, so the trijet mass is compared on all
    their jets (events with three or more), as the jagged version computes it."""
    jets = _events(REAL_SAMPLE, 0, 200, "ttbar", "nominal").Jet
    jets = jets[ak.num(jets) >= 3]
    n_jets = ak.to_numpy(ak.num(jets))
    assert len(n_jets) > 50
    flat = _trijet_mass(*(ak.to_numpy(ak.flatten(jets[f])) for f in ("pt", "eta", "phi", "mass", "btagCSVV2")),
                        n_jets)
    want = ak.to_numpy(_reference_trijet_mass(jets))
    assert flat.dtype == want.dtype and np.array_equal(flat, want)


def test_the_flat_helpers_are_awkwards_reductions_to_the_last_bit():
    """Many jets per event (up to 20: past numpy's 8-way unrolled sums) and float32 values
    whose sum depends on the order of the additions."""
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 21, 2_000)
    values = (rng.standard_exponential(int(counts.sum())) * 1e3).astype(np.float32)
    passed = rng.random(len(values)) < 0.4
    jagged = ak.unflatten(values, counts)
    assert np.array_equal(_sum(values, counts), ak.to_numpy(ak.sum(jagged, axis=1)))
    assert _sum(values, counts).dtype == np.float32
    assert np.array_equal(_count(passed, counts), ak.to_numpy(ak.sum(ak.unflatten(passed, counts), axis=1)))
    # the trijet mass of random jets, 3 to 12 per event, float32 and float64 pts
    n_jets = rng.integers(3, 13, 3_000)
    total = int(n_jets.sum())
    fields = {"pt": (rng.standard_exponential(total) * 50 + 20).astype(np.float32),
              "eta": rng.normal(0, 1.5, total).astype(np.float32),
              "phi": rng.uniform(-np.pi, np.pi, total).astype(np.float32),
              "mass": (rng.standard_exponential(total) * 8).astype(np.float32),
              "btagCSVV2": rng.random(total).astype(np.float32)}
    for pt in (fields["pt"], fields["pt"] * rng.normal(1.0, 0.05, total)):
        jets = ak.zip({k: ak.unflatten(pt if k == "pt" else v, n_jets) for k, v in fields.items()})
        flat = _trijet_mass(pt, fields["eta"], fields["phi"], fields["mass"], fields["btagCSVV2"], n_jets)
        want = ak.to_numpy(_reference_trijet_mass(jets))
        assert flat.dtype == want.dtype and np.array_equal(flat, want)
