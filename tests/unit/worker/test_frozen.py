"""No array a worker's cache serves can be made writable again, on any tier.

``x.flags.writeable = True`` (or ``x.setflags(write=True)``) is what every search answers to
numpy's "assignment destination is read-only", so analysts who meet our
:class:`ReadOnlyArrayError` type it. numpy allows it for an array that owns its memory, or
whose base does: the cache used to keep the very arrays uproot read, so a flip on
``np.asarray`` of an awkward array, on ``ak.flatten`` of a jagged one, on an element of a
jagged ``library="np"`` branch or on any array of a cold read succeeded, the write changed
what later tasks read (2x), and reached the node's disk tier, written in the background
from the same memory.

Each route an analyst may take to a numpy array, on a cold read, a warm read (RAM) and a
read from the node's disk tier (a new cache over the same directory: a replaced worker),
is refused and leaves later reads as they were; the disk tier is written from the cache's
own copy even when the holder of what was read changes it before the writer runs (the
writer held at a gate: no timing). In process with real uproot reads of the real NanoAOD
sample, a property over random arrays, and end to end with real workers (the reported 2x
sum, cold, warm and after every worker is replaced).
"""
from __future__ import annotations

import os
import tempfile
import threading

import awkward as ak
import numpy as np
import pytest
import uproot
from hypothesis import given, settings, strategies as st

from rhtc import context
from rhtc.client import make_chunks, remote_map
from rhtc.client.data.openfiles import close_files
from rhtc.client.errors import RemoteError
from rhtc.errors import ReadOnlyArrayError
from rhtc.worker.cache import BranchCache
from rhtc.worker.disk import DiskTier
from rhtc.worker.frozen import buffers
from tests.conftest import NANOAOD, needs_nanoaod

DY = str(NANOAOD / "nano_dy.root")


# -- the routes: what an analyst types to get a numpy array out of a chunk ---------------------

def _nonempty(events):
    return next(e for e in events if len(e))


ROUTES = {
    "np.asarray(awkward flat)": lambda c: np.asarray(c.arrays(["MET_pt"], how=dict)["MET_pt"]),
    "ak.to_numpy(awkward flat)": lambda c: ak.to_numpy(c.arrays(["MET_pt"], how=dict)["MET_pt"]),
    "ak.flatten(awkward jagged)": lambda c: np.asarray(ak.flatten(c.arrays(["Muon_pt"], how=dict)["Muon_pt"])),
    "ak.flatten(a record's field)": lambda c: ak.to_numpy(ak.flatten(c.arrays(["Muon_pt", "MET_pt"]).Muon_pt)),
    "offsets of awkward jagged": lambda c: np.asarray(c.arrays(["Muon_pt"], how=dict)["Muon_pt"].layout.offsets),
    "content of awkward jagged": lambda c: c.arrays(["Muon_pt"], how=tuple)[0].layout.content.data,
    "numpy flat": lambda c: c.arrays(["MET_pt"], library="np")["MET_pt"],
    "numpy flat .base": lambda c: c.arrays(["MET_pt"], library="np", how=list)[0].base,
    "element of jagged numpy": lambda c: _nonempty(c.arrays(["Muon_pt"], library="np")["Muon_pt"]),
    "element of jagged numpy .base": lambda c: _nonempty(c.arrays(["Muon_pt"], library="np")["Muon_pt"]).base,
    "jagged numpy": lambda c: c.arrays(["Muon_pt"], library="np")["Muon_pt"],
}


def flip(x, how: str) -> None:
    if how == "flags":
        x.flags.writeable = True
    else:
        x.setflags(write=True)


def write(x) -> None:
    if x.dtype == object:
        x[0] = np.zeros(3)
    else:
        x *= 2


def values(x):
    """``x``'s values as lists (an object array's elements too)."""
    if isinstance(x, np.ndarray) and x.dtype == object:
        return [values(e) for e in x]
    return x.tolist()


