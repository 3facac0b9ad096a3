"""Tests of the run record (client.reports.record) and the timeline numbers and plot (client.reports.timeline).

Expected efficiencies are worked out by hand in each test from the task times.
"""
from __future__ import annotations

import bisect
import heapq
import json
import random
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rhtc.client.reports.record import RunRecord, TaskRecord, short_error
from rhtc.client.reports.timeline import efficiency, plot_timeline, timeline_command

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_record(tasks: list[tuple[str, float, float]], start: float, end: float, **extra) -> RunRecord:
    """A record from (worker, start, stop) triples; ``extra`` is merged into every task."""
    rec = RunRecord(map_id="test", function="f", start=start, end=end, n_tasks=len(tasks))
    for index, (worker, t_start, t_stop) in enumerate(tasks):
        rec.add_task({"index": index, "worker": worker, "start": t_start, "stop": t_stop, **extra})
    rec.end = end
    return rec


def synthetic_record(n_workers: int = 150, n_tasks: int = 10_000, seed: int = 1,
                     metrics: bool = True) -> RunRecord:
    """A plausible big run: workers join over the first seconds, each takes the next chunk
    when free; cache hits are fast, file reads slow, a few tasks fail, a few workers
    are slow, and CPU samples every 2 s say 95% when busy and ~3% when idle."""
    rng = random.Random(seed)
    t0 = 1_700_000_000.0
    names = [f"node{w // 8:02d}-{4000 + w}" for w in range(n_workers)]
    slow = set(rng.sample(names, max(1, n_workers // 30)))
    free = [(t0 + 1.0 + rng.expovariate(1 / 8.0), name) for name in names]
    heapq.heapify(free)
    rec = RunRecord(map_id="%032x" % rng.getrandbits(128), function="dimuon", start=t0,
                    n_tasks=n_tasks)
    for index in range(n_tasks):
        at, name = heapq.heappop(free)
        start = at + rng.uniform(0.005, 0.05)
        roll = rng.random()
        size = rng.randint(2_000_000, 8_000_000)
        if roll < 0.45:
            duration, cache, read, error = rng.lognormvariate(-0.4, 0.3), size, 0, None
        elif roll < 0.55:
            duration, cache, read, error = rng.lognormvariate(0.3, 0.3), size // 2, size // 2, None
        elif roll < 0.993:
            duration, cache, read, error = rng.lognormvariate(1.0, 0.45), 0, size, None
        else:
            duration, cache, read, error = rng.uniform(0.1, 1.0), 0, size // 3, "KeyError: 'Muon_pt'"
        if name in slow:
            duration *= 2.5
        host, pid = name.rsplit("-", 1)
        rec.add_task({"index": index, "worker": name, "host": host, "pid": int(pid),
                      "start": start, "stop": start + duration, "bytes_cache": cache,
                      "bytes_file": read, "error": error, "events": None if error else 250_000})
        heapq.heappush(free, (start + duration, name))
    rec.end = max(t.stop for t in rec.tasks) + 0.2
    if metrics:
        spans: dict[str, list[tuple[float, float]]] = {}
        for task in rec.tasks:
            spans.setdefault(task.worker, []).append((task.start, task.stop))
        for name, intervals in spans.items():
            intervals.sort()
            starts = [a for a, _ in intervals]
            t = intervals[0][0] - 0.5
            while t < rec.end:
                i = bisect.bisect_right(starts, t) - 1
                busy = i >= 0 and intervals[i][1] >= t
                cpu = rng.gauss(95, 3) if busy else abs(rng.gauss(3, 2))
                rec.add_metric({"t": t, "worker": name, "cpu": cpu, "rss": 400_000_000})
                t += 2.0
    return rec


# --- efficiency arithmetic -------------------------------------------------------------

def test_two_workers_by_hand():
    # map from 100 to 120 s.
    # a: [101,105] [105,110] [112,118] -> busy 4+5+6 = 15, span 118-101 = 17 (to end: 19)
    # b: [106,109] [115,120]           -> busy 3+5 = 8,    span 120-106 = 14 (to end: 14)
    rec = make_record([("a", 101, 105), ("a", 105, 110), ("a", 112, 118),
                       ("b", 106, 109), ("b", 115, 120)], start=100, end=120)
    eff = efficiency(rec)
    assert eff["per_worker"] == pytest.approx({"a": 15 / 17, "b": 8 / 14})
    assert eff["efficiency"] == pytest.approx(23 / 31)
    assert eff["efficiency_to_end"] == pytest.approx(23 / 33)
    assert eff["busy"] == pytest.approx(23) and eff["span"] == pytest.approx(31)
    assert eff["worker_min"] == pytest.approx(8 / 14)
    assert eff["worker_median"] == pytest.approx((15 / 17 + 8 / 14) / 2)
    assert eff["wall"] == pytest.approx(20)
    # 5 tasks: 95% means ceil(4.75) = 5 tasks, i.e. the last one -> no tail
    assert eff["tail"] == pytest.approx(0.0)
    assert list(eff["per_worker"]) == ["a", "b"]  # ordered by first task start


def test_idle_before_first_and_after_last_task_counts_only_to_the_end():
    # late joins at 140 and works to the end; early finishes at 110 of 150: both have no
    # gaps between their tasks (100%), but to the map's end early idled 40 of 50 s
    rec = make_record([("early", 100, 110), ("late", 140, 150)], start=100, end=150)
    eff = efficiency(rec)
    assert eff["per_worker"] == pytest.approx({"early": 1.0, "late": 1.0})
    assert eff["efficiency"] == pytest.approx(1.0)
    assert eff["efficiency_to_end"] == pytest.approx(20 / 60)
    # a gap of 2 s between two tasks of 4 s: 8 / 10
    gap = make_record([("w", 0, 4), ("w", 6, 10)], start=0.0, end=10)
    assert efficiency(gap)["efficiency"] == pytest.approx(0.8)


def test_overlapping_tasks_are_merged():
    # w runs [0,10] [5,12] [2,3] [20,25] with map end 30: union = [0,12] + [20,25] = 17
    rec = make_record([("w", 0, 10), ("w", 5, 12), ("w", 2, 3), ("w", 20, 25)],
                      start=0.0, end=30)
    eff = efficiency(rec)
    assert eff["busy"] == pytest.approx(17)
    assert eff["per_worker"]["w"] == pytest.approx(17 / 25)
    assert eff["efficiency_to_end"] == pytest.approx(17 / 30)
    # touching intervals are not double counted either
    touching = make_record([("w", 0, 5), ("w", 5, 10)], start=0.0, end=10)
    assert efficiency(touching)["efficiency"] == pytest.approx(1.0)


def test_tail_is_time_from_95_to_100_percent_done():
    # 20 tasks stopping at 1..19 s and one straggler at 30 s: 95% of 20 = 19 tasks
    # are done at t=19, the last at t=30 -> tail 11 s
    tasks = [(f"w{i}", 0, i + 1) for i in range(19)] + [("slow", 0, 30)]
    eff = efficiency(make_record(tasks, start=0.0, end=30.5))
    assert eff["tail"] == pytest.approx(11.0)
    assert eff["tail_start"] == pytest.approx(19.0)
    # 21 tasks: ceil(19.95) = 20 done at t=20, last at 40 -> 20 s
    tasks = [(f"w{i}", 0, i + 1) for i in range(20)] + [("slow", 0, 40)]
    assert efficiency(make_record(tasks, start=0.0, end=40))["tail"] == pytest.approx(20.0)


def test_events_cache_and_errors():
    rec = RunRecord(start=10.0, end=20.0)
    rec.add_task({"index": 0, "worker": "a", "start": 10, "stop": 12, "events": 1000,
                  "bytes_cache": 300, "bytes_file": 0})
    rec.add_task({"index": 1, "worker": "b", "start": 11, "stop": 20, "events": 3000,
                  "bytes_cache": 0, "bytes_file": 100})
    rec.add_task({"index": 2, "worker": "a", "start": 12, "stop": 13, "error": "ValueError: x",
                  "bytes_file": 0})
    eff = efficiency(rec)
    assert eff["events"] == pytest.approx(4000)
    assert eff["events_per_s"] == pytest.approx(4000 / 10)
    assert eff["cache_hit"] == pytest.approx(300 / 400)
    assert eff["errors"] == 1
    assert [t.source for t in rec.tasks] == ["hit", "miss", "error"]


def test_no_events_or_bytes_give_none_and_empty_record_is_safe():
    eff = efficiency(make_record([("a", 0, 1)], start=0.0, end=1))
    assert eff["events_per_s"] is None and eff["cache_hit"] is None
    empty = efficiency(RunRecord(start=5.0, end=5.0))
    assert empty["efficiency"] == 0.0 and empty["per_worker"] == {} and empty["tail"] == 0.0


def test_summary_includes_counts_and_efficiency():
    rec = make_record([("a", 0, 5), ("b", 0, 10)], start=0.0, end=10)
    rec.n_tasks = 3
    summary = rec.summary()
    assert summary["n_tasks"] == 3 and summary["n_done"] == 2 and summary["n_workers"] == 2
    assert summary["efficiency"] == pytest.approx(1.0)
    assert summary["efficiency_to_end"] == pytest.approx(15 / 20)


# --- the record ------------------------------------------------------------------------

def test_add_task_tolerates_unknown_and_missing_keys():
    rec = RunRecord(start=0.0)
    tb = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad chunk\n"
    rec.add_task({"index": 4, "host": "node7", "pid": 99, "start": 1.0, "stop": 2.5,
                  "error": tb, "cpu_model": "ignored"}, received=3.0)
    task = rec.tasks[0]
    assert task == TaskRecord(index=4, worker="node7-99", host="node7", pid=99, start=1.0,
                              stop=2.5, error="ValueError: bad chunk")
    assert rec.end == 3.0 and rec.n_tasks == 1
    with pytest.raises(ValueError, match="stop"):
        rec.add_task({"index": 5, "worker": "w", "start": 1.0})


def test_add_task_same_index_replaces():
    rec = RunRecord(start=0.0)
    rec.add_task({"index": 0, "worker": "dead", "start": 0, "stop": 1})
    rec.add_task({"index": 1, "worker": "w", "start": 0, "stop": 1})
    rec.add_task({"index": 0, "worker": "w", "start": 1, "stop": 2, "retries": 1})
    assert [(t.index, t.worker, t.retries) for t in rec.tasks] == [(0, "w", 1), (1, "w", 0)]


def test_short_error_is_one_bounded_line():
    assert short_error(KeyError("x")) == "KeyError: 'x'"
    assert len(short_error("E: " + "x" * 1000)) == 200
    assert short_error(None) is None


def test_save_load_round_trip(tmp_path: Path):
    rec = synthetic_record(n_workers=5, n_tasks=40, seed=3)
    path = rec.save(tmp_path / "sub" / "run.json")
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["n_tasks"] == 40 and len(data["tasks"]) == 40
    assert set(data["tasks"][0]) == {"index", "worker", "host", "pid", "start", "stop", "bytes_cache",
                                     "bytes_disk", "bytes_file", "files_opened", "error", "retries", "events"}
    assert set(data["metrics"][0]) == {"t", "worker", "cpu", "rss", "cache_bytes",
                                       "cache_entries", "bytes_read", "disk_bytes", "net_recv", "net_sent",
                                       "disk_read", "disk_write", "node_cpu", "node_mem"}
    loaded = RunRecord.load(path)
    assert loaded == rec
    assert efficiency(loaded) == efficiency(rec)
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temp file left behind


def test_load_rejects_newer_format_and_garbage(tmp_path: Path):
    future = tmp_path / "future.json"
    future.write_text(json.dumps({"version": 2, "tasks": []}))
    with pytest.raises(ValueError, match="upgrade"):
        RunRecord.load(future)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(ValueError, match="not a run record"):
        RunRecord.load(garbage)


# --- the plot and the command ----------------------------------------------------------

def test_plot_big_run_is_fast_and_uses_few_artists(tmp_path: Path):
    rec = synthetic_record(n_workers=150, n_tasks=10_000)
    assert len(rec.workers) == 150
    path = tmp_path / "timeline.png"
    began = time.perf_counter()
    fig = plot_timeline(rec, path=path)
    elapsed = time.perf_counter() - began
    assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 20_000
    assert elapsed < 20, f"plotting 10,000 tasks took {elapsed:.1f} s"
    tasks_ax, hist_ax, cpu_ax, numbers_ax = fig.axes
    assert len(tasks_ax.collections) <= 6  # one collection per colour, not per task
    assert len(tasks_ax.patches) < 10
    assert tasks_ax.get_yticklabels() == [] or not any(
        label.get_text().startswith("node") for label in tasks_ax.get_yticklabels())
    assert "efficiency" in fig.get_suptitle() and "events/s" in fig.get_suptitle()
    assert cpu_ax.get_ylabel() == "CPU %"


def test_plot_small_run_labels_workers_and_draws_into_given_axes():
    from matplotlib.figure import Figure

    rec = make_record([("a", 0, 5), ("b", 1, 10)], start=0.0, end=10)
    fig = plot_timeline(rec, metrics=False)
    assert len(fig.axes) == 2  # no metrics -> no CPU panel
    assert [label.get_text() for label in fig.axes[0].get_yticklabels()] == ["a", "b"]
    own = Figure()
    ax = own.add_subplot()
    assert plot_timeline(rec, ax=ax) is own and len(own.axes) == 1


def test_timeline_command_writes_png_and_prints_numbers(tmp_path: Path):
    rec = make_record([("a", 101, 105), ("a", 105, 110), ("a", 112, 118),
                       ("b", 106, 109), ("b", 115, 120)], start=100, end=120, events=1000)
    record_path = rec.save(tmp_path / "run.json")
    out = tmp_path / "timeline.png"
    result = CliRunner().invoke(timeline_command, [str(record_path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert "efficiency   74.2%" in result.output  # 23/31
    assert "to map end   69.7%" in result.output  # 23/33
    assert "min 57.1%, median 72.7%" in result.output  # 8/14, (15/17 + 8/14)/2
    assert "events/s     250" in result.output  # 5000 events / 20 s
    assert "tail         0.00 s" in result.output

    default = CliRunner().invoke(timeline_command, [str(record_path)])
    assert default.exit_code == 0 and (tmp_path / "run.png").exists()


def test_timeline_command_reports_bad_record(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    result = CliRunner().invoke(timeline_command, [str(bad)])
    assert result.exit_code != 0 and "not a run record" in result.output
