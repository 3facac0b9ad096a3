"""A cold item's NanoEvents construction with the base form kept across files
(client/data/coffea_events.py, ``branch_signature`` and ``_from_root_kept_form``).

Working out a NanoAOD tree's base form (each branch's interpretation, type name and form)
is most of what a cold item spends building NanoEvents; files of one production have the
same branches, so a worker keeps the form (in its byte-capped cache, under the tree's branch
signature) and builds the next file's events from it. What it builds must be what coffea
builds: the same schema form, partition key and answers, on files written here and on every
real NanoAOD sample; a file whose branches differ in anything that makes the form (a type,
a title) gets its own. Real parts: coffea, uproot, files written here, the real samples.
"""
from __future__ import annotations

import uuid as uuidlib
import warnings

import awkward as ak
import numpy as np
import pytest
import uproot

pytest.importorskip("coffea")
from coffea.nanoevents import BaseSchema, NanoAODSchema, NanoEventsFactory  # noqa: E402
from coffea.nanoevents.mapping import UprootSourceMapping  # noqa: E402

from rhtc.client.data.coffea_events import _from_root_kept_form, branch_signature  # noqa: E402
from rhtc.worker.cache import BranchCache  # noqa: E402
from tests.conftest import NANOAOD, needs_nanoaod  # noqa: E402
from tests.test_coffea_events import AsOnAWorker, assert_same_sums, iterative, run, write_nano  # noqa: E402


def forms_kept(cache: BranchCache) -> dict:
    return {k: v for k, v in cache._data.items() if k.startswith("nanoevents-form|")}


@pytest.fixture
def base_forms(monkeypatch) -> list:
    """Every base form worked out from a tree (coffea's or ours)."""
    calls = []
    real = UprootSourceMapping._extract_base_form.__func__

    def counting(cls, tree, iteritems_options={}):
        calls.append(tree.file.file_path)
        return real(cls, tree, iteritems_options)

    monkeypatch.setattr(UprootSourceMapping, "_extract_base_form", classmethod(counting))
    return calls


def _assert_built_as_coffea_builds(path, schema, cache: BranchCache, what: str) -> None:
    """Our factory for the whole tree of ``path`` against coffea's: the same schema form,
    partition key, metadata, type and muon pts."""
    args = dict(treepath="Events", schemaclass=schema, metadata={"dataset": "d"}, mode="virtual", buffer_cache={})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with uproot.open(path) as f:
            ours = _from_root_kept_form(f, dict(args, metadata={"dataset": "d"}), cache)
            theirs = NanoEventsFactory.from_root(f, **args)
            assert ours._schema.form == theirs._schema.form, what
            assert ours._partition_key == theirs._partition_key, what
            mine, coffeas = ours.events(), theirs.events()
            assert mine.metadata == coffeas.metadata and len(mine) == len(coffeas), what
            assert str(ak.type(mine)) == str(ak.type(coffeas)), what
            column = ("Muon", "pt") if "Muon" in mine.fields else "event" if "event" in mine.fields else "Muon_pt"
            assert ak.array_equal(mine[column], coffeas[column]), what


def test_files_with_the_same_branches_share_one_form_and_answer_as_coffea(tmp_path, on_a_worker, base_forms):
    paths = [str(tmp_path / f"nano{k}.root") for k in range(3)]
    for k, path in enumerate(paths):
        write_nano(path, 1.0 + k, uuidlib.uuid4())
    assert len({branch_signature(uproot.open(p)["Events"]) for p in paths}) == 1
    fileset = {"nano": paths}
    want, want_300 = iterative(fileset), iterative(fileset, chunksize=300)
    base_forms.clear()
    cache = on_a_worker()
    cold = run(AsOnAWorker(), fileset)
    assert_same_sums(cold, want, "cold, one form for three files")
    assert base_forms == [paths[0]], "the form of the first file serves the other two"
    assert len(forms_kept(cache)) == 1
    (value, size, tag), = forms_kept(cache).values()
    assert tag is None and size >= len(value) > 1000, "a kept form counts its bytes against the cap"
    assert_same_sums(run(AsOnAWorker(), fileset), want, "warm")
    assert_same_sums(run(AsOnAWorker(), fileset, chunksize=300), want_300, "other chunks")
    assert base_forms == [paths[0]]


