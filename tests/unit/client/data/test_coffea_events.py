"""Issue 33, second and third points: on the worker that holds a chunk, what NanoEvents
construction produced from it is kept (client/data/coffea_events.py), so a warm rerun pays
only the processing; it counts against the cache's byte cap, is keyed by everything that
changes it, and a warm answer is still the cold answer.

Two tiers. The first runs coffea's own Runner in this process through what a worker's task
process runs for an item (``_RunItem`` with a worker's context and a real ``BranchCache``):
it counts NanoEvents constructions, watches the cache's bytes, and measures what a kept
chunk holds. The second runs ``RedisExecutor`` with real worker processes on a real
redis-server (conftest): a processor that changes its events, a file rewritten with its
UUID, a cache too small to keep anything. tests/test_warm_equals_cold.py compares the AGC
histograms with IterativeExecutor's cold, warm and after every worker is replaced.
Real parts: coffea, uproot reads of files written here and of the real 2015 AGC sample.
"""
from __future__ import annotations

import dataclasses
import gc
import os
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
from coffea.processor import accumulate  # noqa: E402
from coffea.processor.executor import ExecutorBase  # noqa: E402

from rhtc import context  # noqa: E402
from rhtc.client.data import coffea_events  # noqa: E402
from rhtc.client.data.coffea_events import NODE_BYTES, KeptEvents  # noqa: E402
from rhtc.client.data.coffea_items import CoffeaTask, _RunItem, routing_key, worker_cache  # noqa: E402
from rhtc.worker.cache import BranchCache  # noqa: E402
from tests.conftest import NANOAOD, needs_nanoaod  # noqa: E402
from tests.helpers import register_by_value  # noqa: E402

register_by_value(__name__)   # the processors travel by value

ENTRIES = 2_000


# -- files: a small NanoAOD written here, rewritten in place with its UUID ----------------------

def write_nano(path: str, scale: float, uuid: uuidlib.UUID, entries: int = ENTRIES) -> None:
    """Muons (pt x ``scale``, eta, phi, mass, charge) and the event ids; an existing file is
    rewritten in place (same inode, its mtime set back) and keeps ``uuid``."""
    before = os.stat(path) if os.path.exists(path) else None
    rng = np.random.default_rng(33)
    counts = rng.integers(0, 4, entries)
    m = int(counts.sum())
    muon = ak.unflatten(ak.zip({"pt": (rng.uniform(5, 100, m) * scale).astype(np.float32),
                                "eta": rng.uniform(-2.5, 2.5, m).astype(np.float32),
                                "phi": rng.uniform(-3, 3, m).astype(np.float32),
                                "mass": np.full(m, 0.105, np.float32),
                                "charge": rng.choice([-1, 1], m).astype(np.int32)}), counts)
    data = {"Muon": muon, "run": np.ones(entries, np.uint32), "event": np.arange(entries, dtype=np.uint64),
            "luminosityBlock": np.ones(entries, np.uint32)}
    with uproot.recreate(path, uuid_function=lambda: uuid) as f:
        tree = f.mktree("Events", {k: v.type if isinstance(v, ak.Array) else v.dtype for k, v in data.items()},
                        field_name=lambda outer, inner: f"{outer}_{inner}", counter_name=lambda c: f"n{c}")
        tree.extend(data)
    if before is not None:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(path).st_ino == before.st_ino


@pytest.fixture
def nano(tmp_path) -> str:
    path = str(tmp_path / "nano.root")
    write_nano(path, 1.0, uuidlib.uuid4())
    return path


# -- processors ---------------------------------------------------------------------------------

class MuonSums(processor.ProcessorABC):
    """Muon pt sums and counts (exact checks), and a histogram."""

    def process(self, events):
        import hist
        pt = events.Muon.pt
        h = hist.Hist(hist.axis.Regular(20, 0, 200, name="pt"))
        h.fill(pt=ak.flatten(pt))
        return {"pt": float(ak.sum(pt)), "muons": int(ak.sum(ak.num(pt))), "events": len(events), "hist": h}

    def postprocess(self, accumulator):
        return accumulator


class Meddler(processor.ProcessorABC):
    """Changes everything a processor can reach of its events (a field, a nested field,
    the metadata, the attrs) and counts what it found already changed on arrival."""

    def process(self, events):
        factory = events.attrs["@events_factory"]
        found = {"field": "doubled" in events.fields, "muon field": "pt2" in events.Muon.fields,
                 "metadata": "touched" in events.metadata, "attrs": "touched" in events.attrs}
        own = {"events() is events": factory.events() is events, "file handle": factory.file_handle is not None,
               "schema version": events.metadata.get("version") == "latest"}
        events["doubled"] = events.Muon.pt * 2
        events["Muon", "pt2"] = events.Muon.pt ** 2
        events.metadata["touched"] = True
        events.attrs["touched"] = True
        return {"found changed": {k: int(v) for k, v in found.items()}, "own": {k: int(v) for k, v in own.items()},
                "pt": float(ak.sum(events.Muon.pt)), "doubled": float(ak.sum(events.doubled)),
                "pt2": float(ak.sum(events.Muon.pt2)), "items": 1}

    def postprocess(self, accumulator):
        return accumulator


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


