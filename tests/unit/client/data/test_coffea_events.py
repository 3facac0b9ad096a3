"""NanoEvents kept on the worker that holds a chunk (client/data/coffea_events.py), so a
warm rerun pays only the processing: coffea builds NanoEvents for every item (the tree's
base form, the schema's collections and cross-references, an awkward array of virtual
buffers), and once the branches come from the worker's cache that construction is the
largest cost of a warm AGC item. What is kept counts against the cache's byte cap, is
keyed by everything that changes it, and a warm answer is still the cold answer.

A cold item's construction keeps the base form across files too (``branch_signature`` and
``_from_root_kept_form``): working out a NanoAOD tree's base form (each branch's
interpretation, type name and form) is most of what a cold item spends building
NanoEvents; files of one production have the same branches, so a worker keeps the form (in
its byte-capped cache, under the tree's branch signature) and builds the next file's events
from it. What it builds must be what coffea builds: the same schema form, partition key and
answers, on files written here and on every real NanoAOD sample; a file whose branches
differ in anything that makes the form (a type, a title) gets its own.

In this process: coffea's own Runner through what a worker's task process runs for an item
(``_RunItem`` with a worker's context and a real ``BranchCache``), counting NanoEvents
constructions and base forms, watching the cache's bytes, measuring what a kept chunk
holds. With real workers: tests/scenarios/test_kept_nanoevents_on_workers.py; the AGC
histograms against IterativeExecutor's, cold, warm and after every worker is replaced:
tests/scenarios/test_a_warm_answer_is_the_cold_answer.py. Real parts: coffea, uproot
reads of files written here and of the real CMS NanoAOD samples.
"""
from __future__ import annotations

import dataclasses
import gc
import tracemalloc
import uuid as uuidlib
import warnings

import awkward as ak
import numpy as np
import pytest
import uproot

pytest.importorskip("coffea")
from coffea import processor  # noqa: E402
from coffea.nanoevents import BaseSchema, NanoAODSchema, NanoEventsFactory  # noqa: E402
from coffea.nanoevents.mapping import UprootSourceMapping  # noqa: E402
from coffea.processor import accumulate  # noqa: E402
from coffea.processor.executor import ExecutorBase  # noqa: E402

from rhtc import context  # noqa: E402
from rhtc.client.data import coffea_events  # noqa: E402
from rhtc.client.data.coffea_events import (NODE_BYTES, KeptEvents, _from_root_kept_form,  # noqa: E402
                                            branch_signature)
from rhtc.client.data.coffea_items import CoffeaTask, _RunItem, routing_key  # noqa: E402
from rhtc.worker.cache import BranchCache  # noqa: E402
from tests.kits.coffea import (ENTRIES, Meddler, assert_same_sums, iterative, nano, run,  # noqa: E402,F401  (nano: a fixture)
                             write_nano)
from tests.conftest import NANOAOD, needs_nanoaod  # noqa: E402


# -- in this process, as a worker's task process runs an item -----------------------------------

@dataclasses.dataclass
class AsOnAWorker(ExecutorBase):
    """Runs each item through what a worker runs for it (``_RunItem``), in this process, with
    the worker's context; after each item, ``after(cache)`` may look at the cache."""

    after: object = None
    from_file: list = dataclasses.field(default_factory=list)     # per item: bytes it read from the file

    def __call__(self, items, function, accumulator):
        run, total = _RunItem(function), accumulator
        for item in items:
            context.current.begin_task()
            out, _ = run(CoffeaTask(item, routing_key(item)))
            self.from_file.append(context.current.bytes_from_file)
            total = accumulate([out], total)
            if self.after is not None:
                self.after(context.current.cache)
        return total, 0


@pytest.fixture
def constructions(monkeypatch) -> list:
    """Every NanoEvents construction (coffea's ``from_root``, or ours from a base form kept
    across files: both end in ``NanoEventsFactory._from_mapping``), by partition key."""
    calls = []
    real = NanoEventsFactory._from_mapping.__func__

    def counting(cls, mapping, partition_key, *args, **kwargs):
        calls.append(partition_key)
        return real(cls, mapping, partition_key, *args, **kwargs)

    monkeypatch.setattr(NanoEventsFactory, "_from_mapping", classmethod(counting))
    return calls


def kept_entries(cache: BranchCache) -> dict:
    return {k: v for k, v in cache._data.items() if isinstance(v[0], KeptEvents)}


# -- kept NanoEvents ----------------------------------------------------------------------------

