"""The parts of tests/scenarios/test_a_warm_answer_is_the_cold_answer.py: the analysis functions the maps
run, the plain single-process uproot loop that says what they must return, the check that
two answers are the same, and a node of workers whose disk tier outlives them.

The analysis functions travel to the workers by value (this module is registered with
cloudpickle), so the workers need nothing of the tests. Each takes a chunk and reads it
with ``chunk.arrays(...)``: on a worker that is :class:`rhtc.Chunk` (through the worker's
caches), in the reference loop it is :class:`PlainChunk` (``tree.arrays(entry_start,
entry_stop)`` of a file opened with uproot, with no array cache).
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import awkward as ak
import hist
import numpy as np
import uproot

from rhtc import last_map, remote_map
from rhtc.broker.embedded import EmbeddedBroker
from rhtc.client import make_chunks
from rhtc.client.data.chunks import Chunk
from rhtc.processes import stop_processes
from tests.conftest import Workers
from tests.helpers import register_by_value

register_by_value(__name__)

RTOL = 1e-6          # float sums: equal up to the order of summation


# -- the analyses: copies changed in place, slicing, masks, combinations, histograms ------------

def _concat(per_event) -> np.ndarray:
    """The per-event arrays of a jagged ``library="np"`` branch, end to end."""
    return np.concatenate([np.zeros(0, np.float32), *per_event])


def doubled_muon_counts(chunk) -> int:
    """numpy, a copy changed in place (flat branch)."""
    x = np.array(chunk.arrays(["nMuon"], library="np")["nMuon"])
    x *= 2
    return int(x.sum())


def doubled_muon_pt(chunk) -> float:
    """numpy, a copy of a jagged branch (an object array) changed in place."""
    x = np.array(chunk.arrays(["Muon_pt"], library="np")["Muon_pt"])
    x *= 2
    return float(_concat(x).sum())


def shifted_flat_pt(chunk) -> float:
    """awkward, flattened, copied to numpy and changed in place."""
    pt = chunk.arrays(["Muon_pt"], how=dict)["Muon_pt"]
    flat = np.array(ak.flatten(pt))
    flat -= 1
    return float(flat.sum())


def pt_above_20(chunk) -> float:
    """awkward slicing with a mask."""
    pt = chunk.arrays(["Muon_pt"], how=dict)["Muon_pt"]
    return float(ak.sum(pt[pt > 20]))


def muon_counts(chunk) -> np.ndarray:
    """Counts (``ak.num``) and masks, as one integer array: events, muons, good muons,
    events with two good muons, good positive muons."""
    pt, eta, charge = chunk.arrays(["Muon_pt", "Muon_eta", "Muon_charge"], how=tuple)
    good = (pt > 20) & (abs(eta) < 2.4)
    return np.array([len(pt), ak.sum(ak.num(pt)), ak.sum(good), ak.sum(ak.num(pt[good]) >= 2),
                     ak.sum(charge[good] > 0)], dtype=np.int64)


def pair_mass(chunk) -> hist.Hist:
    """Combinations: the mass of every opposite-charge muon pair (a record array read with
    ``how=None``), histogrammed."""
    mu = chunk.arrays(["Muon_pt", "Muon_eta", "Muon_phi", "Muon_charge"])
    muons = ak.zip({"pt": mu.Muon_pt, "eta": mu.Muon_eta, "phi": mu.Muon_phi, "q": mu.Muon_charge})
    pairs = ak.combinations(muons, 2, fields=["a", "b"])
    pairs = pairs[pairs.a.q != pairs.b.q]
    a, b = pairs.a, pairs.b
    mass = np.sqrt(2 * a.pt * b.pt * (np.cosh(a.eta - b.eta) - np.cos(a.phi - b.phi)))
    h = hist.Hist(hist.axis.Regular(60, 0, 150, name="mass"))
    h.fill(mass=ak.flatten(mass))
    return h


def pt_hist(chunk) -> hist.Hist:
    """A histogram filled from a branch (counts)."""
    pt = chunk.arrays(["Muon_pt"], how=dict)["Muon_pt"]
    h = hist.Hist(hist.axis.Regular(40, 0, 200, name="pt"))
    h.fill(pt=ak.flatten(pt))
    return h


def eta_weighted_by_pt(chunk) -> hist.Hist:
    """A weighted histogram (sums of weights and their squares)."""
    eta, pt = chunk.arrays(["Muon_eta", "Muon_pt"], how=list)
    h = hist.Hist(hist.axis.Regular(24, -2.4, 2.4, name="eta"), storage=hist.storage.Weight())
    h.fill(eta=ak.flatten(eta), weight=ak.flatten(pt))
    return h


def first_muon_count(chunk) -> np.ndarray:
    """What the cache holds, returned as it is (a view of ``nMuon``): a reduction that
    adds in place must fold into a value of its own, never into this."""
    return chunk.arrays(["nMuon"], library="np")["nMuon"][:1]


#: name -> function; the names are what hypothesis draws (and prints)
ANALYSES: dict[str, Callable] = {f.__name__: f for f in (
    doubled_muon_counts, doubled_muon_pt, shifted_flat_pt, pt_above_20, muon_counts, pair_mass,
    pt_hist, eta_weighted_by_pt, first_muon_count)}
#: the analyses whose branches the disk tier keeps (not jagged ``library="np"``: object arrays)
ON_DISK = set(ANALYSES) - {"doubled_muon_pt"}


# -- the raw in-place idioms: writes into what the worker's cache serves -------------------------

def raw_muon_counts(chunk) -> int:
    x = chunk.arrays(["nMuon"], library="np")["nMuon"]
    x *= 2
    return int(x.sum())


def raw_muon_pt(chunk) -> float:
    x = chunk.arrays(["Muon_pt"], library="np")["Muon_pt"]
    x *= 2
    return float(_concat(x).sum())


def raw_flat_pt(chunk) -> float:
    pt = chunk.arrays(["Muon_pt"], how=dict)["Muon_pt"]
    flat = np.asarray(ak.flatten(pt))
    flat *= 2
    return float(flat.sum())


#: raw idiom -> the branch its error must name
RAW = {raw_muon_counts: "nMuon", raw_muon_pt: "Muon_pt", raw_flat_pt: "Muon_pt"}


# -- reductions -----------------------------------------------------------------------------------

def add_in_place(a, b):
    a += b
    return a


#: what hypothesis draws -> remote_map's ``reduce=``
REDUCERS: dict[str, Any] = {"none": None, "true": True, "operator.add": operator.add,
                            "in place": add_in_place}


# -- the reference: a plain single-process uproot loop ---------------------------------------------

@dataclasses.dataclass(frozen=True)
class PlainChunk:
    """A chunk read by uproot alone: ``tree.arrays(entry_start=, entry_stop=)``, no cache."""

    tree: Any
    entry_start: int
    entry_stop: int

    def arrays(self, branches, **kwargs):
        return self.tree.arrays(list(branches), entry_start=self.entry_start, entry_stop=self.entry_stop,
                                array_cache=None, **kwargs)


@functools.lru_cache(maxsize=None)
def _plain_tree(path: str, tree: str):
    """The TTree of ``path`` as uproot opens it, without an array cache (its metadata is
    parsed once per test session: the reads are what the reference is about)."""
    return uproot.open(path, array_cache=None, object_cache=None)[tree]


@functools.lru_cache(maxsize=None)
def _plain_result(name: str, path: str, tree: str, start: int, stop: int):
    return ANALYSES[name](PlainChunk(_plain_tree(path, tree), start, stop))


def expected(name: str, chunks: list[Chunk], reduce: str, originals: dict[str, str]):
    """What ``remote_map(ANALYSES[name], chunks, reduce=REDUCERS[reduce])`` must return, from
    the plain loop over the same chunks of the original files (``originals``: copy -> file);
    reduced with a ``+`` that makes new objects (the results are reused across examples)."""
    results = [_plain_result(name, originals.get(c.file, c.file), c.tree, c.entry_start, c.entry_stop)
               for c in chunks]
    if reduce == "none":
        return results
    return functools.reduce(operator.add, results)


# -- the same answer -----------------------------------------------------------------------------

def assert_same(got, want, what: str) -> None:
    """Integers, integer arrays and histogram counts bit for bit; floats, float arrays and
    sums of weights up to the order of summation (``RTOL``)."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{what}: {describe(got)} != {describe(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{what}, chunk {i}")
    elif isinstance(want, hist.Hist):
        assert isinstance(got, hist.Hist), f"{what}: a {type(got).__name__}, not a Hist"
        assert got.axes == want.axes, f"{what}: axes differ"
        if issubclass(want.storage_type, hist.storage.Weight):
            for field in ("value", "variance"):
                np.testing.assert_allclose(got.view(flow=True)[field], want.view(flow=True)[field],
                                           rtol=RTOL, atol=0, err_msg=f"{what}: {field}")
        else:
            np.testing.assert_array_equal(got.values(flow=True), want.values(flow=True),
                                          err_msg=f"{what}: counts")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype, \
            f"{what}: {describe(got)} != {describe(want)}"
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(got, want, err_msg=what)
        else:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=0, err_msg=what)
    elif isinstance(want, (int, np.integer)):
        assert isinstance(got, (int, np.integer)) and got == want, f"{what}: {describe(got)} != {want}"
    elif isinstance(want, (float, np.floating)):
        assert isinstance(got, (float, np.floating)), f"{what}: {describe(got)} != {want}"
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0, err_msg=what)
    else:
        raise TypeError(f"{what}: no comparison for {type(want).__name__}")


