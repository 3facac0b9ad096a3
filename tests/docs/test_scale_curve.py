"""docs/scale.md's scaling curve comes from the result it names: its picture is one that the
build draws from a result (docs/_static/figures/ is not in git), and its table and verdicts
are what ``bench scale --curve-of`` prints from that result's JSON, so the page cannot
quote figures that no result holds."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rhtc.bench import results, scalecurve
from rhtc.bench.scale import scale_command

DOCS = Path(__file__).resolve().parents[2] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
PAGE = DOCS / "scale.md"


def test_every_picture_a_page_shows_is_drawn_from_a_result(tmp_path):
    pytest.importorskip("sphinx")                     # (the docs' extension: the [docs] extra)
    from rhtc_docgen import benchmarks, figures
    newest = {series: docs[0][1] for series, docs in benchmarks.load_results(DOCS, lambda m: None).items()}
    drawn = {image: paint for series, doc in newest.items() for image, _, paint in figures.pictures(series, doc)}
    shown = {m for page in DOCS.glob("*.md") for m in re.findall(r"_static/figures/[\w.-]+\.png", page.read_text())}
    assert figures.CURVE in shown, "docs/scale.md shows the scaling curve"
    assert shown <= set(drawn), f"shown but drawn from no result: {sorted(shown - set(drawn))}"
    out = drawn[figures.CURVE](tmp_path / "curve.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_curve_s_table_and_verdicts_are_what_the_bench_prints_from_its_result(tmp_path):
    named = re.findall(r"benchmarks/results/(scale-curve-[\w.-]+\.json)", PAGE.read_text())
    assert named, "docs/scale.md names the result its curve comes from"
    path = DOCS / "benchmarks" / "results" / named[0]
    assert results.read(path)["series"] == scalecurve.SERIES
    got = CliRunner().invoke(scale_command, ["--curve-of", str(path), "--plot", ""])
    assert got.exit_code == 0, got.output
    printed = [line for line in got.output.splitlines() if line.strip()]
    quoted = PAGE.read_text().splitlines()
    missing = [line for line in printed if line not in quoted]
    assert not missing, f"docs/scale.md does not quote what `bench scale --curve-of {path.name}` prints: {missing}"
