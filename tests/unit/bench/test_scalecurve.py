"""The scaling curve's judgement (bench/scalecurve.py), from constructed cells: where a line
of the curve flattens (its tasks/s against the ideal) and which CPU ran out there, every
bend-back named, and the picture drawn from the JSON alone. The bench itself on light
workers: tests/scenarios/test_bench_scale_curve.py. Pure: the quick tier."""
from __future__ import annotations

import pytest

from rhtc.bench import results, scalecurve
from rhtc.bench.scalecurve import CELL_SECONDS, MIN_WAVES, annotate, judge, out_of_cpu, verdict_lines, waves_for

#: a quiet cell's CPU: nothing near full
QUIET = {"redis_cpu_share": 0.1, "client_cpu_share": 0.1, "light_workers_cores": 0.2, "machine_busy_cores": 0.5}


def cell(workers: int, seconds: float, tasks_per_s: float, stretch: float = 1.0, **cpu) -> dict:
    """A measured cell of ``bench scale`` (the figures the curve reads), whose tasks ran
    ``stretch`` times their length."""
    tasks = 30 * workers
    return {"workers": workers, "seconds": seconds, "bytes": 10_000, "merge": True, "tasks": tasks,
            "tasks_per_s": tasks_per_s, "busy_s": tasks * seconds * stretch,
            "efficiency_wall": min(1.0, tasks_per_s * seconds / workers * stretch), **QUIET, **cpu}


def test_each_cell_ideally_lasts_the_same_whatever_its_task_length():
    for seconds in (0.1, 1.0, 10.0):
        assert waves_for(seconds) * seconds == pytest.approx(CELL_SECONDS)
    assert waves_for(2 * CELL_SECONDS) == MIN_WAVES, "a long task still runs a few waves"


def test_a_curve_that_keeps_growing_is_neither_flat_nor_bent():
    cells = [cell(10, 1.0, 9.6), cell(50, 1.0, 47.0), cell(100, 1.0, 93.0)]
    judged = judge(cells, cores=2)
    assert [j["flattened"] for j in judged] == [None] * 3 and [j["bend_back"] for j in judged] == [None] * 3
    assert [j["ideal_tasks_per_s"] for j in judged] == [10.0, 50.0, 100.0]
    assert [j["of_ideal"] for j in judged] == pytest.approx([0.96, 0.94, 0.93])
    assert verdict_lines(annotate({"cores": 2, "cells": cells})) == [
        "the curve: 0 flattened cell(s) of 3", "the curve never bends back"]


def test_fewer_tasks_per_second_with_more_workers_is_a_bend_back():
    cells = [cell(100, 1.0, 90.0), cell(200, 1.0, 170.0), cell(500, 1.0, 169.9)]
    judged = judge(cells, cores=2)
    assert judged[1]["bend_back"] is None
    assert judged[2]["bend_back"] == ("BEND-BACK: 500 workers x 1 s x 10 kB merged ran 169.9 tasks/s, fewer than "
                                      "170.0 at 200 workers: more workers did less")
    lines = verdict_lines(annotate({"cores": 2, "cells": cells}))
    assert lines[-1] == "THE CURVE BENDS BACK at 1 cell(s)" and judged[2]["bend_back"] in lines


def test_the_same_tasks_per_second_is_flat_but_not_bent_back():
    judged = judge([cell(100, 1.0, 90.0), cell(200, 1.0, 90.0)], cores=2)
    assert judged[1]["bend_back"] is None
    assert judged[1]["flattened"] == ("45.0 % of the ideal < 90 % of the line's best, 90.0 %; "
                                      "tasks/s grew less than 10 % over 90.0 at 100 workers")


def test_tasks_per_second_that_barely_grow_have_flattened():
    judged = judge([cell(100, 1.0, 90.0), cell(110, 1.0, 98.0)], cores=2)
    assert judged[1]["flattened"] == "tasks/s grew less than 10 % over 90.0 at 100 workers", \
        "89 % of the ideal is within 90 % of the best, yet 10 % more workers added 8.9 % more tasks/s"


def test_each_line_is_judged_against_its_own_cells():
    """The bench runs every task length at one worker count before the next: a 10 s cell
    is compared with the 10 s cell of fewer workers, never with the 0.1 s cell before it."""
    cells = [cell(10, 0.1, 95.0), cell(10, 10.0, 0.95), cell(50, 0.1, 470.0), cell(50, 10.0, 4.7)]
    judged = judge(cells, cores=2)
    assert all(j["bend_back"] is None and j["flattened"] is None for j in judged)


def test_a_line_flattens_under_ninety_percent_of_its_best_share_of_the_ideal():
    cells = [cell(10, 1.0, 8.0), cell(50, 1.0, 47.5), cell(100, 1.0, 86.0), cell(200, 1.0, 170.0, stretch=1.2)]
    judged = judge(cells, cores=2)
    assert judged[0]["flattened"] == "80.0 % of the ideal < 90 % of the line's best, 95.0 %", \
        "the first cell has no cell before it, but a best to fall short of"
    assert judged[1]["flattened"] is None
    assert judged[2]["flattened"] is None, "86 % is over 90 % of 95 % (85.5 %)"
    assert cells[3]["efficiency_wall"] == 1.0
    assert judged[3]["flattened"] == "85.0 % of the ideal < 90 % of the line's best, 95.0 %", \
        "the tasks/s, not the wall-clock efficiency that counts stretched tasks as busy"
    assert judged[3]["task_stretch"] == pytest.approx(1.2)


