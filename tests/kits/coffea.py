"""What the coffea tests share: a small NanoAOD written here (rewritten in place with its
UUID), processors that sum muons or meddle with their events, coffea's Runner around any
executor (ours with the worker cache by default, IterativeExecutor as the reference), and a
check that two outputs are the same.

Import it after ``pytest.importorskip("coffea")``: it needs coffea. The processors reach
workers by value (this module is registered with cloudpickle), so the workers need nothing
of the tests.

Example::

    pytest.importorskip("coffea")
    from tests.kits.coffea import MuonSums, assert_same_sums, iterative, run

    def test_it(nano):                       # the ``nano`` fixture: a file written here
        fileset = {"nano": [nano]}
        assert_same_sums(run(executor, fileset), iterative(fileset), "ours")
"""
from __future__ import annotations

import os
import uuid as uuidlib
import warnings

import awkward as ak
import numpy as np
import pytest
import uproot
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from rhtc.client.data.coffea_items import worker_cache
from tests.helpers import register_by_value

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


def count_processor():
    """A coffea processor counting events (its class made at each call)."""
    from coffea import processor

    class Count(processor.ProcessorABC):
        def process(self, events):
            return {"n": len(events)}

        def postprocess(self, accumulator):
            return accumulator
    return Count()


# -- running them and comparing what they give ---------------------------------------------------

def run(executor, fileset, make=MuonSums, chunksize: int = 700, cachestrategy=worker_cache, schema=NanoAODSchema,
        **options):
    runner = processor.Runner(executor=executor, schema=schema, chunksize=chunksize, cachestrategy=cachestrategy,
                              **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # NanoAODSchema's missing cross-references
        return runner(fileset, processor_instance=make(), treename="Events")


def iterative(fileset, make=MuonSums, chunksize: int = 700, **options):
    return run(processor.IterativeExecutor(status=False), fileset, make, chunksize, cachestrategy=None, **options)


def assert_same_sums(got: dict, want: dict, what: str) -> None:
    assert (got["muons"], got["events"]) == (want["muons"], want["events"]), what
    np.testing.assert_allclose(got["pt"], want["pt"], rtol=1e-9, err_msg=what)
    np.testing.assert_array_equal(got["hist"].values(flow=True), want["hist"].values(flow=True), err_msg=what)
