"""A warm answer is the cold answer, end to end: no task changes what a cache serves later,
on any tier, and a merge on the workers folds into a value of its own.

Without that, a task that doubles ``MET_pt`` in place (``x *= 2``) changes what the next
task reads from the worker's memory and from the node's disk tier: the warm rerun returns
what the cold run wrote (2x). And since the cache used to keep the very arrays uproot read,
the flip that analysts type after numpy's "assignment destination is read-only"
(``x.flags.writeable = True``) succeeded on a cold read, and the write changed what later
tasks read (the reported 2x sum). Here a write fails alike on every tier, cold, warm and
after every worker is replaced, naming the branch and saying how to copy (``np.array(x)``);
a flip is refused on every route; a reduction that adds in place (``a += b``) gives the
plain loop's answer on every run, merged on the workers or on the client.

Real parts: a real redis-server, real workers reading the real NanoAOD sample through
uproot, with the node's disk tier, so that every tier (the file, RAM, the disk, a chunk
served without its file) hands out the arrays of one run. The same in this process, route
by route and as properties: tests/unit/worker/test_frozen.py."""
from __future__ import annotations

import time

import awkward as ak
import numpy as np
import pytest
import uproot

from rhtc.client import make_chunks, remote_map
from rhtc.client.errors import RemoteError
from rhtc.errors import ReadOnlyArrayError
from tests.conftest import needs_nanoaod
from tests.kits.nanoaod import DY
from tests.kits.readonly import ROUTES, add_in_place


# -- an in-place write or reduce, on every tier ------------------------------------------------

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


# -- a flip: the reported 2x ------------------------------------------------------------------

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
