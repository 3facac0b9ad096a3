"""``bench scale --curve`` at a CI size, so that it cannot rot: a tiny curve (2 worker
counts x 2 short task lengths) on light workers, each cell's row, the verdicts and the
bend-backs as the JSON has them, the picture, and the same verdicts again from the JSON
alone (``--curve-of``). What the verdicts conclude, from constructed figures:
tests/unit/bench/test_scalecurve.py."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from rhtc.bench import results, scale, scalecurve
from rhtc.bench.scale import scale_command

#: starts its own broker and light-worker processes: the full suite only
pytestmark = pytest.mark.heavy

PNG = b"\x89PNG\r\n\x1a\n"


def test_a_tiny_scaling_curve(tmp_path, monkeypatch):
    monkeypatch.setattr(scale, "IDLE_SECONDS", 1.0)       # (the bench reads whole idle cycles: 16 s)
    monkeypatch.setattr(scale, "SETTLE_SECONDS", 0.5)
    monkeypatch.setattr(scalecurve, "CELL_SECONDS", 0.4)  # each cell ideally 0.4 s: 8 waves of 0.05 s, 4 of 0.1 s
    out, png = tmp_path / "curve.json", tmp_path / "curve.png"
    got = CliRunner().invoke(scale_command, ["--curve", "--workers", "4,8", "--seconds", "0.05,0.1",
                                             "--processes", "2", "--json", str(out), "--plot", str(png)])
    assert got.exit_code == 0, got.output
    doc = results.read(out)
    assert doc["series"] == scalecurve.SERIES and doc["command"].startswith("bench") and doc["date"]
    data = doc["figures"]
    assert data["waves"] == {"0.05": 8, "0.1": 4}, "each task length its own waves (--waves not given)"
    cells = data["cells"]
    assert [(c["workers"], c["seconds"], c["bytes"]) for c in cells] == [
        (4, 0.05, 10_000), (4, 0.1, 10_000), (8, 0.05, 10_000), (8, 0.1, 10_000)], "--sizes: the curve's 10 kB"
    lines = got.output.splitlines()
    for c in cells:
        assert c["tasks"] == data["waves"][f"{c['seconds']:g}"] * c["workers"] and c["tasks_per_s"] > 0
        assert c["ideal_tasks_per_s"] == pytest.approx(c["workers"] / c["seconds"])
        assert c["of_ideal"] == pytest.approx(c["tasks_per_s"] / c["ideal_tasks_per_s"])
        assert c["task_stretch"] >= 0.99, "a light task sleeps its length at least"
        assert 0 < c["efficiency_wall"] <= 1
        assert c["redis_cpu_share"] > 0 and c["client_cpu_share"] > 0
        assert c["light_workers_cores"] >= 0 and c["machine_busy_cores"] > 0
        assert scalecurve.format_row(c) in lines, "every cell's row in the table"
        if c["flattened"]:
            assert c["verdict"] in lines and set(c["out_of_cpu"]) <= set(scalecurve.WHO)
        else:
            assert c["verdict"] is None and c["out_of_cpu"] is None
        if c["bend_back"]:
            assert c["bend_back"] in lines
    # (one tiny cell's light CPU may round to 0: the kernel counts it in 10 ms ticks)
    assert sum(c["light_workers_cores"] for c in cells) > 0, "the light workers' own CPU is measured"
    backs = [c for c in cells if c["bend_back"]]
    assert (f"THE CURVE BENDS BACK at {len(backs)} cell(s)" if backs else "the curve never bends back") in lines
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000
    assert f"the curve drawn: {png}" in lines
    # the verdicts and the picture again, from the JSON alone
    again = CliRunner().invoke(scale_command, ["--curve-of", str(out), "--plot", str(tmp_path / "again.png")])
    assert again.exit_code == 0, again.output
    verdicts = scalecurve.verdict_lines(data)
    assert verdicts[0].startswith("the curve: ") and all(v in again.output.splitlines() for v in verdicts)
    assert (tmp_path / "again.png").read_bytes()[:8] == PNG
