"""``bench scale`` at a CI size, so that it cannot rot: light workers, one map per cell,
every figure of the table printed and written, and a cell over the memory budget skipped."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from rhtc.bench import results, scale
from rhtc.bench.scale import scale_command

#: starts its own broker and light-worker processes: the full suite only
pytestmark = pytest.mark.heavy


def test_bench_scale_small_grid(tmp_path, monkeypatch):
    monkeypatch.setattr(scale, "IDLE_SECONDS", 2.0)     # (the bench reads whole idle cycles: 16 s)
    monkeypatch.setattr(scale, "SETTLE_SECONDS", 1.0)
    out = tmp_path / "scale.json"
    got = CliRunner().invoke(scale_command, ["--workers", "20", "--seconds", "0.2", "--sizes", "10kB,100kB,2MB",
                                             "--waves", "2", "--processes", "2", "--memory-budget", "30MB",
                                             "--json", str(out)])
    assert got.exit_code == 0, got.output
    data = results.load(out)
    (pool,) = data["pools"]
    assert pool["workers"] == 20 and pool["register_s"] > 0 and pool["redis_idle_share"] > 0
    ran = [c for c in data["cells"] if "skipped" not in c]
    skipped = [c for c in data["cells"] if "skipped" in c]
    assert [c["bytes"] for c in ran] == [10_000, 100_000] and [c["bytes"] for c in skipped] == [2_000_000]
    for c in ran:
        assert c["tasks"] == 40 and c["tasks_per_s"] > 0
        assert 0 < c["efficiency_wall"] <= c["efficiency"] <= 1
        assert 0 <= c["dispatch_ms_median"] <= c["dispatch_ms_p99"]
        assert c["ramp_ms"] > 0 and 0 <= c["steady_dispatch_ms_p99"] <= max(c["dispatch_ms_p99"], c["ramp_ms"])
        assert 0 <= c["first_task_ms_median"] <= c["first_task_ms_p99"] <= c["first_task_ms_max"] == c["ramp_ms"]
        assert c["workers_without_a_task"] == 0, "each of the 20 workers has 2 tasks of the map"
        assert c["redis_cpu_us_per_task"] > 0 and c["redis_peak_mb"] > 0
        assert c["client_cpu_share"] > 0 and abs(sum(c["client_where"].values()) - 1) < 1e-6
        assert c["last_result_to_return_ms"] >= 0 and c["result_wait_s_p99"] >= 0
        assert c["machine_busy_cores"] > 0 and c["light_workers_cores"] > 0
    assert "registered in" in got.output and "skipped: " in got.output
    assert "eff" in got.output.splitlines()[1]
    header = [k for k, line in enumerate(data["ceiling"]) if "broker tops out at" in line]
    assert "broker tops out at" in got.output and len(data["ceiling"]) == header[0] + 1 + 9
    assert all(row.endswith("cannot tell") for row in data["ceiling"][-9:]), "one task duration: no ceiling"
    again = CliRunner().invoke(scale_command, ["--ceiling-of", str(out)])
    assert again.exit_code == 0 and again.output.splitlines() == data["ceiling"]
