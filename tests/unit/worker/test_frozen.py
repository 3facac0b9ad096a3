"""What the worker's caches hand a task (worker/frozen.py): arrays the task can neither
write nor make writable again, on any tier, so that no task changes what a later one reads.

A warm answer is the cold answer. A task that writes into what it was served (``x *= 2``,
``np.add(x, 1, out=x)``, a write through ``np.asarray``) meets "read-only"; it gets its own
awkward wrapper over the cache's read-only buffers; uproot storing back what it got keeps
the cache's value.

``x.flags.writeable = True`` (or ``x.setflags(write=True)``) is what every search answers to
numpy's "assignment destination is read-only", so analysts who meet our
:class:`ReadOnlyArrayError` type it. numpy allows it for an array that owns its memory, or
whose base does: the cache used to keep the very arrays uproot read, so a flip on
``np.asarray`` of an awkward array, on ``ak.flatten`` of a jagged one, on an element of a
jagged ``library="np"`` branch or on any array of a cold read succeeded, the write changed
what later tasks read (2x), and reached the node's disk tier, written in the background
from the same memory.

Each route an analyst may take to a numpy array (tests/kits/readonly.py), on a cold read, a
warm read (RAM) and a read from the node's disk tier (a new cache over the same directory:
a replaced worker), is refused and leaves later reads as they were; the disk tier is
written from the cache's own copy even when the holder of what was read changes it before
the writer runs (the writer held at a gate: no timing). In this process, with real uproot
reads of the real NanoAOD sample and properties over random arrays; the same end to end,
with real workers (the reported 2x sum, cold, warm and after every worker is replaced), is
tests/scenarios/test_no_task_changes_what_a_cache_serves.py.
"""
from __future__ import annotations

import functools
import os
import tempfile
import threading

import awkward as ak
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rhtc import context
from rhtc.client import make_chunks
from rhtc.client.data.openfiles import close_files
from rhtc.worker.cache import BranchCache
from rhtc.worker.disk import DiskTier
from rhtc.worker.frozen import buffers
from tests.conftest import needs_nanoaod
from tests.kits.nanoaod import DY
from tests.kits.readonly import ROUTES


# -- the branch cache hands out read-only arrays ---------------------------------------------

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


# -- no route makes a served array writable again, on any tier --------------------------------

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


@functools.cache
def plain(route: str, chunk):
    """What the route gives outside a worker (uproot, no cache), as lists (read once a route:
    each read opens the 1,500-branch file again, a third of a second)."""
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


@functools.cache
def _second_chunk():
    """The chunk the tests read (made once: making it opens and reads the file's header)."""
    return make_chunks(DY, step=20)[1]


@pytest.fixture
def chunk():
    close_files()                         # every test begins cold: the file not open here
    yield _second_chunk()
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
