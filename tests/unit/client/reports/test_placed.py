"""What a warm map placed where (client/reports/placed.py), from its own run record: chunks and
bytes per worker and per node (the bytes of every tier counted once, failed tasks not at all),
the chunks no live worker holds afterwards named, and the text ``rhtc warm`` prints saying
what the next run reads. The warm map on real workers:
tests/scenarios/test_warm_fills_a_new_pool_from_a_run_record.py."""
from __future__ import annotations

import json

import pytest

from rhtc.client.reports.placed import WarmSummary, size
from rhtc.client.reports.record import RunRecord


def record(*tasks: dict) -> RunRecord:
    rec = RunRecord(map_id="w1", function="warm", start=10.0, end=13.5, n_tasks=len(tasks))
    for i, t in enumerate(tasks):
        rec.add_task({"index": i, "start": 0, "stop": 1, **t})
    return rec


REC = record({"worker": "n1-1", "host": "n1", "bytes_file": 3_000_000},
             {"worker": "n1-1", "host": "n1", "bytes_disk": 1_000_000, "bytes_cache": 500},
             {"worker": "n1-2", "host": "n1", "bytes_file": 2_000},
             {"worker": "n2-1", "host": "n2", "bytes_cache": 7},
             {"worker": "n2-1", "host": "n2", "bytes_file": 10**9, "error": "OSError: gone"})
KEYS = ["k0", "k1", "k2", "k3", "k4"]


def test_chunks_and_bytes_are_summed_per_worker_and_node_failed_tasks_left_out():
    s = WarmSummary.of(REC, "map ab (dimuon)", KEYS, held=dict.fromkeys(KEYS, "n1-1"))
    assert (s.chunks, s.bytes_file, s.bytes_disk, s.bytes_cache) == (4, 3_002_000, 1_000_000, 507)
    assert s.bytes == s.bytes_file + s.bytes_disk + s.bytes_cache
    assert s.workers == {"n1-1": {"host": "n1", "chunks": 2, "bytes": 4_000_500},
                         "n1-2": {"host": "n1", "chunks": 1, "bytes": 2_000},
                         "n2-1": {"host": "n2", "chunks": 1, "bytes": 7}}
    assert s.nodes == {"n1": {"workers": 2, "chunks": 3, "bytes": 4_002_500},
                       "n2": {"workers": 1, "chunks": 1, "bytes": 7}}
    assert s.seconds == 3.5 and s.map_id == "w1" and s.not_held == []
    assert json.loads(json.dumps(s.to_dict()))["nodes"]["n2"]["bytes"] == 7


def test_chunks_no_live_worker_holds_are_named_and_the_text_says_where_they_will_be_read():
    s = WarmSummary.of(REC, "map ab (dimuon)", KEYS, held={"k0": "n1-1", "k2": "n1-2"})
    assert s.not_held == ["k1", "k3", "k4"]
    text = str(s)
    assert "3 chunks (e.g. k1) are held by no live worker now" in text and "reads nothing" not in text


def test_the_text_says_every_chunk_is_held_only_when_nothing_failed():
    held = dict.fromkeys(KEYS, "n1-1")
    assert str(WarmSummary.of(REC, "src", KEYS, held)).endswith("the next run of the analysis reads nothing from the files")
    failed = str(WarmSummary.of(REC, "src", KEYS, held, failed=["a.root: gone"], notes=["an older record"]))
    assert "FAILED a.root: gone" in failed and "note: an older record" in failed and "reads nothing" not in failed


def test_the_text_has_a_line_per_worker_and_per_node():
    lines = str(WarmSummary.of(REC, "map ab (dimuon)", KEYS, dict.fromkeys(KEYS, "x"))).splitlines()
    assert lines[0] == ("warmed 4 chunks of map ab (dimuon) in 3.5 s (map w1): 4.0 MB (3.0 MB from the files, "
                        "1.0 MB from the nodes' disk tiers, 507 B already in memory)")
    assert lines[1].split() == ["worker", "node", "chunks", "bytes"]
    assert [line.split()[:3] for line in lines[2:5]] == [["n1-1", "n1", "2"], ["n1-2", "n1", "1"], ["n2-1", "n2", "1"]]
    assert lines[5:7] == ["  node n1: 2 workers, 3 chunks, 4.0 MB", "  node n2: 1 worker, 1 chunk, 7 B"]


def test_an_empty_warm_says_so_without_a_table():
    s = WarmSummary.of(record(), "src", [], {})
    assert str(s).splitlines() == ["warmed 0 chunks of src in 3.5 s (map w1): 0 B (0 B from the files, 0 B from "
                                   "the nodes' disk tiers, 0 B already in memory)"]


@pytest.mark.parametrize("n, text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (1234, "1.2 kB"),
                                     (5.6e9, "5.6 GB"), (2e15, "2000.0 TB")])
def test_bytes_in_words(n, text):
    assert size(n) == text
