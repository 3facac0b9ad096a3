"""Efficiency that does not flatter: the wall-clock efficiency of a map (busy task
time / (workers x the map's submission to its last result)) beside the per-worker one, in
the efficiency dict, the timeline and ``rhtc timeline``; the dashboard's tally of a map
agrees with its record. Pure: the quick tier. (The ceiling on paper, bench/ceiling.py:
tests/unit/bench/test_ceiling.py.)

Expected figures are worked out by hand in each test."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.client.reports.efficiency import MapTally, efficiency
from rhtc.client.reports.record import RunRecord
from rhtc.client.reports.timeline import plot_timeline, timeline_command


def ramp_and_tail_record() -> RunRecord:
    """10 workers; worker k's first task starts 1 + 0.5 k s after the submission (at 1000 s:
    a 4.5 s ramp), then 5 tasks of 2 s back to back (never idle between its first task and
    its last); the last task ends at 1015.5 and its result reaches the client at 1016.5."""
    rec = RunRecord(map_id="ramp", function="sleepy", start=1000.0, n_tasks=50)
    for k in range(10):
        for j in range(5):
            start = 1000.0 + 1 + 0.5 * k + 2 * j
            rec.add_task({"index": 5 * k + j, "worker": f"w{k}", "start": start, "stop": start + 2})
    rec.end = 1016.5
    return rec


def test_a_ramp_and_a_tail_count_by_the_wall_clock_not_per_worker():
    eff = efficiency(ramp_and_tail_record())
    # per worker: busy 10 s over a 10 s span each -> 100 %
    assert eff["per_worker"] == pytest.approx({f"w{k}": 1.0 for k in range(10)})
    assert eff["efficiency"] == pytest.approx(1.0)
    # by the wall clock: 50 tasks x 2 s = 100 busy seconds of 10 workers x 16.5 s
    assert eff["wall"] == pytest.approx(16.5)
    assert eff["efficiency_wall"] == pytest.approx(100 / 165)
    # the old stricter figure counts the tail but not the ramp: spans to the end are
    # 16.5 - (1 + 0.5 k) s, summed over k = 0..9: 155 - 22.5 = 132.5
    assert eff["efficiency_to_end"] == pytest.approx(100 / 132.5)
    assert list(eff).index("efficiency_wall") < list(eff).index("efficiency"), "the wall-clock figure comes first"


def test_the_workers_are_those_that_took_part_and_a_late_one_is_charged_the_whole_wall():
    # map 0-20 s: a works 1-19, late joins at 15 and works to 19 (its 14 s before count
    # against the map), and the pool's idle worker c never appears: it is not counted.
    rec = RunRecord(start=100.0, end=120.0)
    rec.add_task({"index": 0, "worker": "a", "start": 101, "stop": 119})
    rec.add_task({"index": 1, "worker": "late", "start": 115, "stop": 119})
    eff = efficiency(rec)
    assert eff["efficiency_wall"] == pytest.approx((18 + 4) / (2 * 20))
    assert eff["efficiency"] == pytest.approx(1.0)


def test_failed_attempts_kept_their_worker_busy_and_a_saved_record_gives_the_same_figure(tmp_path):
    rec = RunRecord(start=0.5, end=10.0)
    rec.add_task({"index": 0, "worker": "a", "start": 4, "stop": 10})
    rec.add_attempt({"index": 0, "worker": "b", "start": 1, "stop": 3, "outcome": "lost"})
    eff = efficiency(rec)
    # busy 6 + 2 on 2 workers over 9.5 s
    assert eff["efficiency_wall"] == pytest.approx(8 / 19)
    again = RunRecord.load(rec.save(tmp_path / "run.json"))
    assert efficiency(again)["efficiency_wall"] == eff["efficiency_wall"]
    assert again.summary()["efficiency_wall"] == eff["efficiency_wall"]


def test_the_timeline_title_and_rhtc_timeline_show_the_wall_clock_figure_first(tmp_path):
    rec = ramp_and_tail_record()
    fig = plot_timeline(rec)
    title = fig.get_suptitle()
    assert "efficiency 60.6% by the wall clock, 100.0% per worker" in title
    path = rec.save(tmp_path / "run.json")
    got = CliRunner().invoke(timeline_command, [str(path), "-o", str(tmp_path / "run.png")])
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert lines[1].startswith("wall clock   60.6%  (busy 100.0 s of 10 workers x 16.5 s"), lines
    assert lines[2].startswith("efficiency   100.0%  per worker"), lines


tasks_of_a_map = st.lists(st.tuples(st.integers(0, 5), st.floats(0.0, 3.0), st.floats(0.0, 2.0)), min_size=1,
                          max_size=40)


@settings(max_examples=80, deadline=None)
@given(tasks_of_a_map, st.floats(0.0, 5.0), st.floats(0.0, 3.0))
def test_the_dashboards_tally_of_a_map_is_the_records_figure(runs, ramp, tail):
    """MapTally (the dashboard reads a map's tasks one at a time from the feed) gives the
    record's figures for any map whose workers run one task at a time."""
    clock: dict[int, float] = {}
    rec, tally = RunRecord(start=1000.0), MapTally()
    for index, (worker, gap, duration) in enumerate(runs):
        start = clock.get(worker, 1000.0 + ramp) + gap
        clock[worker] = start + duration
        rec.add_task({"index": index, "worker": f"w{worker}", "start": start, "stop": start + duration})
        tally.add(f"w{worker}", start, start + duration)
    rec.end = max(clock.values()) + tail
    want, got = efficiency(rec), tally.figures(rec.start, rec.end)
    for key in ("efficiency_wall", "efficiency", "efficiency_to_end", "busy", "span"):
        assert got[key] == pytest.approx(want[key]), key
    assert got["per_worker"] == pytest.approx(want["per_worker"])
    assert got["efficiency_wall"] <= got["efficiency"] + 1e-12