def plain(route: str, chunk):
    """What the route gives outside a worker (uproot, no cache), as lists."""
    saved, context.current = context.current, None
    try:
        return values(ROUTES[route.removesuffix(" .base")](chunk))
    finally:
        context.current = saved


class Node:
    """A worker's caches in this process: a RAM cache over a disk tier in ``directory``."""

    def __init__(self, directory: str):
        self.directory = directory
        self.disk = DiskTier(directory, size_limit=10 ** 8, min_free=0)
        self.ctx = context.TaskContext(worker="w-test", cache=BranchCache(10 ** 8, disk=self.disk))

    def read(self, route: str, chunk):
        saved, context.current = context.current, self.ctx
        try:
            self.ctx.begin_task()
            return ROUTES[route](chunk)
        finally:
            context.current = saved

    def replaced(self) -> "Node":
        """A worker replacing this one on the node: its RAM is gone, its files not open."""
        assert self.disk.flush(30)
        self.disk.close()
        close_files()
        return Node(self.directory)


@pytest.fixture
def chunk():
    close_files()                         # every test begins cold: the file not open here
    yield make_chunks(DY, step=20)[1]
    close_files()


@needs_nanoaod
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_no_route_makes_a_served_array_writable_again_on_any_tier(route, chunk, tmp_path):
    """A cold read (the one that fills the caches), a warm one (RAM), one from the node's
    disk tier by a worker that replaced this one: the flip is refused both ways, so is
    the write, and every later read gives the values uproot reads."""
    node = Node(str(tmp_path / "tier"))
    want = plain(route, chunk)
    base = route.endswith(".base")        # (a base may hold more than the route's values)
    for tier in ("cold", "warm", "disk"):
        if tier == "disk":
            node = node.replaced()
        x = node.read(route, chunk)
        if base:
            assert values(node.read(route.removesuffix(" .base"), chunk)) == plain(route, chunk), tier
            want = values(x) if tier == "cold" else want
        assert values(x) == want and not x.flags.writeable, tier
        for how in ("flags", "setflags"):
            with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
                flip(x, how)
        with pytest.raises(ValueError, match="read-only"):
            write(x)
        assert values(node.read(route, chunk)) == want, tier
    assert values(node.replaced().read(route, chunk)) == want, "the disk tier, at the end"


@needs_nanoaod
def test_a_task_that_changes_its_own_copy_of_a_jagged_numpy_branch_changes_no_later_read(chunk, tmp_path):
    """The array of per-event references a task gets is its own (a copy of the cache's):
    made writable through ``.base`` and changed, it changes nothing that a later read gets."""
    node = Node(str(tmp_path / "tier"))
    want = plain("jagged numpy", chunk)
    for _ in ("cold", "warm"):
        mine = node.read("jagged numpy", chunk)
        mine.base.flags.writeable = True
        mine.base[:] = None
    assert values(node.read("jagged numpy", chunk)) == want


def test_the_disk_tier_is_written_from_the_cache_s_copy_not_from_what_the_reader_holds(tmp_path):
    """What was read (uproot's arrays, coffea's buffers) stays its reader's, who may make it
    writable (it owns it) and change it before the background writer has run: neither the
    RAM cache nor the entry written to the node's disk changes."""
    directory = str(tmp_path / "tier")
    disk = DiskTier(directory, size_limit=10 ** 8, min_free=0)
    gate, put = threading.Event(), disk.put
    disk.put = lambda key, value: put(key, value) if gate.wait(60) else False   # the writer waits here
    cache = BranchCache(10 ** 7, disk=disk)
    read = {"flat": np.arange(6.0), "jagged": ak.Array([[1.0, 2.0], [], [3.0]]),
            "int": np.arange(4, dtype=np.int32)}
    want = {k: v.tolist() for k, v in read.items()}
    view = cache.view("chunk-A", "v1")
    for key, value in read.items():
        view[key] = value                 # as uproot does with what it read from the file
    for value in read.values():           # the reader changes its own arrays
        data = value.layout.content.data if isinstance(value, ak.Array) else value
        data.flags.writeable = True
        data *= 3
    gate.set()
    assert disk.flush(30)
    disk.close()
    fresh = DiskTier(directory, size_limit=10 ** 8, min_free=0)
    assert {k: fresh.get(f"v1|{k}").tolist() for k in read} == want
    fresh.close()
    assert {k: cache.view("chunk-A", "v1").get(k).tolist() for k in read} == want
    for key in read:
        served = cache.view("chunk-A", "v1").get(key)
        with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
            (np.asarray(ak.flatten(served)) if isinstance(served, ak.Array) else served).flags.writeable = True


