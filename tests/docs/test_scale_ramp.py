"""docs/scale.md's ramp beside other work comes from the results it names: its side-by-side
table is the lines ``bench scale --cpu-group both`` printed and saved in that result's JSON,
and every ramp figure the section quotes is one of those results' cells, so the page cannot
quote a ramp that no result holds."""
from __future__ import annotations

import re
from pathlib import Path

from rhtc.bench import results, scale

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = DOCS / "scale.md"


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("### The ramp on a shared machine")
    return text[start:text.index("\n## ", start)]


def _named() -> list[dict]:
    names = re.findall(r"benchmarks/results/(scale-ramp[\w.-]*\.json)", _section())
    assert names, "the ramp section names the results its figures come from"
    return [results.read(DOCS / "benchmarks" / "results" / n) for n in names]


def test_the_side_by_side_table_is_what_the_bench_printed():
    both = [d for d in _named() if "groups_compared" in d["figures"]]
    assert both, "a --cpu-group both result is named"
    lines = _section().splitlines()
    for doc in both:
        table = doc["figures"]["groups_compared"]
        assert table == scale.group_lines(doc["figures"]["cells"])
        missing = [line for line in table if line not in lines]
        assert not missing, f"docs/scale.md does not quote what the bench printed: {missing}"


def test_every_ramp_figure_quoted_is_a_results():
    held = set()
    for doc in _named():
        for c in doc["figures"]["cells"]:
            for key in ("first_task_ms_median", "first_task_ms_max"):
                if key in c:
                    held.add(f"{c[key] / 1000:.2f} s")
    quoted = set(re.findall(r"\b\d+\.\d\d s\b", _section()))
    assert quoted, "the section quotes the ramp in seconds"
    assert quoted <= held, f"quoted but in no named result: {sorted(quoted - held)}"
