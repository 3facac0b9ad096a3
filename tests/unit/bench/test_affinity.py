"""``bench affinity``'s arithmetic (bench/affinity.py ``_tiers``), without processes: the
velocity of a tier is the input MB over the median seconds its tasks held a worker (and
over the median wall time x the workers), the served-from shares count the tasks of every
repeat, the ratios are against cold-local and cold-SE, and tiers that got different
answers are an error naming them, never a table."""
from __future__ import annotations

import pytest

from rhtc.bench.affinity import TIERS, _tiers, table


def _phase(phase: str, wall: float, task: float, served: dict, pairs: int = 7) -> dict:
    return {f"{phase}_runs_s": [wall], f"{phase}_task_runs_s": [task], f"{phase}_served": served,
            f"{phase}_bytes_file": 10 if "miss" in served else 0, f"{phase}_bytes_disk": 0,
            f"{phase}_bytes_cache": 0, f"{phase}_files_opened": 0, f"{phase}_events": 100, f"{phase}_pairs": pairs}


def _repeat(se_task: float, pairs: int = 7) -> dict:
    return {"se": _phase("cold", 4.0, se_task, {"miss": 3}),
            "local": {**_phase("cold", 2.0, 2.0, {"miss": 3}), **_phase("warm", 0.5, 0.25, {"hit": 3}, pairs)},
            "disk": {**_phase("cold", 3.0, 3.0, {"miss": 3}), **_phase("restart", 1.0, 0.5, {"disk": 2, "miss": 1})}}


def test_velocities_shares_and_ratios():
    got = _tiers([_repeat(4.0), _repeat(8.0), _repeat(6.0)], input_mb=12.0, workers=2, n_events=100, se_rate=25)
    tiers = got["tiers"]
    assert list(tiers) == list(TIERS) and tiers["se"]["label"].endswith(", 25 MB/s")
    assert tiers["se"]["task_s"] == 6.0 and tiers["se"]["velocity_mb_s_core"] == 2.0       # the median of 4, 8, 6
    assert tiers["se"]["wall_velocity_mb_s_core"] == 12.0 / (4.0 * 2)
    assert tiers["ram"]["velocity_mb_s_core"] == 48.0 and tiers["ram"]["served"] == {"hit": 1.0}
    assert tiers["disk"]["served"] == {"disk": 6 / 9, "miss": 3 / 9} and tiers["disk"]["tasks"] == 9
    assert got["ratios"]["over_local"] == {"se": 1 / 3, "local": 1.0, "disk": 4.0, "ram": 8.0}
    assert got["ratios"]["over_se"]["ram"] == 24.0
    printed = table(got)
    assert printed.count("\n") == 5 and "warm, RAM" in printed and "67%" in printed


def test_tiers_with_different_answers_are_an_error():
    with pytest.raises(AssertionError, match="warm answer is the cold answer.*'ram': {\\(100, 8\\)}"):
        _tiers([_repeat(4.0, pairs=8)], input_mb=12.0, workers=2, n_events=100, se_rate=25)