def describe(value) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:297] + "..."


# -- files: the real samples, generated NanoAOD, fresh copies ----------------------------------

@functools.lru_cache(maxsize=None)
def _original_chunks(path: str, step: int) -> tuple[Chunk, ...]:
    return tuple(make_chunks(path, step=step))


class Files:
    """The files the maps read (name -> path) and fresh copies of them: a copy is another
    version of its file (another inode), so nothing any worker cached of it applies, and the
    first map over it is cold; its chunks keep the original's UUID and entry ranges."""

    def __init__(self, paths: dict[str, str], scratch: Path):
        self.paths, self.scratch, self.copies = paths, scratch, 0
        self.originals: dict[str, str] = {}

    def chunks(self, names: list[str], step: int, pick: str, fresh: bool) -> list[Chunk]:
        chunks = []
        for name in names:
            path = self.paths[name]
            where = self.copy(path) if fresh else path
            chunks += [dataclasses.replace(c, file=where) for c in _original_chunks(path, step)]
        if pick == "every other":
            chunks = chunks[::2]
        elif pick == "reversed":
            chunks = chunks[::-1]
        return chunks

    def copy(self, path: str) -> str:
        self.copies += 1
        target = self.scratch / f"copy{self.copies}" / Path(path).name
        target.parent.mkdir(parents=True)
        shutil.copyfile(path, target)
        self.originals[str(target)] = path
        return str(target)