def test_a_skipped_or_failed_cell_is_not_judged_and_does_not_break_its_line():
    cells = [cell(100, 1.0, 90.0), {"workers": 200, "seconds": 1.0, "bytes": 10_000, "failed": "lost"},
             cell(500, 1.0, 80.0)]
    judged = judge(cells, cores=2)
    assert judged[1] is None
    assert "fewer than 90.0 at 100 workers" in judged[2]["bend_back"]
    annotate({"cores": 2, "cells": cells})
    assert "ideal_tasks_per_s" not in cells[1] and cells[2]["out_of_cpu"] == []


@pytest.mark.parametrize("cpu, names", [
    ({}, []),
    ({"redis_cpu_share": 0.9}, ["broker"]),
    ({"client_cpu_share": 0.95, "machine_busy_cores": 1.0}, ["client"]),
    ({"machine_busy_cores": 1.9, "light_workers_cores": 1.2}, ["harness"]),
    ({"machine_busy_cores": 1.9, "light_workers_cores": 0.3}, ["machine"]),     # 1.3 cores of other processes
    ({"redis_cpu_share": 0.86, "machine_busy_cores": 1.95, "light_workers_cores": 0.8}, ["broker", "harness"]),
    ({"redis_cpu_share": 0.84, "machine_busy_cores": 1.69}, []),               # just under near-full, each
    # half the ideal: the stretch of 1.5 explains 58 % of the shortfall, 1.4 explains 49 %
    ({"stretch": 1.5}, ["harness"]),                      # its tasks waited for a CPU the light workers took
    ({"stretch": 1.5, "machine_busy_cores": 1.2, "light_workers_cores": 0.1}, ["machine"]),   # others took it
    ({"stretch": 1.4}, []),                               # the gaps between tasks, mostly
])
def test_a_flattened_cell_says_which_cpu_ran_out(cpu, names):
    flat = [cell(10, 1.0, 9.5), cell(100, 1.0, 50.0, **cpu)]
    assert out_of_cpu(flat[1], cores=2)[0] == names
    (_, j) = judge(flat, cores=2)
    assert j["out_of_cpu"] == names
    if names:
        assert " and ".join(scalecurve.WHO[n] for n in names) + " ran out of CPU" in j["verdict"]
    else:
        assert "no CPU ran out" in j["verdict"]
    c = flat[1]
    others = c["machine_busy_cores"] - c["light_workers_cores"] - c["redis_cpu_share"] - c["client_cpu_share"]
    assert f"tasks ran {cpu.get('stretch', 1.0):.2f}x their length" in j["verdict"]
    assert f"({scalecurve.stretch_share(c) * 100:.0f} % of the shortfall)" in j["verdict"]
    assert j["verdict"].endswith(f"the light workers {c['light_workers_cores']:.2f}, other processes "
                                 f"{max(0.0, others):.2f}"), "the verdict quotes the figures it was judged by"


def test_the_stretch_and_the_gaps_split_a_cells_shortfall():
    """A quarter of the ideal: a stretch of 2 (the tasks ran twice their length) explains
    half of it, the gaps between tasks (a wall-clock efficiency of 50 %) the other half."""
    c = cell(100, 1.0, 25.0, stretch=2.0)
    assert c["efficiency_wall"] == 0.5 and scalecurve.stretch_share(c) == pytest.approx(0.5)
    assert scalecurve.stretch_share(cell(100, 1.0, 25.0, stretch=4.0)) == pytest.approx(1.0), "all of it"
    assert scalecurve.stretch_share(cell(100, 1.0, 100.0)) == 0.0, "at the ideal, nothing is short"


def test_a_cell_that_did_not_flatten_has_no_verdict_however_busy():
    judged = judge([cell(10, 1.0, 9.5), cell(100, 1.0, 94.0, redis_cpu_share=0.99)], cores=2)
    assert judged[1]["verdict"] is None and judged[1]["out_of_cpu"] is None


def _is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_curve_is_drawn_from_its_json_alone(tmp_path):
    cells = [cell(w, s, w / s * e) for w, e in ((10, 0.95), (50, 0.9), (100, 0.6)) for s in (0.1, 1.0)]
    cells.append(cell(200, 1.0, 50.0))                                        # a bend-back
    path = tmp_path / "curve.json"
    results.write(path, "scale", {"cores": 2, "cells": cells}, series=scalecurve.SERIES)   # not judged
    out = scalecurve.plot(results.read(path), tmp_path / "fig" / "curve.png")
    assert out.stat().st_size > 10_000 and _is_png(out)
    assert "out_of_cpu" not in results.load(path)["cells"][0], "drawing judges a copy, not the file's figures"
    bare = scalecurve.plot({"cores": 2, "cells": cells}, tmp_path / "bare.png")     # figures without an envelope
    assert _is_png(bare)


def test_a_result_without_a_measured_cell_cannot_be_drawn(tmp_path):
    skipped = {"workers": 10, "seconds": 1.0, "bytes": 10_000, "skipped": "over the budget"}
    with pytest.raises(ValueError, match="no measured cell"):
        scalecurve.plot({"cores": 2, "cells": [skipped]}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()
