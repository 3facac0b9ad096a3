"""A warm answer is the cold answer (issue 28, cases 1, 2 and 4): no task changes what a
cache serves later, a merge on the workers folds into a value of its own, and a
reduction that leaves failed tasks out says so.

The pure half (the branch cache, the partials) runs without Redis; the rest on a real
redis-server with real workers reading the real NanoAOD sample through uproot, with the
node's disk tier so that every tier (the file, RAM, the disk, a chunk served without its
file) hands out the arrays of one run."""
from __future__ import annotations

import operator
import time

import awkward as ak
import numpy as np
import pytest
import uproot
from hypothesis import given, settings, strategies as st

import rhtc
from rhtc.broker.wire.merge import MergePlan
from rhtc.broker.wire.messages import ResultMeta
from rhtc.broker.wire.protocol import TaskRef
from rhtc.client import make_chunks, remote_map
from rhtc.client.errors import RemoteError
from rhtc.errors import ReadOnlyArrayError
from rhtc.worker.cache import BranchCache
from rhtc.worker.merge import Partials
from tests.conftest import NANOAOD, needs_nanoaod

DY = str(NANOAOD / "nano_dy.root")


# -- the branch cache, without Redis ---------------------------------------------------------

def test_the_cache_hands_out_arrays_a_task_cannot_write_nor_unfreeze():
    c = BranchCache(limit_bytes=10**6)
    read = np.arange(5.0)                  # what uproot read from the file and also returns
    c.view("chunk-A", "v1")["k"] = read
    with pytest.raises(ValueError, match="read-only"):
        read *= 2                          # the task that read it: the same behaviour as warm
    warm = c.view("chunk-A", "v1").get("k")
    with pytest.raises(ValueError, match="read-only"):
        warm[0] = 7
    with pytest.raises(ValueError):
        warm.flags.writeable = True        # a view of a read-only array stays read-only
    assert c.view("chunk-A", "v1").get("k").tolist() == [0, 1, 2, 3, 4]


def test_an_awkward_array_from_the_cache_is_the_tasks_own_wrapper_over_read_only_buffers():
    c = BranchCache(limit_bytes=10**6)
    c.view("chunk-A", "v1")["k"] = ak.Array([{"x": 1.0, "y": [1, 2]}, {"x": 2.0, "y": []}])
    mine = c.view("chunk-A", "v1").get("k")
    mine["z"] = mine.x * 10                # changes the task's own ak.Array only
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(mine.x)[0] = 99         # the buffers are the cache's
    again = c.view("chunk-A", "v1").get("k")
    assert again.fields == ["x", "y"] and again.x.tolist() == [1.0, 2.0]


def test_uproot_storing_again_what_it_got_keeps_the_cache_s_value():
    c = BranchCache(limit_bytes=10**6)
    c.view("chunk-A", "v1")["k"] = ak.Array([[1.0], [2.0, 3.0]])
    handed = c.view("chunk-A", "v1").get("k")
    handed.behavior = {"mine": True}       # the task's wrapper; uproot stores it back
    c.view("chunk-A", "v1")["k"] = handed
    assert c.view("chunk-A", "v1").get("k").behavior is None


ARRAYS = st.one_of(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20).map(np.array),
    st.lists(st.lists(st.integers(-100, 100), max_size=4), min_size=1, max_size=10).map(ak.Array),
)
WRITES = ["imul", "setitem", "ufunc_out", "asarray", "sort"]


def _write(value, how: str) -> None:
    flat = np.asarray(ak.flatten(value, axis=None)) if isinstance(value, ak.Array) else value
    if how == "imul":
        flat *= 2
    elif how == "setitem":
        flat[...] = 0
    elif how == "ufunc_out":
        np.add(flat, 1, out=flat)
    elif how == "asarray":
        np.asarray(flat)[:1] = -1
    else:
        flat.sort()


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(values=st.lists(ARRAYS, min_size=1, max_size=4),
       ops=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(WRITES)), max_size=12))
def test_no_sequence_of_in_place_writes_changes_what_the_cache_serves(values, ops):
    """Property: whatever in-place writes tasks attempt on what they were served (or on
    what they stored: the cold read), every later read gives the stored values."""
    c = BranchCache(limit_bytes=10**7)
    stored = [v.copy() if isinstance(v, np.ndarray) else ak.Array(v) for v in values]
    expected = [v.tolist() for v in values]
    for i, v in enumerate(stored):
        c.view("chunk", "v1")[f"k{i}"] = v
    for i, how in ops:
        i %= len(values)
        target = stored[i] if how == "sort" else c.view("chunk", "v1").get(f"k{i}")
        try:
            _write(target, how)
        except ValueError as err:
            assert "read-only" in str(err)
    assert [c.view("chunk", "v1").get(f"k{i}").tolist() for i in range(len(values))] == expected


