"""A warm answer is the cold answer: a standing differential test.

Random chunkings (files, step, which chunks) of the real CMS NanoAOD samples and of small
generated NanoAOD go through ``remote_map`` with analyses drawn from tests/kits/warmcold.py
(numpy copies changed in place, awkward slices, masks, counts, combinations, histograms),
with and without ``reduce=`` (``True``, ``operator.add``, an add in place) and the merge
on the workers on and off; the first run, the same map again (warm), and a rerun after
every worker was replaced by a new process on the same node disk tier must each give
what a plain single-process uproot loop gives over the same chunks (integers and counts
bit for bit, float sums up to the order of summation). So must a coffea processor run with
``RedisExecutor`` and ``worker_cache``, cold and warm, against coffea's IterativeExecutor.
A task that writes into an array a cache served (``x *= 2`` without a copy) is refused on
every run, cold, warm and after the replacement, with an error that names the branch and
says how to copy.

Real parts: a redis-server and two ``python -m rhtc.worker --disk-cache DIR`` processes
for the module (tests/kits/warmcold.py ``Node``), real uproot reads of the real files and of
NanoAOD generated here (client/synthetic/dimuon.py). Every example reads copies of the files made
for it: another version of each file, so its first run is cold on every tier and no
example sees what another left in the caches (a failure stays with its example).
Hypothesis draws deterministically (``derandomize=True``, no example database); the file
runs in about two minutes on two cores. ``RHTC_WARM_COLD_SCALE=5`` draws five times as many
examples (a longer search, e.g. after a change to the caches).
"""
from __future__ import annotations

import functools
import os
import warnings

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings

from rhtc import RemoteError
from rhtc.client.synthetic import make_data
from tests.conftest import NANOAOD, needs_nanoaod
from tests.kits.warmcold import (ANALYSES, ON_DISK, RAW, REDUCERS, Files, Node, PlainChunk, _plain_tree, agc_processor,
                            assert_same, assert_same_agc, assert_same_output, expected, muon_processor,
                            raw_muon_processor)

pytestmark = [needs_nanoaod, pytest.mark.timeout(900), pytest.mark.heavy]