def test_a_warm_item_builds_no_nanoevents_and_gives_the_cold_answer(nano, on_a_worker, constructions):
    fileset = {"nano": [nano]}
    want = iterative(fileset)
    constructions.clear()
    cache = on_a_worker()
    cold = run(AsOnAWorker(), fileset)
    assert len(constructions) == 3, "one construction per item (2000 entries at chunk size 700)"
    kept = kept_entries(cache)
    assert len(kept) == 3 and all(tag is not None for _, _, tag in kept.values())
    for _ in range(2):
        warm = run(AsOnAWorker(), fileset)
        assert len(constructions) == 3, "a warm item built NanoEvents again"
    for what, got in (("cold", cold), ("warm", warm)):
        assert_same_sums(got, want, what)
    other_schema = run(AsOnAWorker(), fileset, schema=BaseSchema, make=lambda: _FieldCount())
    assert len(constructions) == 6, "another schema is another key"
    assert other_schema == iterative(fileset, make=lambda: _FieldCount(), schema=BaseSchema)


class _FieldCount(processor.ProcessorABC):
    def process(self, events):
        return {"fields": len(events.fields), "nMuon": int(ak.sum(events.nMuon))}

    def postprocess(self, accumulator):
        return accumulator


def test_the_key_holds_every_argument_that_changes_what_is_built():
    key = coffea_events.events_kept_key
    base = ("v1", "u:Events:0-10", "Events", 0, 10, NanoAODSchema, {"dataset": "a"}, {}, None)
    same = key(*base)
    changed = {"file version": ("v2",) + base[1:], "entries": base[:3] + (0, 9) + base[5:],
               "schema": base[:5] + (BaseSchema,) + base[6:],
               "metadata": base[:6] + ({"dataset": "b"},) + base[7:],
               "usermeta": base[:6] + ({"dataset": "a", "xsec": 1.0},) + base[7:],
               "iteritems_options": base[:7] + ({"filter_name": "Muon_*"},) + base[8:],
               "preload": base[:8] + (frozenset({"Muon_pt"}),)}
    for what, args in changed.items():
        assert key(*args) != same, what
    assert key(*base[:6], {"f": lambda x: x}, {}, None) is None, "metadata that does not pickle: not kept"
    saved = NanoAODSchema.warn_missing_crossrefs
    try:
        NanoAODSchema.warn_missing_crossrefs = not saved
        assert key(*base) != same, "a schema class option"
    finally:
        NanoAODSchema.warn_missing_crossrefs = saved
    assert key(*base) == same
    saved_versions = coffea_events.VERSIONS
    try:
        coffea_events.VERSIONS = ("coffea-next",) + saved_versions[1:]
        assert key(*base) != same, "the coffea version"
        coffea_events.VERSIONS = saved_versions[:1] + ("awkward-next",) + saved_versions[2:]
        assert key(*base) != same, "the awkward version"
    finally:
        coffea_events.VERSIONS = saved_versions


def test_what_a_processor_changes_on_one_run_never_reaches_the_next(nano, on_a_worker):
    fileset = {"nano": [nano]}
    want = iterative(fileset, make=Meddler)
    on_a_worker()
    runs = [run(AsOnAWorker(), fileset, make=Meddler) for _ in range(3)]
    for i, got in enumerate(runs):
        assert got["found changed"] == {"field": 0, "muon field": 0, "metadata": 0, "attrs": 0}, f"run {i}"
        assert got["own"] == {"events() is events": 3, "file handle": 3, "schema version": 3}, f"run {i}"
        for key in ("pt", "doubled", "pt2"):
            np.testing.assert_allclose(got[key], want[key], rtol=1e-9, err_msg=f"run {i}: {key}")


def test_savemetrics_columns_and_bytes_as_coffea_with_a_cache(nano, on_a_worker):
    fileset, theirs_cache = {"nano": [nano]}, {}
    their_cold = run(processor.IterativeExecutor(status=False), fileset, cachestrategy=lambda: theirs_cache,
                     savemetrics=True)[1]
    their_warm = run(processor.IterativeExecutor(status=False), fileset, cachestrategy=lambda: theirs_cache,
                     savemetrics=True)[1]
    on_a_worker()
    cold = run(AsOnAWorker(), fileset, savemetrics=True)[1]
    warm = run(AsOnAWorker(), fileset, savemetrics=True)[1]
    assert cold["columns"] == their_cold["columns"] and len(cold["columns"]) > 0
    assert warm["columns"] == their_warm["columns"], "a buffer served from the cache logs no column"
    assert cold["entries"] == warm["entries"] == ENTRIES
    assert 0 < cold["bytesread"] <= their_cold["bytesread"] and warm["bytesread"] == 0