def _write(path: str, pt_dtype, title: str = "", max_muons: int = 3) -> None:
    """Muons (pt in ``pt_dtype``, eta, phi, mass, charge) and the event ids, tree title ``title``."""
    rng = np.random.default_rng(5)
    counts = rng.integers(0, max_muons + 1, 600)
    m = int(counts.sum())
    muon = ak.unflatten(ak.zip({"pt": rng.uniform(5, 100, m).astype(pt_dtype),
                                "eta": rng.uniform(-2.5, 2.5, m).astype(np.float32),
                                "phi": rng.uniform(-3, 3, m).astype(np.float32),
                                "mass": np.full(m, 0.105, np.float32),
                                "charge": rng.choice([-1, 1], m).astype(np.int32)}), counts)
    data = {"Muon": muon, "run": np.ones(600, np.uint32), "event": np.arange(600, dtype=np.uint64),
            "luminosityBlock": np.ones(600, np.uint32)}
    with uproot.recreate(path) as f:
        tree = f.mktree("Events", {k: v.type if isinstance(v, ak.Array) else v.dtype for k, v in data.items()},
                        title=title, field_name=lambda outer, inner: f"{outer}_{inner}", counter_name=lambda c: f"n{c}")
        tree.extend(data)


def test_a_branch_of_another_type_or_title_makes_another_form(tmp_path, on_a_worker, base_forms):
    paths = [str(tmp_path / f"{n}.root") for n in ("float32", "float64", "titled")]
    _write(paths[0], np.float32)
    _write(paths[1], np.float64)
    _write(paths[2], np.float32, title="another title")
    assert len({branch_signature(uproot.open(p)["Events"]) for p in paths}) == 3, "types and titles make the form"
    fileset = {"a": paths[:1], "b": paths[1:2], "c": paths[2:]}
    want = iterative(fileset)
    base_forms.clear()
    cache = on_a_worker()
    got = run(AsOnAWorker(), fileset)
    assert_same_sums(got, want, "three forms")
    assert len(forms_kept(cache)) == 3 and sorted(base_forms) == sorted(paths)


def test_the_value_range_of_a_leaf_is_no_part_of_the_signature(tmp_path):
    """nMuon's largest value differs from file to file (its leaf's fMaximum): same form."""
    a, b = str(tmp_path / "a.root"), str(tmp_path / "b.root")
    _write(a, np.float32)
    _write(b, np.float32, max_muons=9)
    leaf = lambda p: uproot.open(p)["Events"]["nMuon"].member("fLeaves")[0].member("fMaximum")  # noqa: E731
    assert leaf(a) != leaf(b)
    assert branch_signature(uproot.open(a)["Events"]) == branch_signature(uproot.open(b)["Events"])


@needs_nanoaod
@pytest.mark.heavy     # ~20 s: five real samples, two schemas, built twice each way
@pytest.mark.parametrize("name", ["nanoAOD_2015_CMS_Open_Data_ttbar.root", "nano_dy.root", "nano_dimuon.root",
                                  "EGamma_2022E_v13.root", "scouting_nano.root"])
def test_on_the_real_samples_the_kept_form_builds_what_coffea_builds(name):
    path = NANOAOD / name
    if not path.exists():
        pytest.skip(f"{path} not found")
    for schema in (NanoAODSchema, BaseSchema):
        cache = BranchCache(1 << 30)
        for attempt in ("worked out", "kept"):
            _assert_built_as_coffea_builds(path, schema, cache, f"{name} {schema.__name__} {attempt}")
        assert len(forms_kept(cache)) == 1
