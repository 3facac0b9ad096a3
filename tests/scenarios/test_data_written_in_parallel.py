"""Generated NanoAOD written by parallel processes is what one process writes: the same
seed gives the same events whichever way the files are written, the same parameters reuse
the files (a new seed rewrites them), event numbers continue across files; and the
compression benchmark, whose files (one per codec) are written in parallel processes,
reads the same events from every file.

Real parts: the writers' process pool (client/synthetic/writer.py, bench/compression.py),
files written here and read with uproot. One file at a time, in this process:
tests/unit/client/synthetic/test_dimuon.py."""
from __future__ import annotations

import os
import time

import awkward as ak
import pytest
import uproot

from rhtc.bench.compression import compression_benchmark
from rhtc.client.synthetic.dimuon import make_data

#: writes NanoAOD-schema files (seconds each): the full suite only
pytestmark = pytest.mark.heavy


def test_reuse_and_determinism(tmp_path):
    kwargs = dict(files=2, events=3_000, compression="ZSTD", progress=False)
    first = make_data(tmp_path / "a", seed=5, **kwargs)
    stamps = [os.stat(p).st_mtime_ns for p in first]
    time.sleep(0.01)
    again = make_data(tmp_path / "a", seed=5, **kwargs)
    assert again == first
    assert [os.stat(p).st_mtime_ns for p in again] == stamps, "same parameters must reuse files"

    def muons(path):
        with uproot.open(path) as file:
            return file["Events"].arrays(["Muon_pt", "event"])

    other = make_data(tmp_path / "b", seed=5, workers=1, **kwargs)
    assert ak.array_equal(muons(other[0]), muons(first[0]))  # parallel == serial, same seed
    changed = make_data(tmp_path / "a", seed=6, **kwargs)
    assert [os.stat(p).st_mtime_ns for p in changed] != stamps, "a new seed must rewrite"
    assert not ak.array_equal(muons(changed[0]).Muon_pt, muons(other[0]).Muon_pt)
    # event numbers continue across files
    assert muons(other[1]).event[0] == muons(other[0]).event[-1] + 1


def test_compression_benchmark_reads_the_same_events(tmp_path):
    result = compression_benchmark(tmp_path, events=3_000, repeats=1, progress=False)
    rows = {row["codec"]: row for row in result["rows"]}
    assert list(rows) == ["LZMA", "ZLIB", "LZ4", "ZSTD"]
    assert rows["LZMA"]["speed_vs_lzma"] == 1.0
    # same events in every file: identical uncompressed bytes, different compressed ones
    assert len({round(row["uncompressed_mb"], 9) for row in rows.values()}) == 1
    assert len({row["file_mb"] for row in rows.values()}) == 4
    assert rows["LZ4"]["file_mb"] > rows["LZMA"]["file_mb"]
    for row in rows.values():
        assert row["read_s"] > 0 and row["mhz"] == pytest.approx(3_000 / row["read_s"] / 1e6)