settings.register_profile(
    "warm-equals-cold", derandomize=True, database=None, deadline=None, print_blob=True,
    # the module's node is reused across examples on purpose; an example runs several maps
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
PROFILE = settings.get_profile("warm-equals-cold")
SCALE = float(os.environ.get("RHTC_WARM_COLD_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, round(n * SCALE))


FILES = ["dy", "dimuon", "ttbar", "gen-lz4", "gen-zlib"]
file_sets = st.lists(st.sampled_from(FILES), min_size=1, max_size=3, unique=True)
picks = st.sampled_from(["all", "every other", "reversed"])
reductions = st.sampled_from(list(REDUCERS))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Files:
    """The three real samples and two generated NanoAOD files (LZ4 and ZLIB, several baskets)."""
    out = tmp_path_factory.mktemp("warmcold-files")
    lz4 = make_data(out / "lz4", files=1, events=400, compression="LZ4", seed=28, basket_events=150,
                    progress=False, workers=1)[0]
    zlib = make_data(out / "zlib", files=1, events=300, compression="ZLIB", seed=29, basket_events=100,
                     progress=False, workers=1)[0]
    paths = {"dy": NANOAOD / "nano_dy.root", "dimuon": NANOAOD / "nano_dimuon.root",
             "ttbar": NANOAOD / "nanoAOD_2015_CMS_Open_Data_ttbar.root", "gen-lz4": lz4, "gen-zlib": zlib}
    return Files({name: str(path) for name, path in paths.items()}, out / "copies")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("warmcold-node"))
    yield n
    n.stop()


def _what(names, step, pick, name, reduce, merge) -> str:
    return f"{name} over fresh copies of {names} step {step} ({pick}), reduce={reduce!r}, merge={merge}"


@settings(PROFILE, max_examples=examples(16))
@given(names=file_sets, step=st.integers(4, 250), pick=picks,
       analyses=st.lists(st.sampled_from(sorted(ANALYSES)), min_size=1, max_size=3, unique=True),
       reduce=reductions, merge=st.booleans())
# found: the worker's partial folded ``a += b`` into the array the first task returned, a view
# of the RAM cache's nMuon: the warm run gave 16 where the loop gives 8
@example(names=["dy", "ttbar"], step=7, pick="all", analyses=["first_muon_count"], reduce="in place", merge=True)
# seen while the caches became read-only: results that arrived read-only made the client's
# own in-place fold raise "output array is read-only"
@example(names=["dy", "ttbar"], step=7, pick="all", analyses=["first_muon_count"], reduce="in place", merge=False)
def test_a_warm_answer_is_the_cold_answer(node, files, names, step, pick, analyses, reduce, merge):
    """The first run (cold: fresh copies of the files) and the same map again give the
    plain loop's answer; an analysis that follows another over the same chunks reads what
    the first one left in the caches."""
    chunks = files.chunks(names, step, pick, fresh=True)
    for name in analyses:
        what = _what(names, step, pick, name, reduce, merge)
        want = expected(name, chunks, reduce, files.originals)
        first, _ = node.run(ANALYSES[name], chunks, reduce=REDUCERS[reduce], merge=merge)
        assert_same(first, want, f"{what}: first run")
        warm, tasks = node.run(ANALYSES[name], chunks, reduce=REDUCERS[reduce], merge=merge)
        assert_same(warm, want, f"{what}: warm run")
        assert sum(t.bytes_cache + t.bytes_disk for t in tasks) > 0, f"{what}: the warm run read no cache"


@settings(PROFILE, max_examples=examples(3))
@given(names=file_sets, step=st.integers(10, 250),
       analyses=st.lists(st.sampled_from(sorted(ANALYSES)), min_size=2, max_size=3, unique=True),
       reduce=reductions, merge=st.booleans())
def test_a_rerun_after_every_worker_is_replaced_is_the_cold_answer(node, files, names, step, analyses,
                                                                   reduce, merge):
    """Cold runs over fresh copies fill the node's disk tier; every worker is replaced by a
    new process on the same directory; the rerun, served from the disk, is the same."""
    chunks = files.chunks(names, step, "all", fresh=True)
    wants = {name: expected(name, chunks, reduce, files.originals) for name in analyses}
    for name in analyses:
        cold, _ = node.run(ANALYSES[name], chunks, reduce=REDUCERS[reduce], merge=merge)
        assert_same(cold, wants[name], f"{_what(names, step, 'all', name, reduce, merge)}: cold")
    node.replace_all()
    from_disk = 0
    for name in analyses:
        again, tasks = node.run(ANALYSES[name], chunks, reduce=REDUCERS[reduce], merge=merge)
        assert_same(again, wants[name],
                    f"{_what(names, step, 'all', name, reduce, merge)}: after every worker was replaced")
        from_disk += sum(t.bytes_disk for t in tasks)
    if ON_DISK & set(analyses):
        assert from_disk > 0, "after every worker was replaced, nothing came from the node's disk tier"


# -- the raw in-place idioms: refused on every tier ----------------------------------------------

def _outcome(results: list, plain: list) -> str:
    """One line: refused (the first error's first line) or the values, against the plain loop."""
    errors = [r for r in results if isinstance(r, RemoteError)]
    if len(errors) == len(results):
        return f"refused: {errors[0].remote_type}: {str(errors[0].message).splitlines()[0][:160]}"
    values = [r for r in results if not isinstance(r, RemoteError)]
    total, want = sum(values), sum(p for p, r in zip(plain, results) if not isinstance(r, RemoteError))
    return (f"{len(errors)} of {len(results)} refused; the others returned a total of {total:.6g} "
            f"(the plain loop: {want:.6g}, ratio {total / want if want else float('nan'):.4g})")


def test_a_write_into_what_a_cache_serves_is_refused_on_every_tier(node, files):
    """``x = chunk.arrays(...)[b]; x *= 2`` (numpy, flat and jagged) and a write through
    ``np.asarray(ak.flatten(pt))`` raise on the worker on every run, cold, warm and after
    every worker was replaced, as a RemoteError naming the branch and saying how to copy.
    Without that, the warm run returns what the cold run wrote (2x)."""
    chunks = files.chunks(["dy", "ttbar", "gen-lz4"], 37, "all", fresh=True)
    runs: dict = {fn: {} for fn in RAW}
    for phase in ("cold", "warm"):
        for fn in RAW:
            runs[fn][phase] = node.run(fn, chunks, errors="return")[0]
    node.replace_all()
    for fn in RAW:
        runs[fn]["after every worker was replaced"] = node.run(fn, chunks, errors="return")[0]
    plain = {fn: [fn(PlainChunk(_plain_tree(files.originals[c.file], c.tree), c.entry_start, c.entry_stop))
                  for c in chunks] for fn in RAW}          # what the idioms give uproot alone, for the table
    table = "\n".join(f"  {fn.__name__} {phase}: {_outcome(results, plain[fn])}"
                      for fn in RAW for phase, results in runs[fn].items())
    for fn, branch in RAW.items():
        for phase, results in runs[fn].items():
            for r in results:
                assert isinstance(r, RemoteError), f"{fn.__name__} {phase}: a write was not refused\n{table}"
                assert repr(branch) in r.message and "np.array(" in r.message, \
                    f"{fn.__name__} {phase}: the error does not name {branch!r} and say how to copy: " \
                    f"{r.message}\n{table}"


# -- coffea: RedisExecutor with worker_cache against coffea alone ------------------------------------

def _coffea_run(executor, fileset: dict, chunksize: int, cachestrategy=None, make=muon_processor) -> dict:
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema
    run = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=chunksize,
                           cachestrategy=cachestrategy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # NanoAODSchema's missing cross-references
        return run(fileset, processor_instance=make(), treename="Events")


@functools.lru_cache(maxsize=None)
def _iterative(fileset: tuple, chunksize: int, make=muon_processor) -> dict:
    from coffea import processor
    return _coffea_run(processor.IterativeExecutor(status=False), {d: list(f) for d, f in fileset}, chunksize,
                       make=make)


@settings(PROFILE, max_examples=examples(2))
@given(names=st.lists(st.sampled_from(["dy", "dimuon", "ttbar", "gen-lz4"]), min_size=1, max_size=2, unique=True),
       chunksize=st.integers(15, 150))
@example(names=["gen-lz4", "dy"], chunksize=64)
def test_coffea_with_the_worker_cache_is_coffea_alone(node, files, names, chunksize):
    """A processor run by RedisExecutor with worker_cache over fresh copies, cold, warm and
    warm with the merge off, gives what coffea's IterativeExecutor gives over the files."""
    pytest.importorskip("coffea")
    from rhtc import last_map
    from rhtc.coffea import RedisExecutor, worker_cache
    want = _iterative(tuple((name, (files.paths[name],)) for name in names), chunksize)
    assert np.sum(want["pt"].values()) > 0
    fileset = {name: [files.copy(files.paths[name])] for name in names}
    ours = RedisExecutor(broker=node.broker.config, status=False)
    alone = RedisExecutor(broker=node.broker.config, status=False, merge=False)
    what = f"fresh copies of {names}, chunksize {chunksize}"
    for run, executor in (("first run", ours), ("warm", ours), ("warm, merge off", alone)):
        got = _coffea_run(executor, fileset, chunksize, cachestrategy=worker_cache)
        assert_same_output(got, want, f"{what}: {run}")
        if run != "first run":
            assert sum(t.bytes_cache + t.bytes_disk for t in last_map().record().tasks) > 0, \
                f"{what}: {run}: nothing came from the worker cache"


def test_a_coffea_processor_writing_into_its_columns_is_refused_on_every_tier(node, files):
    """A processor that writes into ``events.Muon.pt`` without a copy fails its item on every
    run, cold, warm and after every worker was replaced, naming the branch and how to copy.
    Without that, the warm run returns what the cold run wrote (2x)."""
    pytest.importorskip("coffea")
    from rhtc import ReadOnlyArrayError
    from rhtc.coffea import RedisExecutor, worker_cache
    names, chunksize = ("ttbar",), 50
    fileset = {name: [files.copy(files.paths[name])] for name in names}
    ours = RedisExecutor(broker=node.broker.config, status=False)
    outcomes = {}
    for phase in ("cold", "warm", "after every worker was replaced"):
        if phase.startswith("after"):
            node.replace_all()
        try:
            outcomes[phase] = _coffea_run(ours, fileset, chunksize, cachestrategy=worker_cache,
                                          make=raw_muon_processor)
        except ReadOnlyArrayError as err:       # the item's own error, as coffea's executors raise it
            outcomes[phase] = err

    def returned(output: dict) -> str:
        plain = _iterative(tuple((name, (files.paths[name],)) for name in names), chunksize, make=raw_muon_processor)
        return f"returned {output['doubled']:.6g} (the plain loop: {plain['doubled']:.6g})"

    table = "\n".join(f"  {phase}: " + (f"refused: {str(o).splitlines()[0][:300]}"
                                         if isinstance(o, ReadOnlyArrayError) else returned(o))
                      for phase, o in outcomes.items())
    for phase, outcome in outcomes.items():
        assert isinstance(outcome, ReadOnlyArrayError), f"{phase}: the write was not refused\n{table}"
        message = str(outcome)
        assert "'Muon_pt'" in message and "np.array(" in message, \
            f"{phase}: the error does not name 'Muon_pt' and say how to copy\n{table}"


@pytest.mark.heavy            # writes the AGC samples and replaces the node's workers
def test_the_agc_histograms_are_iteratives_cold_warm_and_after_every_worker_is_replaced(node, tmp_path_factory):
    """The AGC ttbar processor with RedisExecutor and worker_cache: the first run, the warm
    rerun (every item on the worker that keeps its NanoEvents, none built again), a rerun
    after every worker was replaced (built again, from the node's disk tier) and the rerun
    after that all fill the histograms IterativeExecutor fills."""
    pytest.importorskip("coffea")
    from rhtc.bench.agcgen import make_agc_data
    from rhtc.coffea import RedisExecutor, worker_cache
    from rhtc.examples.agc_ttbar import agc_fileset
    out = tmp_path_factory.mktemp("agc")
    make_agc_data(out, events=3_000, min_events=200, lean=True, progress=False, workers=1)
    fileset, chunksize = agc_fileset(str(out)), 400
    want = _coffea_run(processor_iterative(), fileset, chunksize, make=agc_processor)
    ours = RedisExecutor(broker=node.broker.config, status=False, stragglers=None)
    items = None
    for phase in ("cold", "warm", "after every worker was replaced", "warm again"):
        if phase.startswith("after"):
            node.replace_all()
        got = _coffea_run(ours, fileset, chunksize, cachestrategy=worker_cache, make=agc_processor)
        assert_same_agc(got, want, phase)
        items = items or len(last_map_tasks())
        reused = {"cold": 0, "warm": items, "after every worker was replaced": 0, "warm again": items}[phase]
        assert got["served before"] == reused, f"{phase}: {got['served before']} of {items} items had kept events"


def processor_iterative():
    from coffea import processor
    return processor.IterativeExecutor(status=False)


def last_map_tasks():
    from rhtc import last_map
    return last_map().record().tasks