# -- a property: any array, any tier, any route ------------------------------------------------

DTYPES = st.sampled_from(["f4", "f8", "i1", "i4", "i8", "u2", "?", ">f8"])
FLAT = st.tuples(DTYPES, st.lists(st.integers(0, 100), max_size=12)).map(lambda t: np.array(t[1]).astype(t[0]))
JAGGED = st.lists(st.lists(st.integers(-50, 50), max_size=4), max_size=8).map(lambda x: ak.Array(x))
OPTION = st.lists(st.one_of(st.none(), st.floats(-1e3, 1e3)), max_size=8).map(lambda x: ak.Array(x))
RECORD = st.tuples(FLAT, JAGGED).map(lambda t: ak.zip({"x": ak.Array(t[0][:1]), "y": t[1][:1]}, depth_limit=1))
OBJECTS = st.lists(FLAT, max_size=6).map(lambda xs: np.array(xs + [None], dtype=object)[:-1])
VALUES = st.one_of(FLAT, JAGGED, OPTION, RECORD, OBJECTS, FLAT.map(lambda a: a.reshape(1, -1)))


def served_arrays(x):
    """The numpy arrays that make up a served value: an awkward array's buffers, a numpy
    array, an object array and its elements, and the bases of each (not an object array's
    base: the task's own copy of the references)."""
    if isinstance(x, ak.Array):
        return [b for a in buffers(x) for b in bases(a)]
    if x.dtype == object:
        return [x] + [b for e in x.reshape(-1) if isinstance(e, np.ndarray) for b in bases(e)]
    return bases(x)


def reachable(x):
    """Every numpy array a task can reach from ``x`` by typing attributes and conversions."""
    out = served_arrays(x) + (bases(x)[1:] if isinstance(x, np.ndarray) and x.dtype == object else [])
    if isinstance(x, ak.Array):
        for conversion in (lambda: ak.flatten(x, axis=None), lambda: ak.to_numpy(x)):
            try:
                out += bases(np.asarray(conversion()))
            except Exception:             # not rectangular, or has missing values: no such route
                pass
    return out


def scribble(a) -> None:
    """Write over all of ``a``."""
    if a.dtype == object:
        a.fill(None)
    elif a.ndim and a.flags.c_contiguous:
        a.view(np.uint8)[...] = 0xA5
    else:
        a[...] = 0


def bases(a):
    """``a`` and the numpy arrays of its ``base`` chain."""
    out = [a]
    while isinstance(out[-1].base, np.ndarray):
        out.append(out[-1].base)
    return out


@pytest.fixture(scope="module")
def shared_tier():
    """One disk tier (one writer thread) for every example; each writes its own key."""
    with tempfile.TemporaryDirectory() as d:
        disk = DiskTier(os.path.join(d, "tier"), size_limit=10 ** 8, min_free=0)
        yield disk
        disk.flush(30)
        disk.close()