# -- the merge folds into a value it owns ------------------------------------------------------

def add_in_place(a, b):
    a += b
    return a


def test_a_partial_never_folds_into_what_a_task_returned():
    served = np.arange(4.0)                # e.g. an array a cache serves, or the task keeps
    before = served.copy()
    p = Partials(b"k" * 32, room=100)
    plan = MergePlan(abs, add_in_place, 10, 60.0)
    meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0)
    assert p.fold(plan, TaskRef("0123456789abcdef", 0), served, meta)
    assert p.fold(plan, TaskRef("0123456789abcdef", 1), np.ones(4), meta)
    assert served.tolist() == before.tolist()
    assert p.open["0123456789abcdef"].value.tolist() == (before + 1).tolist()


# -- end to end: real workers, every tier ---------------------------------------------------

def met_doubled_in_place(chunk):
    x = chunk.arrays(["MET_pt"], library="np")["MET_pt"]
    x *= 2
    return float(x.sum())


def met_doubled_on_a_copy(chunk):
    x = np.array(chunk.arrays(["MET_pt"], library="np")["MET_pt"])
    x *= 2
    return float(x.sum())


def muon_pt_shifted_through_numpy(chunk):
    pt = chunk.arrays(["Muon_pt"], how=dict)["Muon_pt"]
    flat = np.asarray(ak.flatten(pt))
    flat -= 1
    return float(flat.sum())


def met_as_served(chunk):
    return chunk.arrays(["MET_pt"], library="np")["MET_pt"]


def plain_uproot(chunks, fn):
    with uproot.open(DY) as f:
        tree = f["Events"]
        return [fn(tree.arrays(["MET_pt"], entry_start=c.entry_start, entry_stop=c.entry_stop,
                               library="np")["MET_pt"]) for c in chunks]


@pytest.fixture
def replace_workers(broker, workers, tmp_path):
    """Start two workers on one node's disk tier; calling the result replaces them all."""
    env = {"RHTC_DISK_CACHE": str(tmp_path / "tier")}
    workers.start(2, env=env)

    def replace():
        time.sleep(0.5)                    # the background disk writes of the last map
        workers.stop_all()
        workers.start(2, env=env)
    return replace


@needs_nanoaod
def test_an_in_place_write_fails_alike_on_every_tier_naming_the_branch(broker, replace_workers):
    chunks = make_chunks(DY, step=10)
    for run in ("cold", "warm", "after every worker is replaced"):
        for fn, branch in ((met_doubled_in_place, "MET_pt"), (muon_pt_shifted_through_numpy, "Muon_pt")):
            out = remote_map(fn, chunks, broker=broker, progress=False, errors="return", timeout=120)
            for r in out:
                assert isinstance(r, RemoteError), (run, fn.__name__, r)
                assert isinstance(r.exception, ReadOnlyArrayError), (run, r)
                assert f"'{branch}'" in r.message and "np.array(x)" in r.message, (run, r.message)
        copied = remote_map(met_doubled_on_a_copy, chunks, broker=broker, progress=False, timeout=120)
        assert copied == plain_uproot(chunks, lambda x: float((x * 2).sum())), run
        if run == "warm":
            replace_workers()


@needs_nanoaod
@pytest.mark.parametrize("merge", [True, False], ids=["merged-on-workers", "merged-on-client"])
def test_an_in_place_reduce_gives_the_cold_answer_warm_and_after_a_restart(broker, replace_workers, merge):
    chunks = make_chunks(DY, step=10)
    want = np.sum(plain_uproot(chunks, lambda x: x), axis=0)
    for run in ("cold", "warm", "warm again", "after every worker is replaced"):
        if run.startswith("after"):
            replace_workers()
        got = remote_map(met_as_served, chunks, broker=broker, progress=False, timeout=120,
                         reduce=add_in_place, merge=merge)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=run)     # to summation order


# -- a reduction that leaves failed tasks out says so --------------------------------------

def fails_on_three(x):
    if x == 3:
        raise ValueError("three is bad")
    return x


@pytest.mark.parametrize("reduce", [True, operator.add], ids=["plus", "function"])
def test_reduce_with_errors_return_warns_naming_the_failed_tasks(broker, workers, reduce):
    workers.start(1)
    with pytest.warns(rhtc.TasksFailedWarning, match=r"1 of 10 tasks failed .* task 3 .*three is bad"):
        got = remote_map(fails_on_three, range(10), broker=broker, progress=False, reduce=reduce,
                         errors="return", timeout=60)
    assert got == 42
    assert [e.index for e in rhtc.last_map().failures] == [3]
