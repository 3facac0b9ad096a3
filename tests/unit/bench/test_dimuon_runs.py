"""``bench dimuon``'s guards: a peer that cannot start within its bound is reported in one
line and leaves no process behind (tests/scenarios/test_bench_peer_that_cannot_start.py);
figures reach the JSON as soon as they are measured, and the chunk size follows the workers."""
from __future__ import annotations

from rhtc.bench import results
from rhtc.bench.dimuon_runs import Report, auto_chunk_size, row


def test_chunk_size_follows_the_workers():
    for workers in (1, 2, 30, 150, 1000):
        step = auto_chunk_size(8_000_000, workers)
        chunks = -(-8_000_000 // step)
        assert chunks >= 3 * workers or step == 1
        assert step <= 500_000


def test_figures_are_saved_as_soon_as_measured(tmp_path, capsys):
    path = tmp_path / "b.json"
    report = Report(str(path), events=100)
    report.add("bare", "bare", {"cold_s": 2.0, "warm_s": 0.5}, 100)
    assert results.load(path)["bare"]["warm_s"] == 0.5
    report.add("dask", "dask (150)", {"error": "dask did not start within 360 s"}, 100)
    saved = results.load(path)
    assert saved["bare"]["cold_s"] == 2.0 and "did not start" in saved["dask"]["error"]
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("dask (150)") and out[-1].endswith("dask did not start within 360 s")
    assert "4.0x" in row("x", {"cold_s": 2.0, "warm_s": 0.5}, 100)