# -- a node: a broker and two workers sharing one disk tier ------------------------------------------

def _files(directory: Path) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every file under ``directory`` (one deleted meanwhile is left out)."""
    out = []
    for path in directory.rglob("*"):
        try:
            st = path.stat()
        except OSError:
            continue
        if path.is_file():
            out.append((str(path), st.st_size, st.st_mtime_ns))
    return sorted(out)


class Node:
    """A redis-server and two ``python -m rhtc.worker --disk-cache DIR`` processes on it (one
    node's tier), for a whole test module; :meth:`replace_all` replaces every worker by a new
    process on the same directory."""

    def __init__(self, tmp: Path, workers: int = 2):
        self.n = workers
        self.disk = tmp / "node-disk"
        self.broker = EmbeddedBroker().start()
        self.workers = Workers(self.broker.config, tmp)
        self.names = self.start()

    def start(self) -> list[str]:
        return self.workers.start(self.n, extra=("--disk-cache", str(self.disk)))

    def run(self, fn, args, **kwargs):
        """``remote_map`` on this node; returns (value, the map's task rows)."""
        value = remote_map(fn, args, broker=self.broker.config, progress=False, timeout=180, **kwargs)
        return value, last_map().record().tasks

    def settle(self, quiet: float = 0.5, timeout: float = 30.0) -> None:
        """Wait until the workers' background writes to the disk tier stop: its files (names,
        sizes, times) unchanged for ``quiet`` s. Read from outside, whatever the tier's layout:
        the test never opens the tier itself."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while True:
            state = _files(self.disk)
            now = time.monotonic()
            if state != last:
                last, since = state, now
            elif now - since >= quiet or now > deadline:
                return
            time.sleep(0.1)

    def replace_all(self) -> None:
        """Every worker stopped (SIGTERM, by pid) once its disk writes are in, and replaced
        by a new process (a new name) on the same directory: nothing is left in memory."""
        self.settle()
        stop_processes([self.workers.procs[name] for name in self.names])
        self.names = self.start()

    def stop(self) -> None:
        self.workers.stop_all()
        self.broker.stop()


# -- coffea: a processor that fills a histogram from the muons' pt ------------------------------

def muon_processor():
    """A coffea processor: a histogram of Muon pt per dataset, event and muon counts, a
    mask, and a numpy copy of the flattened pt changed in place (needs coffea)."""
    from coffea import processor

    class MuonPt(processor.ProcessorABC):
        def process(self, events):
            pt = events.Muon.pt
            h = hist.Hist(hist.axis.StrCategory([], growth=True, name="dataset"),
                          hist.axis.Regular(40, 0, 200, name="pt"))
            h.fill(dataset=events.metadata["dataset"], pt=ak.flatten(pt))
            shifted = np.array(ak.flatten(pt))
            shifted -= 1
            good = (pt > 20) & (abs(events.Muon.eta) < 2.4)
            return {"pt": h, "events": len(events), "muons": int(ak.sum(ak.num(pt))),
                    "good": int(ak.sum(good)), "shifted": float(shifted.sum())}

        def postprocess(self, accumulator):
            return accumulator

    return MuonPt()


def assert_same_output(got: dict, want: dict, what: str) -> None:
    """The processor's output: counts and the histogram bit for bit, the float sum to RTOL."""
    assert set(got) == set(want), f"{what}: keys {sorted(got)} != {sorted(want)}"
    for key in ("events", "muons", "good"):
        assert got[key] == want[key], f"{what}: {key} {got[key]} != {want[key]}"
    np.testing.assert_allclose(got["shifted"], want["shifted"], rtol=RTOL, atol=0, err_msg=f"{what}: shifted")
    assert sorted(got["pt"].axes["dataset"]) == sorted(want["pt"].axes["dataset"]), f"{what}: datasets"
    for d in want["pt"].axes["dataset"]:
        np.testing.assert_array_equal(got["pt"][d, :].values(flow=True), want["pt"][d, :].values(flow=True),
                                      err_msg=f"{what}: pt counts of {d}")


def raw_muon_processor():
    """A coffea processor that writes into the muons' pt in place, without a copy
    (``np.asarray(ak.flatten(events.Muon.pt)) *= 2``): what worker_cache serves must refuse it."""
    from coffea import processor

    class RawMuonPt(processor.ProcessorABC):
        def process(self, events):
            flat = np.asarray(ak.flatten(events.Muon.pt))
            flat *= 2
            return {"doubled": float(flat.sum()), "events": len(events)}

        def postprocess(self, accumulator):
            return accumulator

    return RawMuonPt()


# -- coffea: the AGC ttbar processor, telling whether its events were kept ------------------------

def agc_processor(systematics: bool = True):
    """The AGC ttbar processor (rhtc.examples.agc_ttbar), which also counts, under ``"served
    before"``, the items that had each item's kept NanoEvents before it (0 when they were
    built for it, and always 0 with coffea's own executors)."""
    from rhtc.examples.agc_ttbar import TtbarAnalysis

    class Ttbar(TtbarAnalysis):
        def process(self, events):
            out = super().process(events)
            kept = getattr(events.attrs["@events_factory"], "kept", None)
            out["served before"] = kept.items_served - 1 if kept is not None else 0
            return out

    return Ttbar(systematics)


def assert_same_agc(got: dict, want: dict, what: str) -> None:
    """The AGC output: entry, event and cutflow counts exact; every histogram slice's sums
    of weights and their variances to RTOL (they are added up in another order)."""
    assert got["entries"] == want["entries"], f"{what}: entry counts differ"
    assert got["nevents"] == want["nevents"] and got["cutflow"] == want["cutflow"], what
    for region in ("4j1b", "4j2b"):
        g, w = got["hist"][region], want["hist"][region]
        slices = {(p, v) for p in w.axes["process"] for v in w.axes["variation"]}
        assert slices == {(p, v) for p in g.axes["process"] for v in g.axes["variation"]}, f"{what}: {region}"
        for p, v in sorted(slices):
            for field in ("value", "variance"):
                np.testing.assert_allclose(g[:, p, v].view(flow=True)[field], w[:, p, v].view(flow=True)[field],
                                           rtol=RTOL, atol=0, err_msg=f"{what}: {region} {p} {v} {field}")
