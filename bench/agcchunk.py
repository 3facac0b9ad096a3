"""``bench agc``'s breakdown of one AGC chunk, cold and warm: where an item's time goes.

Cold, as coffea's own executors run every item (:func:`cold_breakdown`): opening the file
and parsing its tree's metadata, reading and decompressing the branches the analysis
reads, building NanoEvents, and the processing with every buffer already in memory.

Warm, as one of our workers runs a rerun's item (:func:`warm_breakdown`): the item goes
through what a worker's task process runs for it (``_RunItem``, with a worker's context and
branch cache, in this process), once cold (after an item of another file, as on a worker
mid-run: the tree's base form is kept from that file), then three times warm. Marks
inside coffea's own per-item function split it: coffea asks for the cache strategy
(``worker_cache``) once the file is open, just before it builds NanoEvents, and the
processor's ``process`` starts once they are built. So a warm item is: the file (kept open,
checked against the file as it is now), NanoEvents (kept on the worker, or built again
from the cached buffers as before they were kept), the processing (every buffer from the
worker's cache) and the rest (coffea's bookkeeping, ours). Medians of the warm runs.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from typing import Any, Callable


def cold_breakdown(item, systematics: bool) -> dict:
    """For one WorkItem, in seconds: opening the file and its tree's metadata (every
    coffea executor does it for every item), reading and decompressing the branches the
    analysis reads, building NanoEvents, and processing with every buffer already in memory."""
    import uproot
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory
    from .agcgen import ANALYSIS_BRANCHES
    from ..examples.agc_ttbar import TtbarAnalysis
    meta = dict(item.usermeta or {}, entrystart=item.entrystart, entrystop=item.entrystop,
                fileuuid="one-chunk")
    proc, cache, out, runs = TtbarAnalysis(systematics), {}, {}, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(4):
            t0 = time.perf_counter()
            with uproot.open(item.filename) as f:
                tree = f[item.treename]
                t1 = time.perf_counter()
                if k == 0:
                    tree.arrays(list(ANALYSIS_BRANCHES), entry_start=item.entrystart,
                                entry_stop=item.entrystop)
                t2 = time.perf_counter()
                events = NanoEventsFactory.from_root(
                    file=f, treepath=item.treename, schemaclass=NanoAODSchema, metadata=meta, mode="virtual",
                    entry_start=item.entrystart, entry_stop=item.entrystop, buffer_cache=cache).events()
                t3 = time.perf_counter()
                proc.process(events)
                t4 = time.perf_counter()
            if k == 0:
                out.update(open_s=t1 - t0, read_decompress_s=t2 - t1, nanoevents_s=t3 - t2,
                           cold_process_s=t4 - t3)
            else:
                runs.append(t4 - t3)
    out["processing_s"] = statistics.median(runs)       # buffers in memory: the processing alone
    out["events"] = item.entrystop - item.entrystart
    return out


@dataclasses.dataclass
class _Marks:
    """perf_counter marks inside one item."""

    times: dict = dataclasses.field(default_factory=dict)

    def mark(self, name: str) -> None:
        self.times.setdefault(name, time.perf_counter())


def _timing_cache(marks: _Marks) -> Callable:
    """A cache strategy: the worker's cache, marking when coffea asks for it (the file is
    open; NanoEvents are built next)."""
    from ..client.data.coffea_items import worker_cache

    def strategy():
        marks.mark("nanoevents")
        return worker_cache()
    return strategy


def _timed_processor(marks: _Marks, systematics: bool):
    from ..examples.agc_ttbar import TtbarAnalysis

    class Timed(TtbarAnalysis):
        def process(self, events):
            marks.mark("process")
            try:
                return super().process(events)
            finally:
                marks.mark("processed")
    return Timed(systematics)


def warm_breakdown(item, systematics: bool, keep_events: bool = True, runs: int = 3, before=None) -> dict:
    """One WorkItem through what a worker's task process runs for it, in this process with
    a worker's context and branch cache: once cold (after the item ``before``, of another
    file, when given), then ``runs`` times warm; the warm phases' medians in seconds, and
    the cold item's under ``"cold"`` (``keep_events=False``: NanoEvents built again for
    every item, as before they were kept)."""
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema
    from coffea.processor.executor import ExecutorBase
    from rhtc import context
    from ..client.data.coffea_items import CoffeaTask, _RunItem, routing_key
    from ..client.data.openfiles import close_files
    from ..worker.cache import BranchCache

    marks = _Marks()

    @dataclasses.dataclass
    class OnAWorker(ExecutorBase):
        def __call__(self, items, function, accumulator):
            run = _RunItem(function, keep_events=keep_events)
            out = accumulator
            for one in items:
                context.current.begin_task()
                marks.mark("start")
                out = run(CoffeaTask(one, routing_key(one)))[0]
                marks.mark("end")
            return out, 0

    saved = context.current
    close_files()
    context.current = context.TaskContext(worker="bench", cache=BranchCache(4 << 30))
    phases: dict[str, list[float]] = {}
    cold: dict[str, float] = {}
    try:
        for k in range(-1 if before is not None else 0, runs + 1):
            marks.times.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                processor.Runner(executor=OnAWorker(), schema=NanoAODSchema, cachestrategy=_timing_cache(marks),
                                 processor_compression=None)(
                    [item if k >= 0 else before], processor_instance=_timed_processor(marks, systematics))
            t = marks.times
            for name, (a, b) in {"file_s": ("start", "nanoevents"), "nanoevents_s": ("nanoevents", "process"),
                                 "processing_s": ("process", "processed"), "rest_s": ("processed", "end"),
                                 "item_s": ("start", "end")}.items():
                if k == 0:
                    cold[name] = t[b] - t[a]
                elif k > 0:
                    phases.setdefault(name, []).append(t[b] - t[a])
    finally:
        context.current = saved
        close_files()
    out: dict[str, Any] = {name: statistics.median(v) for name, v in phases.items()}
    out["events"], out["cold"] = item.entrystop - item.entrystart, cold
    out["cold_after_another_file"] = before is not None
    return out


def one_chunk(item, systematics: bool, before=None) -> dict:
    """The cold breakdown, and the warm one with NanoEvents kept and built again (each
    after the item ``before``, of another file, when given)."""
    return {"cold": cold_breakdown(item, systematics), "warm": warm_breakdown(item, systematics, before=before),
            "warm_built_again": warm_breakdown(item, systematics, keep_events=False, before=before)}


def describe(chunk_name: str, t: dict, branches: int) -> list[str]:
    """The breakdown in words: cold as coffea's executors run it, warm on our worker, cold on our worker."""
    c, w, b = t["cold"], t["warm"], t["warm_built_again"]
    o, after = w["cold"], w["cold_after_another_file"]
    return [
        f"one chunk ({c['events']:,} events of {chunk_name}), cold, as coffea's executors run every item: open file "
        f"+ tree metadata {c['open_s']:.3f} s, read+decompress its {branches} branches {c['read_decompress_s']:.3f} s, "
        f"NanoEvents construction {c['nanoevents_s']:.3f} s, processing {c['processing_s']:.3f} s (processing with "
        f"the lazy reads: {c['cold_process_s']:.3f} s)",
        f"the same chunk warm, as our worker runs it: file kept open and checked {w['file_s']:.4f} s, NanoEvents "
        f"kept {w['nanoevents_s']:.4f} s (built again from the cached buffers, as before: {b['nanoevents_s']:.3f} s), "
        f"processing from the worker's cache {w['processing_s']:.3f} s, the rest {w['rest_s']:.4f} s; the item "
        f"{w['item_s']:.3f} s ({b['item_s']:.3f} s with NanoEvents built again)",
        f"the same chunk cold on our worker{', after an item of another file' if after else ''}: file opened, "
        f"tree metadata parsed and kept {o['file_s']:.3f} s, NanoEvents built "
        f"{'from the base form kept from that file ' if after else ''}{o['nanoevents_s']:.3f} s, processing "
        f"with the reads {o['processing_s']:.3f} s, the rest {o['rest_s']:.4f} s; the item {o['item_s']:.3f} s",
    ]