def test_a_column_evicted_from_the_cache_is_read_again_through_the_kept_events(nano, on_a_worker, constructions):
    """The kept events hold no buffer: one the cache let go of is read again through the
    item's open file, logged in the item's access log (savemetrics' columns) and counted in
    the run record as read from the file."""
    fileset = {"nano": [nano]}
    cache = on_a_worker()
    run(AsOnAWorker(), fileset, savemetrics=True)
    for key in [k for k, (v, _, _) in cache._data.items() if not isinstance(v, KeptEvents) and "Muon_pt" in k]:
        del cache[key]
    executor = AsOnAWorker()
    out, metrics = run(executor, fileset, savemetrics=True)
    assert len(constructions) == 3, "the events were kept"
    assert {c.split("-")[0] for c in metrics["columns"]} == {"Muon_pt"}
    assert all(n > 0 for n in executor.from_file), executor.from_file
    assert_same_sums(out, iterative(fileset), "after the eviction")


def test_a_file_rewritten_with_its_uuid_is_never_served_its_old_events(tmp_path, on_a_worker, constructions):
    path, same = str(tmp_path / "skim.root"), uuidlib.uuid4()
    write_nano(path, 1.0, same)
    fileset = {"skim": [path]}
    items = list(processor.Runner(executor=processor.IterativeExecutor(status=False), chunksize=700)
                 .preprocess(fileset, treename="Events"))
    on_a_worker()
    first = run(AsOnAWorker(), fileset)
    run(AsOnAWorker(), fileset)
    assert len(constructions) == 3
    write_nano(path, 2.0, same)                       # the skim re-run in place, same UUID
    assert list(processor.Runner(executor=processor.IterativeExecutor(status=False), chunksize=700)
                .preprocess(fileset, treename="Events")) == items, "the same items"
    want = iterative(fileset)
    constructions.clear()
    for _ in range(2):
        again = run(AsOnAWorker(), fileset)
        np.testing.assert_allclose(again["pt"], 2 * first["pt"], rtol=1e-6)
        assert_same_sums(again, want, "after the rewrite")
    assert len(constructions) == 3, "built again once for the new version, then kept"


def test_kept_events_count_against_the_cap_and_are_evicted_under_it(nano, on_a_worker, constructions):
    fileset = {"nano": [nano]}
    probe = on_a_worker()
    run(AsOnAWorker(), fileset, chunksize=500)                # 4 items
    one = max(size for _, size, _ in kept_entries(probe).values())
    assert one >= NODE_BYTES * 10
    limit = int(1.5 * one)                                    # room for one kept chunk, not two
    seen = []

    def watch(cache):
        seen.append((cache.nbytes, len(kept_entries(cache))))

    want = iterative(fileset, chunksize=500)
    cache = on_a_worker(limit)
    constructions.clear()
    for _ in range(2):
        out = run(AsOnAWorker(after=watch), fileset, chunksize=500)
        assert_same_sums(out, want, f"under a cap of {limit} bytes")
    assert all(nbytes <= limit and kept <= 1 for nbytes, kept in seen), seen
    assert cache.nbytes <= limit
    assert len(constructions) == 8, "4 chunks, room for one: every item builds again"
    big = on_a_worker(int(0.5 * one))                        # smaller than one chunk's events
    run(AsOnAWorker(), fileset, chunksize=500)
    assert kept_entries(big) == {} and big.nbytes <= int(0.5 * one)


@needs_nanoaod
@pytest.mark.parametrize("path,schema", [(NANOAOD / "nanoAOD_2015_CMS_Open_Data_ttbar.root", NanoAODSchema),
                                         (NANOAOD / "nano_dy.root", BaseSchema)],
                         ids=["AGC 2015 sample, NanoAODSchema", "nano_dy, BaseSchema"])
def test_what_a_kept_chunk_is_charged_is_what_it_holds(path, schema):
    """NODE_BYTES per layout node covers what the kept factory and layout hold in memory
    (tracemalloc), with less than 60 % to spare."""
    f = uproot.open(str(path))

    def build():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            factory = NanoEventsFactory.from_root(file=f, treepath="Events", schemaclass=schema, metadata={"d": 1},
                                                  access_log=[], mode="virtual", entry_start=0, entry_stop=100,
                                                  buffer_cache={})
            return KeptEvents.build(factory, {"d": 1})

    build()                                      # the tree's lazy parts are parsed once, not counted
    gc.collect()
    tracemalloc.start()
    try:
        kept = build()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held > 0 and 1.0 <= kept.nbytes / held <= 1.6, (kept.nbytes, held)


# -- the base form kept across files ----------------------------------------------------------------

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
