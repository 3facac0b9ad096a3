"""``bench agc``'s breakdown of one chunk (bench/agcchunk.py) and its histogram check
(bench/agc.py): the file, the NanoEvents construction and the processing, cold and warm
(kept NanoEvents cost less than building them again), and two outputs compared histogram
by histogram. In this process, on AGC files generated here."""
from __future__ import annotations

import pytest

pytest.importorskip("coffea")
from coffea import processor  # noqa: E402

from tests.kits.coffea import iterative  # noqa: E402


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