def run(executor, fileset, make=MuonSums, chunksize: int = 700, cachestrategy=worker_cache, schema=NanoAODSchema,
        **options):
    runner = processor.Runner(executor=executor, schema=schema, chunksize=chunksize, cachestrategy=cachestrategy,
                              **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # NanoAODSchema's missing cross-references
        return runner(fileset, processor_instance=make(), treename="Events")


def iterative(fileset, make=MuonSums, chunksize: int = 700, **options):
    return run(processor.IterativeExecutor(status=False), fileset, make, chunksize, cachestrategy=None, **options)


def kept_entries(cache: BranchCache) -> dict:
    return {k: v for k, v in cache._data.items() if isinstance(v[0], KeptEvents)}


def assert_same_sums(got: dict, want: dict, what: str) -> None:
    assert (got["muons"], got["events"]) == (want["muons"], want["events"]), what
    np.testing.assert_allclose(got["pt"], want["pt"], rtol=1e-9, err_msg=what)
    np.testing.assert_array_equal(got["hist"].values(flow=True), want["hist"].values(flow=True), err_msg=what)


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


# -- through real workers ----------------------------------------------------------------------

class Served(processor.ProcessorABC):
    """The muon sums, and how many items had the kept events before this one (0: built for
    this item)."""

    def process(self, events):
        out = MuonSums().process(events)
        out["served before"] = events.attrs["@events_factory"].kept.items_served - 1
        return out

    def postprocess(self, accumulator):
        return accumulator


def _ours(broker, **options):
    from rhtc.coffea import RedisExecutor
    return RedisExecutor(broker=broker.config, status=False, stragglers=None, **options)


def test_on_a_worker_reruns_reuse_the_kept_events_and_a_meddler_changes_nothing(broker, workers, tmp_path):
    path, same = str(tmp_path / "skim.root"), uuidlib.uuid4()
    write_nano(path, 1.0, same)
    fileset = {"skim": [path]}
    workers.start(1)
    ours = _ours(broker)
    cold, warm = run(ours, fileset, make=Served), run(ours, fileset, make=Served)
    assert (cold["served before"], warm["served before"]) == (0, 3), "a warm item built its events again"
    for what, got in (("cold", cold), ("warm", warm)):
        assert_same_sums(got, iterative(fileset), what)
    want = iterative(fileset, make=Meddler)
    for i in range(2):
        got = run(ours, fileset, make=Meddler)
        assert got["found changed"] == {"field": 0, "muon field": 0, "metadata": 0, "attrs": 0}, f"run {i}"
        assert got["own"] == {"events() is events": 3, "file handle": 3, "schema version": 3}, f"run {i}"
        np.testing.assert_allclose(got["doubled"], want["doubled"], rtol=1e-9)
    write_nano(path, 2.0, same)                       # rewritten in place, same UUID: same items
    after = run(ours, fileset, make=Served)
    assert after["served before"] == 0, "the old file's events were served"
    np.testing.assert_allclose(after["pt"], 2 * cold["pt"], rtol=1e-6)
    assert_same_sums(after, iterative(fileset), "after the rewrite")


def test_a_worker_whose_cache_cannot_hold_the_events_builds_them_and_answers_the_same(broker, workers, nano):
    fileset = {"nano": [nano]}
    workers.start(1, extra=("--cache-size", "20kB"))
    ours = _ours(broker)
    cold, warm = run(ours, fileset, make=Served), run(ours, fileset, make=Served)
    assert (cold["served before"], warm["served before"]) == (0, 0), "kept beyond the cache's cap"
    for what, got in (("cold", cold), ("warm", warm)):
        assert_same_sums(got, iterative(fileset), what)


# -- bench agc: the warm breakdown and the histogram check --------------------------------------

@pytest.mark.heavy            # writes the AGC samples
def test_bench_agc_breaks_a_chunk_down_cold_and_warm_and_compares_every_histogram(tmp_path):
    from rhtc.bench.agc import _hist_views, _same_hists
    from rhtc.bench.agcchunk import describe, one_chunk
    from rhtc.bench.agcgen import make_agc_data
    from rhtc.examples.agc_ttbar import TtbarAnalysis, agc_fileset
    make_agc_data(tmp_path, events=2_000, min_events=200, lean=True, progress=False, workers=1,
                  samples=[("ttbar", "nominal"), ("wjets", "nominal")])
    fileset = agc_fileset(str(tmp_path))
    items = list(processor.Runner(executor=processor.IterativeExecutor(status=False), chunksize=600)
                 .preprocess(fileset, treename="Events"))
    chunk = max(items, key=len)
    t = one_chunk(chunk, systematics=True, before=next(i for i in items if i.filename != chunk.filename))
    warm, again = t["warm"], t["warm_built_again"]
    assert set(warm) >= {"file_s", "nanoevents_s", "processing_s", "rest_s", "item_s"}
    assert warm["nanoevents_s"] < again["nanoevents_s"], "kept NanoEvents cost what building them costs"
    assert 0 < warm["processing_s"] <= warm["item_s"]
    lines = describe("a.root", t, 22)
    assert len(lines) == 3 and "NanoEvents kept" in lines[1] and "as before" in lines[1]
    ours_cold = warm["cold"]
    assert "after an item of another file" in lines[2] and "kept from that file" in lines[2]
    assert ours_cold["file_s"] > warm["file_s"] and ours_cold["item_s"] > warm["item_s"]

    out = iterative(fileset, make=lambda: TtbarAnalysis(True), chunksize=600)
    views = _hist_views(out)
    assert len(views) > 20 and _same_hists(views, _hist_views(out))
    key = next(iter(views))
    changed = {**views, key: (views[key][0] + 1e-3, views[key][1])}
    assert not _same_hists(changed, views)
