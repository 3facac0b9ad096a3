"""``benchmarks.md``: every benchmark result under ``docs/benchmarks/results/`` (JSON files
with the envelope of :mod:`rhtc.bench.results`): for each bench the newest result's figures,
with its date, machine, commit and command, and the older results listed below it. A result
copied from an earlier README rather than measured says so (``transcribed_from``). Figures
drawn from the results (:mod:`.figures`) are placed under the bench that they come from."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from . import figures as drawings
from .md import cell, generated_note, machine_text, table

RESULTS = "benchmarks/results"
#: rows of one result's figures table at most (the JSON file has them all)
MAX_ROWS = 40
NEEDED = ("bench", "date", "machine", "commit", "command", "figures")


def load_results(srcdir: Path, warn: Callable[[str], None]) -> dict[str, list[tuple[Path, dict]]]:
    """series -> [(file, document)], newest first. A series is a bench (``bench``), or one
    setting of it that a result names with ``series`` (such as the 150-worker runs)."""
    out: dict[str, list[tuple[Path, dict]]] = {}
    for path in sorted((srcdir / RESULTS).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError as exc:
            warn(f"{path.name}: not JSON ({exc})")
            continue
        missing = [k for k in NEEDED if k not in doc]
        if missing:
            warn(f"{RESULTS}/{path.name} has no {', '.join(missing)}: write results with a bench's --json "
                 f"(rhtc.bench.results), or add the envelope by hand for a transcribed figure")
            continue
        out.setdefault(doc.get("series") or doc["bench"], []).append((path, doc))
    for docs in out.values():
        docs.sort(key=lambda pd: (pd[1]["date"], pd[0].name), reverse=True)
    return out


def draw_figures(srcdir: Path) -> None:
    """Draw the pictures of each series' newest result (:mod:`.figures`); before the pages
    are read, so that a page may show one (the page of results says what is wrong with a
    file)."""
    for series, ((_, doc), *_) in load_results(srcdir, lambda msg: None).items():
        for image, _, paint in drawings.pictures(series, doc):
            paint(srcdir / image)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted name, shown value) of every figure in a nested result."""
    if isinstance(value, dict):
        rows = []
        for k, v in value.items():
            rows += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(value, list):
        if all(isinstance(v, (int, float, str, bool)) or v is None for v in value):
            shown = ", ".join(_number(v) for v in value[:12]) + (", ..." if len(value) > 12 else "")
            return [(prefix, f"[{shown}]")]
        return [(prefix, f"{len(value)} entries (in the JSON file)")]
    return [(prefix, _number(value))]


def _number(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def _about(path: Path, doc: dict) -> list[str]:
    commit = doc.get("commit") or "unknown"
    lines = [f"- **date**: {doc['date']}",
             f"- **machine**: {cell(machine_text(doc.get('machine') or {}))}",
             f"- **commit**: `{commit[:12]}`{' (with uncommitted changes)' if doc.get('dirty') else ''}",
             f"- **command**: `{doc['command']}`",
             f"- **file**: {{download}}`{path.name} <{RESULTS}/{path.name}>`"]
    if doc.get("transcribed_from"):
        lines.insert(0, f"- **transcribed**, not measured by this file's command: copied from "
                        f"{doc['transcribed_from']}; the figures are the README's, the machine "
                        f"its 'development VM'. Re-run the command to replace it.")
    return lines


def page(srcdir: Path, warn: Callable[[str], None]) -> str:
    results = load_results(srcdir, warn)
    out = ["# Benchmarks", "",
           generated_note("the JSON results in `docs/benchmarks/results/`"),
           "Each figure here comes from a result file that a bench wrote (`bench <name> ... --json "
           "docs/benchmarks/results/<name>-<date>.json`): the figures with the date, the machine, "
           "the commit and the exact command. Every bench measures the others it compares against "
           "(dask, coffea, the bare loop) in the same run. For each bench the newest result comes "
           "first; older ones are listed below it. To add a result, run the bench with `--json` "
           "into that folder and rebuild the docs.", ""]
    if not results:
        out += ["No results yet.", ""]
    for series in sorted(results):
        (path, doc), *older = results[series]
        title = f"bench {series}" if series == doc["bench"] else f"bench {doc['bench']}: {series.split(', ', 1)[-1]}"
        out += [f"## {title}", "", *_about(path, doc), ""]
        for image, caption, _ in drawings.pictures(series, doc):
            out += [f"```{{figure}} {image}", f":alt: {caption}", "", caption, "```", ""]
        rows = flatten(doc["figures"])
        shown = rows[:MAX_ROWS]
        out += [table(["figure", "value"], [(f"`{k}`", v) for k, v in shown])]
        if len(rows) > len(shown):
            out += [f"({len(rows) - len(shown)} more figures in the file.)", ""]
        if older:
            out += ["Earlier results:", ""]
            out += [f"- {d['date']}: `{d['command']}` at `{(d.get('commit') or 'unknown')[:12]}`"
                    f"{' (transcribed)' if d.get('transcribed_from') else ''}; "
                    f"{{download}}`{p.name} <{RESULTS}/{p.name}>`" for p, d in older]
            out += [""]
    return "\n".join(out)
