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
    assert any(line.startswith("times in ms; wall eff") for line in got.output.splitlines()), "the legend"
    assert "the machine (own): " in got.output, "what the figures owe to the rest of the machine"
    header = [k for k, line in enumerate(data["ceiling"]) if "broker tops out at" in line]
    assert "broker tops out at" in got.output and len(data["ceiling"]) == header[0] + 1 + 9
    assert all(row.endswith("cannot tell") for row in data["ceiling"][-9:]), "one task duration: no ceiling"
    again = CliRunner().invoke(scale_command, ["--ceiling-of", str(out)])
    assert again.exit_code == 0 and again.output.splitlines() == data["ceiling"]


def test_the_ramp_in_its_own_cpu_group_and_without_beside_other_work(tmp_path, monkeypatch):
    """``--cpu-group both --busy 1``: the grid runs once with the bench in a cpu group of its
    own and once as any process, beside a busy process the bench starts and stops; both rows
    of each cell, what each owed to the machine, and the side-by-side lines are in the
    output and the JSON (under the series asked for)."""
    import psutil
    from rhtc.bench import busy as busy_module, priority
    monkeypatch.setattr(scale, "IDLE_SECONDS", 1.0)
    monkeypatch.setattr(scale, "SETTLE_SECONDS", 0.5)
    started = []
    real = busy_module.busy_processes

    def watched(n):
        cm = real(n)

        class Watch:
            def __enter__(self):
                pids = cm.__enter__()
                started.extend(pids)
                return pids

            def __exit__(self, *exc):
                return cm.__exit__(*exc)
        return Watch()
    monkeypatch.setattr(scale, "busy_processes", watched)
    out = tmp_path / "ramp.json"
    got = CliRunner().invoke(scale_command, ["--workers", "10", "--seconds", "0.1", "--sizes", "10kB", "--waves", "2",
                                             "--processes", "2", "--cpu-group", "both", "--busy", "1",
                                             "--series", "scale, a test", "--json", str(out)])
    assert got.exit_code == 0, got.output
    doc = results.read(out)
    assert doc["series"] == "scale, a test"
    data = doc["figures"]
    assert [c["cpu_group"] for c in data["cells"]] == ["own", "none"]
    assert [p["cpu_group"] for p in data["pools"]] == ["own", "none"]
    assert all(c["tasks"] == 20 and c["workers_without_a_task"] == 0 for c in data["cells"])
    own, none = data["machine_share"]["own"], data["machine_share"]["none"]
    writable = __import__("os").access(f"{priority.ROOT}/cgroup.procs", __import__("os").W_OK)
    assert ("cpu group of its own" in own) == writable and "not asked for" in none
    assert data["busy_processes"] == 1 and len(started) == 1
    assert not psutil.pid_exists(started[0]) or psutil.Process(started[0]).status() == psutil.STATUS_ZOMBIE
    lines = got.output.splitlines()
    assert data["groups_compared"] == scale.group_lines(data["cells"]) and all(x in lines for x in data["groups_compared"])
    assert "1 other busy process(es) on the machine meanwhile (--busy)" in got.output
    assert not [d for d in __import__("os").listdir(priority.ROOT) if d.startswith(priority.PREFIX)] if writable else True