KEYS = iter(range(10 ** 9))


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(value=VALUES, tier=st.sampled_from(["cold", "warm", "disk"]), how=st.sampled_from(["flags", "setflags"]))
def test_whatever_is_served_nothing_reachable_from_it_can_change_a_later_read(shared_tier, value, tier, how):
    """Property: over numpy and awkward arrays of any dtype, jaggedness, options, records
    and object arrays, served by any tier: the served arrays' buffers (and their bases)
    refuse the flip; an array a conversion made anew may be the task's own, but nothing
    a task writes after any flip it is let do changes what a later read gives."""
    want, key = values(value), f"k{next(KEYS)}"
    cache = BranchCache(10 ** 7, disk=shared_tier)
    view = cache.view("chunk", "v1", serves_back=True)
    view[key] = value
    served = view.served(value) if tier == "cold" else view.get(key)
    if tier == "disk" and not (isinstance(value, np.ndarray) and value.dtype == object):
        assert shared_tier.flush(30)      # (object arrays are not kept on disk)
        reader = DiskTier(shared_tier.directory, 10 ** 8, min_free=0)
        served = BranchCache(10 ** 7, disk=reader).get(f"v1|{key}")
        reader.close()
    assert values(served) == want
    own = served_arrays(served)
    for a in own:
        with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
            flip(a, how)
    for a in reachable(served):
        try:
            flip(a, how)
        except ValueError:
            continue
        assert not any(a is b for b in own)
        scribble(a)
    assert values(view.get(key)) == want
    assert shared_tier.flush(30)
    reader = DiskTier(shared_tier.directory, 10 ** 8, min_free=0)
    stored = reader.get(f"v1|{key}")
    reader.close()
    assert stored is None or values(stored) == want


# -- end to end: real workers, the reported 2x ---------------------------------------------------

def flip_and_double_everything(chunk) -> list[str]:
    """Tries each route (the analyst who read "assignment destination is read-only"):
    returns those whose array could be made writable, and doubles them."""
    flipped = []
    for route in sorted(ROUTES):
        x = ROUTES[route](chunk)
        try:
            x.flags.writeable = True
        except ValueError:
            continue
        if x.dtype == object:
            for e in x:
                e.flags.writeable = True
                e *= 2
        else:
            x *= 2
        flipped.append(route)
    return flipped


def flip_met(chunk):
    x = np.asarray(chunk.arrays(["MET_pt"], how=dict)["MET_pt"])
    x.flags.writeable = True
    x *= 2


def sums(chunk) -> list[float]:
    met = chunk.arrays(["MET_pt", "Muon_pt"], how=dict)
    met_np = chunk.arrays(["MET_pt", "Muon_pt"], library="np")
    return [float(np.sum(met["MET_pt"])), float(ak.sum(met["Muon_pt"])), float(met_np["MET_pt"].sum()),
            float(sum(e.sum() for e in met_np["Muon_pt"]))]


@needs_nanoaod
def test_a_flip_changes_no_later_answer_cold_warm_nor_after_every_worker_is_replaced(broker, workers, tmp_path):
    env = {"RHTC_DISK_CACHE": str(tmp_path / "tier")}
    workers.start(1, env=env)
    chunks = make_chunks(DY, step=20)[:4]
    with uproot.open(DY) as f:
        want = []
        for c in chunks:
            a = f["Events"].arrays(["MET_pt", "Muon_pt"], entry_start=c.entry_start, entry_stop=c.entry_stop)
            m = float(np.sum(a.MET_pt))
            mu = float(ak.sum(a.Muon_pt))
            want.append([m, mu, m, mu])
    for run in ("cold", "warm", "after every worker is replaced"):
        if run.startswith("after"):
            workers.stop_all()            # a stopping worker writes what its disk tier has pending
            workers.start(1, env=env)
        flipped = remote_map(flip_and_double_everything, chunks, broker=broker, progress=False, timeout=120)
        got = remote_map(sums, chunks, broker=broker, progress=False, timeout=120)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=run)   # not 2x
        assert flipped == [[]] * len(chunks), run
        refused = remote_map(flip_met, chunks, broker=broker, progress=False, errors="return", timeout=120)
        for r in refused:
            assert isinstance(r, RemoteError) and isinstance(r.exception, ReadOnlyArrayError), (run, r)
            assert "'MET_pt'" in r.message and "writable" in r.message and "np.array(x)" in r.message, r.message
